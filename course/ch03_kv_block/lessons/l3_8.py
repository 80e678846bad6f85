"""Lesson 3.8 (capstone): one `pagedsim generate` run, read as the whole chapter."""

from __future__ import annotations

TITLE = "Capstone: the blocks serve a model"
TITLE_ZH = "收官：Block 为模型服务"
FIGURES = [("3.6-core-flow", "the flow diagram the demo draws after every engine step of its run "
            "(generate-step_000.png ... in the demo's folder; `pagedsim generate --draw DIR` draws them too)"),
           ("3.4-tour", "fork, copy-on-write and free on a small pool: the moments 3.4 points at in the run")]
TEXT = """
Everything so far moved block ids around. Here the ids carry a real model's K and V. A
tiny transformer (2 layers, 4 query and 2 KV heads, head_dim 16, seeded weights) serves four
requests from a pool of 10 blocks x 4 tokens. The requests are a greedy prompt, two
sampled answers to one question (n = 2), a beam search of width 2, and a repeat of the
first prompt. A step has a budget of 8 tokens. Attention runs through the kernels:
`write_kv` puts each new token's K/V into its slot; `paged_prefill` serves prompt chunks and
`paged_attention` serves single-token decodes. Both read K/V only through block tables.
A dense engine with contiguous per-sequence arrays and no blocks runs the same requests.
The run is correct if not one token differs.

Watch the demo for one moment from each section:
  3.1  Requests of different lengths share one pool. No request needs a contiguous range,
       so a freed block is always usable: the pool fragments only inside last blocks.
  3.2  One block id names K and V of every layer. The demo prints the block's bytes, and
       copy-on-write and swapping move exactly whole blocks of that size.
  3.3  The block table is a kernel argument. A prompt's slots come from it (write_kv),
       and a query reads K/V through it (paged_prefill, paged_attention).
  3.4  n = 2 and beam search fork: the children share the prompt's blocks, and their ref
       counts go up. The first write into a shared, half-full last block copies it
       (copy_blocks). A beam that falls out is freed; a block returns to the free list
       only when its count reaches 0.
  3.5  The block size sets the grain of everything: the waste in last blocks, and how much
       of a shared prefix the prefix cache can hit (full blocks only). The demo reruns the
       workload with B = 2, 4 and 8.
  3.6  The core flow diagram, drawn after every engine step of this run (PNG files).
  3.7  The pool is allocated once, before the first request, and poisoned with NaN, so
       a read of a slot that was never written would show up in the output. Every block
       starts at block id x block bytes; the demo checks that this stride is a
       multiple of 128 bytes. One scheduler thread does all the allocation, so 3.7's racing pops
       cannot happen here. vLLM's scheduler is single-threaded for the same reason.
Two mechanisms go beyond the chapter, and the labels say which vLLM version they follow.
Prefix caching (v1) lets the repeated prompt skip its cached full blocks, but the last
token is always computed, because its logits are needed. Chunked prefill with a token
budget is also v1. Preemption when the pool runs dry is v0: swapping copies the blocks
out and back. v1 recomputes instead, and the prefix cache makes that recompute cheap.

`pagedsim generate` runs the same workload with other pool sizes, budgets, block sizes and
preemption policies, and prints every step's batch.
"""
TEXT_ZH = """
前面各节搬动的只是 Block 编号，这里编号背后是真实模型的 K/V。一个小 Transformer
（2 层，4 个查询头、2 个 KV 头，head_dim 16，固定种子的权重）在 10 个 Block × 4 token 的池上
服务 4 个请求：贪心、n=2 采样、宽度 2 的 beam search，以及第一个 prompt 的重复。每步最多 8 个
token。注意力由内核完成：write_kv 按 slot 写入新 token 的 K/V，paged_prefill 计算 prompt 分块，
paged_attention 负责逐 token 解码，它们都通过 Block 表读 K/V。另有一个不用 Block 的稠密引擎，
对同样的请求逐 token 比较，一个 token 都不能差。演示把每一节对应到运行中的某一刻：3.1 不同
长度共用一个池；3.2 一个 Block 号同时指向各层的 K 和 V，写时复制与换出都按整块搬运；3.3 Block
表就是内核参数；3.4 fork、引用计数、写时复制；3.5 Block 大小决定浪费与前缀缓存的粒度；3.6
每一步的核心流程图；3.7 预分配、128 字节对齐、单线程分配。前缀缓存（v1，最后一个 token 必须
重算）和按 token 预算的分块 prefill（v1）超出本章范围，都注明了所属版本；换出式抢占属于 v0，
v1 改为重算，前缀缓存让重算变得便宜。

`pagedsim generate` 用其他的池大小、token 预算、Block 大小和抢占策略运行同样的负载，并打印每一步的批。
"""


