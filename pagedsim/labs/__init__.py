"""Labs: each module is one `pagedsim` sub-command with a `main(argv) -> int`.

    waste.py      paged vs max/pow2/oracle memory breakdown (vLLM Fig. 2), with contiguous.py
                  (first-fit replay) and sharing.py (blocks saved by samples and beams)
    sweep.py      block sizes 1..256: waste, tables, batch, preemptions, prefix hits
    policies.py   lru/lfu/fifo x recompute/swap on one trace
    swapcost.py   swap vs recompute cost model, with the crossover
"""
