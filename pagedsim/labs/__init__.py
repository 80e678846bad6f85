"""Labs: each module is one `pagedsim` sub-command with a `main(argv) -> int`.

    waste.py      paged vs max/pow2/oracle memory breakdown (vLLM Fig. 2), with contiguous.py
                  (first-fit replay) and sharing.py (blocks saved by samples and beams)
    sweep.py      block sizes 1..256: waste, tables, batch, preemptions, prefix hits
    policies.py   lru/lfu/fifo x recompute/swap on one trace
    swapcost.py   swap vs recompute cost model, with the crossover

and the 3.7 layout lab's NumPy side: kv_layouts.py (the KV-cache layout registry, which the
kernels in cuda_kernels.labs.layouts attach their loaders to) and sectors.py (what one warp's
load costs in 32-byte sectors in each layout).
"""