def _first(log, key):
    """The first engine step whose record has a non-zero `key`, or None."""
    return next((r for r in log if r.get(key)), None)


def _peak_waste(engine) -> int:
    """Most slots ever reserved but empty (the unfilled tails of used blocks, 3.5)."""
    bs = engine.blocks.block_size
    return max(sum(bs - fill for fill, count in zip(s.block_fill, s.ref_counts) if count)
               for s in engine.blocks.manager.trace.snapshots)


def demo(out_dir, backend: str = "kernels") -> None:
    from pagedsim.engine.generate import run, step_frames, workload

    engine, marks, s = run(backend=backend)
    log, bs = engine.log, engine.blocks.block_size
    print(f"requests: {[(len(r.prompt), r.max_tokens, r.n, r.beam_width) for r in workload()]} "
          f"(prompt, tokens, n, beams); {s['steps']} steps on {s['backend']}")
    for rec in log:
        print(f"  step {rec['step']}: {' '.join(rec['seqs'])}")
    frames = step_frames(engine, marks)
    peak = max(frames, key=lambda f: len(f.sequences))
    tables = {str(q.seq_id): list(q.blocks) for q in peak.sequences}
    print(f"\n3.1 after engine step {frames.index(peak) + 1}, the tables are {tables}. Each "
          f"sequence's blocks are wherever the free list had them, not one contiguous range.")
    print(f"3.2 one block = 2 layers x (K, V) x 2 KV heads x {bs} tokens x 16 dims x 4 bytes = "
          f"{s['block_bytes']} bytes; copy-on-write moved {s['cow_bytes']} bytes, swapping "
          f"{s['swap_bytes']} (whole blocks: {s['cow_bytes'] // s['block_bytes']} and "
          f"{s['swap_bytes'] // s['block_bytes']}).")
    seq, blocks = max(tables.items(), key=lambda kv: kv[1][0])  # the most scattered start
    slots = [b * bs + o for b in blocks[:1] for o in range(bs)]
    print(f"3.3 {seq}'s table {blocks} is a row of block_tables; its first {bs} tokens were "
          f"written by write_kv to slots {slots} (block * {bs} + offset).")
    shared, copied = _first(log, "shared"), _first(log, "copied")
    if shared and copied:
        print(f"3.4 step {shared['step']}: {shared['shared']} block references shared (a fork or "
              f"a cache hit); step {copied['step']}: the first copy-on-write, run by copy_blocks.")
    print("3.5 the same workload with other block sizes (NumPy path, same tables):")
    for size in (2, 4, 8):
        again, _, other = run(blocks=40 // size, block_size=size, backend="numpy")
        print(f"    B = {size}: at most {_peak_waste(again)} slots reserved but empty; prefix cache "
              f"skipped {other['skipped_by_prefix_cache']} of "
              f"{other['skipped_by_prefix_cache'] + other['computed_tokens']} tokens, "
              f"{other['preempted_swap'] + other['preempted_recompute']} preemptions, tokens "
              f"match: {other['tokens_match']}")
    try:
        from pagedsim.draw.animate import write_frames
        paths = write_frames(frames, out_dir, prefix="generate-step")
        print(f"3.6 wrote {len(paths)} flow diagrams, one per engine step, to {out_dir}")
    except ImportError as e:
        print(f"3.6 (no pictures: {e})")
    per_layer = s["block_bytes"] // engine.model.config.layers
    print(f"3.7 the pool was allocated once ({engine.blocks.manager.num_blocks} blocks, NaN-poisoned); "
          f"each layer's cache puts block b at b x {per_layer} bytes, a multiple of 128: "
          f"{per_layer % 128 == 0}.")
    pre = _first(log, "preempted_swap") or _first(log, "preempted_recompute")
    if pre:
        print(f"beyond: step {pre['step']} preempted a request (v0 swap); it came back later "
              f"with its blocks' contents intact.")
    print(f"beyond: the prefix cache skipped {s['skipped_by_prefix_cache']} prompt tokens; "
          f"{s['computed_tokens']} tokens were computed.")
    print(f"\nthe dense engine agrees: tokens {'identical' if s['tokens_match'] else 'DIFFERENT'}, "
          f"largest logit difference {s['max_logit_diff']:.1e} (float32 rounding)")
