"""Lesson 3.8 (capstone): a real model served from the blocks, read as the whole chapter."""

from __future__ import annotations

from typing import Any, NamedTuple

TITLE = "Capstone: the blocks serve a model"
TITLE_ZH = "收官：Block 为模型服务"
FIGURES = [
    (
        "3.6-core-flow",
        "the flow diagram the demo draws after every engine step of its run "
        "(generate-step_000.png ... in the demo's folder; `pagedsim generate --draw DIR` draws "
        "them too, each block labelled with the text it holds)",
    ),
    (
        "3.4-tour",
        "fork, copy-on-write and free on a small pool: the moments 3.4 points at in the run",
    ),
]
TEXT = """
Everything so far moved block ids around. Here the ids carry a real model's K and V. The
model is small but trained: a Llama-shaped transformer (3 layers, 4 query and 2 KV heads,
tied embeddings, about 150k parameters) that scripts/train_tiny_model.py trained on
Shakespeare's plays, one token per character. So a block of 16 tokens holds 16
characters of text, and you can read what every block holds. It is loaded like any
Hugging Face checkpoint (config.json, model.safetensors, tokenizer.json).

Four requests share a pool of 16 blocks: a speech by Romeo (greedy), the same opening
line followed by Juliet's cue with n = 2 samples, a beam search of width 2, and Romeo's
prompt again. A step has a budget of 64 tokens (max_num_batched_tokens). Attention reads
K/V only through block tables: `write_kv` puts each new token's K/V into its slot,
`paged_prefill` serves prompt chunks and `paged_attention` single-token decodes (or
their NumPy twins on a CPU). A dense engine with contiguous per-sequence arrays and no
blocks runs the same requests; the run is correct if not one token differs.

The demo answers four questions from the run:
  1. Which blocks does a prompt get? ceil(len / 16) of them, wherever the free list had
     them; it prints each block's text.
  2. How does a shared prompt prefix hit? Juliet's request begins with Romeo's first 48
     characters: three full blocks it does not compute (prefix caching, v1). The repeated
     prompt hits every full block but the last, since its last token must be computed.
  3. How do beams fork and copy? The second beam starts as a fork: it shares every block
     (ref counts go up). The first write into the shared, half-full last block copies it
     (copy-on-write, v0 beam search); a beam that falls out is freed.
  4. How does the table grow as text is generated? One slot per token; a new block every
     16 characters. The demo prints Romeo's table at each new block with that block's text.
Then one moment from each section:
  3.1  requests of different lengths share one pool; no request needs a contiguous range.
  3.2  one block id names K and V of every layer: copy-on-write and swapping move whole
       blocks of the printed size.
  3.3  the block table is a kernel argument; a token's slot is block * 16 + offset.
  3.4  fork, ref counts, copy-on-write and free, as in question 3.
  3.5  the block size sets the grain of hits and of waste: the run again with B = 8 and 32.
  3.6  the core flow diagram, drawn after every engine step of this run (PNG files).
  3.7  the pool is allocated once, before the first request, and poisoned with NaN.
Preemption when the pool runs dry is v0's swap; v1 recomputes instead, and its prefix
cache -- which also keeps the blocks of generated text -- makes the recompute cheap. The
demo ends with a one-sentence verdict computed from what it printed.

Last, the run on your own code. `pagedsim generate --pool workspace` (and this demo)
loads your 3.4a free list and 3.4b copy-on-write from your workspace, found as `pagedsim
check` finds it, and puts them inside the engine's block manager: every allocate, incref
and free goes to your FreeListPool; every fork, appended token and finished sequence to
your fork, slot_for_append and free_table. pagedsim's own pool, the reference pool, serves
the same requests beside it, and the two are compared after every call into the manager:
the tokens must be equal, and so must every block table, ref count and the order of the
free list. Where they part, the demo names the first difference (engine step, manager call,
block) and the first wrong token; an exception in your code is one line naming the exercise,
the function and the line of your file; an untouched stub sends you to `pagedsim check`.
Your free list is the chapter's LIFO list, not v1's caching pool, so this run has prefix
caching off. A match is not a proof: a correct engine never frees a block twice, so 3.4a's
refusals are tested by `pagedsim check 3.4a` alone.

`pagedsim generate` runs the same workload (or your --prompt) with other pools, budgets
and block sizes; `pagedsim generate --turns 3` shows turn 2 served from turn 1's blocks.
"""
TEXT_ZH = """
前面各节搬动的只是 Block 编号，这里编号背后是一个真实模型的 K/V。模型很小但经过训练：
Llama 结构（3 层，4 个查询头、2 个 KV 头，词嵌入共享，约 15 万参数），由
scripts/train_tiny_model.py 在莎士比亚剧本上按字符训练。于是一个 16 token 的 Block 正好是
16 个字符，每个 Block 装了什么文字都能读出来。它和任何 Hugging Face 检查点一样加载
（config.json、model.safetensors、tokenizer.json）。

四个请求共用 16 个 Block 的池：罗密欧的台词（贪心）；同样的开头接朱丽叶的提示，n=2 采样；
宽度 2 的 beam search；以及罗密欧 prompt 的重复。每步最多 64 个 token（max_num_batched_tokens）。
注意力只通过 Block 表读 K/V：write_kv 写入 slot，paged_prefill 计算 prompt 分块，
paged_attention 逐 token 解码（CPU 上用等价的 NumPy 实现）。不用 Block 的稠密引擎运行同样的
请求，一个 token 都不能差。

演示回答四个问题：1. 一个 prompt 得到哪些 Block（打印每个 Block 的文字）；2. 共享前缀如何
命中（朱丽叶的请求跳过与罗密欧相同的 3 个满 Block，v1 前缀缓存；重复的 prompt 命中除最后一块
以外的所有满 Block）；3. beam 如何 fork 与复制（共享、引用计数、写时复制、淘汰的 beam 被释放）；
4. 生成文本时 Block 表如何增长（每 16 个字符一个新 Block）。然后把 3.1–3.7 各节对应到运行中的
某一刻。换出式抢占属于 v0；v1 改为重算，而它的前缀缓存也保留生成文本的 Block，让重算变便宜。
演示最后给出由打印结果计算出的一句结论。

最后用你自己的代码再跑一遍。`pagedsim generate --pool workspace`（以及本演示）从你的工作区
（按 `pagedsim check` 的查找方式）载入 3.4a 的空闲链表和 3.4b 的写时复制，放进引擎的
Block 管理器：每次 allocate、incref、free 都调用你的 FreeListPool；每次 fork、追加 token、
序列结束都调用你的 fork、slot_for_append、free_table。pagedsim 自己的池（参考池）在旁边
服务同样的请求，每次调用管理器之后比较两者：token 必须相同，每个 Block 表、引用计数和
空闲链表的顺序也必须相同。一旦分叉，演示会指出第一处差异（引擎步、管理器调用、Block）
和第一个错误的 token；你的代码抛出的异常只占一行，写明练习、函数和你文件中的行号；
没改过的桩代码会提示你先运行 `pagedsim check`。你的空闲链表是本章的后进先出链表，不是
v1 的缓存池，所以这次运行关闭前缀缓存。结果一致并不等于证明：正确的引擎从不重复释放，
3.4a 的拒绝逻辑只由 `pagedsim check 3.4a` 检查。

`pagedsim generate` 可换池大小、预算、Block 大小或你自己的 --prompt；
`pagedsim generate --turns 3` 展示第 2 轮如何命中第 1 轮的 Block。
"""


def _tables_at(engine, steps, i) -> dict:
    """Step i's tables by the request state's names: sequence (2, 1) is "r2.1"."""
    from pagedsim.engine.requests import seq_key

    snap = engine.manager.trace.snapshots[steps[i].snapshot]
    return {seq_key(q.seq_id): (list(q.blocks), q.num_tokens) for q in snap.sequences}


def _first_step(engine, steps, seq) -> int:
    return next(i for i in range(len(steps)) if seq in _tables_at(engine, steps, i))


def _growth(engine, steps, seq) -> list:
    """(step index, table) each time `seq`'s table got a new block."""
    out, width = [], 0
    for i in range(len(steps)):
        table = _tables_at(engine, steps, i).get(seq)
        if table and len(table[0]) > width:
            width = len(table[0])
            out.append((i, table))
    return out


def your_code(model, tok, backend: str = "auto", max_tokens: int = 16) -> tuple[list, bool | None]:
    """The mix served by your 3.4a free list and 3.4b copy-on-write beside the reference pool
    (course/ch03_kv_block/capstone.py). Returns (lines to print, matched); matched is None
    when your code is not there yet (no workspace file, or still the stub)."""
    from pagedsim.config import CacheConfig
    from pagedsim.engine.generate import Workload, serve
    from pagedsim.engine.lockstep import Pool, PoolFailed

    from .. import capstone

    try:
        code = capstone.find_workspace()
        code.preflight()
    except capstone.YourCodeFailed as e:
        return [str(e)], None
    files = ", ".join(str(p) for p in code.paths.values())
    try:
        _, s = serve(
            model,
            tok,
            Workload(max_tokens=max_tokens),
            CacheConfig(enable_prefix_caching=False),
            backend=backend,
            pool=Pool(code.manager, "workspace"),
        )
    except PoolFailed as e:
        return [f"served by {files}", *e.divergence.lines()], False
    except capstone.YourCodeFailed as e:
        return [f"served by {files}", str(e)], False
    return [f"served by {files}", *s["pool"]["lines"]], s["pool"]["matches"]


class _Run(NamedTuple):
    """One run of the capstone's mix, served by `pagedsim.engine.generate.serve`."""

    model: Any
    tok: Any
    engine: Any  # llm.llm_engine
    steps: list  # llm.steps: the manager's trace and each block's text, per engine step
    summary: dict  # the run's numbers (requests, bytes, tokens_match, ...)
    backend: str


def demo(out_dir, backend: str = "auto", model_dir=None) -> None:
    from pagedsim.engine.generate import load, serve

    model, tok = load(model_dir)
    llm, summary = serve(model, tok, backend=backend)
    r = _Run(model, tok, llm.llm_engine, llm.steps, summary, backend)
    s = r.summary
    print(
        f"model: {s['parameters']:,} parameters, {model.config.layers} layers; "
        f"{s['steps']} engine steps, attention: {s['attention']}"
    )
    blocks = _follow_r0(r)
    _recap_chapter(r, blocks, out_dir)
    print("\nyour code: the run again on your 3.4a free list and 3.4b copy-on-write")
    lines, yours = your_code(model, tok, backend)
    for line in lines:
        print(f"    {line}")
    _verdict(r, yours)


def _follow_r0(r: _Run) -> list:
    """Points 1-4: r0's blocks, r1's prefix hit, r2's beams, r0's table as it grows.
    Returns r0's first block table."""
    engine, steps, reqs = r.engine, r.steps, r.summary["requests"]
    bs, texts = engine.block_size, [step.block_labels for step in steps]
    start = _first_step(engine, steps, "r0.0")
    blocks, n = _tables_at(engine, steps, start)["r0.0"]
    print(
        f"\n1. r0's prompt has {len(reqs[0]['prompt_token_ids'])} characters, so it gets "
        f"{len(blocks)} blocks of {bs}: {blocks}"
    )
    for b in blocks:
        print(f"     block {b:>2} = {texts[start][b]!r}")
    r1 = _first_step(engine, steps, "r1.0")
    shared = [b for b in _tables_at(engine, steps, r1)["r1.0"][0] if b in blocks]
    print(
        f"2. r1 starts with the same {reqs[1]['hit_tokens']} characters: it hit "
        f"{reqs[1]['hit_tokens']} tokens in the prefix cache, blocks {shared} of r0's table; "
        f"r3, r0's prompt again, hit {reqs[3]['hit_tokens']} of its "
        f"{len(reqs[3]['prompt_token_ids'])} (the last block is recomputed for its logits)."
    )
    fork = _first_step(engine, steps, "r2.1")
    t = _tables_at(engine, steps, fork)
    print(
        f"3. at engine step {fork + 1} beam r2.1 forked from r2.0: tables {t['r2.0'][0]} and "
        f"{t['r2.1'][0]}, all blocks shared; copy-on-write copied {_copies(r)} blocks in the "
        f"run. The beams read {[o['text'] for o in reqs[2]['outputs']]}."
    )
    grow = _growth(engine, steps, "r0.0")
    print(f"4. r0's table as its text grew ({len(grow)} sizes):")
    for i, (table, num) in grow:
        print(
            f"     step {i + 1:>2}: {num:>3} tokens, blocks {table}; newest = "
            f"{texts[i][table[-1]]!r}"
        )
    print(f"   r0 wrote: {reqs[0]['outputs'][0]['text']!r}")
    return blocks


def _copies(r: _Run) -> int:
    return sum(rec["copied"] for rec in r.engine.log)


def _recap_chapter(r: _Run, blocks: list, out_dir) -> None:
    """Sections 3.1-3.7 of the chapter, each seen in this run; 3.6 draws its steps."""
    from pagedsim.config import CacheConfig
    from pagedsim.draw.animate import write_frames
    from pagedsim.engine.generate import serve, step_frames

    s, c, log, bs = r.summary, r.model.config, r.engine.log, r.engine.block_size
    frames = step_frames(r.engine, r.steps)
    peak = max(frames, key=lambda f: len(f.sequences))
    print(
        f"\n3.1 after engine step {frames.index(peak) + 1}, {len(peak.sequences)} sequences of "
        f"{sorted(q.num_tokens for q in peak.sequences)} tokens share the pool; no table is a "
        f"contiguous range it had to reserve."
    )
    print(
        f"3.2 one block = {c.layers} layers x (K, V) x {c.kv_heads} KV heads x {bs} tokens x "
        f"{c.head_dim} dims x 4 bytes = {s['block_bytes']:,} bytes; copy-on-write moved "
        f"{s['cow_bytes']:,} bytes and swapping {s['swap_bytes']:,} (whole blocks)."
    )
    print(
        f"3.3 r0's first token went to slot {blocks[0]} * {bs} + 0 = {blocks[0] * bs}; its "
        f"table {blocks} is a row of block_tables for paged_prefill and paged_attention."
    )
    print(
        f"3.4 {sum(rec['shared'] for rec in log)} block references were shared by forks and "
        f"hits, {_copies(r)} blocks copied on write, {sum(rec['freed'] for rec in log)} freed."
    )
    print("3.5 the same run with other block sizes:")
    for size in (8, 32):
        cache = CacheConfig(block_size=size, num_gpu_blocks_override=256 // size)
        _, other = serve(r.model, r.tok, cache=cache, backend=r.backend)
        print(
            f"    B = {size:>2}: prefix cache served {other['skipped_by_prefix_cache']} tokens, "
            f"tokens match: {other['tokens_match']}"
        )
    paths = write_frames(frames, out_dir, prefix="generate-step")
    print(f"3.6 wrote {len(paths)} flow diagrams, one per engine step, to {out_dir}")
    print(
        f"3.7 the pool was allocated once ({r.engine.manager.num_gpu_blocks} blocks x "
        f"{c.layers} layers, NaN-poisoned): a read of an unwritten slot would show in the "
        f"logits. {s['preempted_swap']} preemptions swapped out and back (v0)."
    )


def _verdict(r: _Run, yours: bool | None) -> None:
    """Whether the blocks served the model: the dense engine's tokens, and your own code's."""
    s, reqs = r.summary, r.summary["requests"]
    generated = sum(len(o["token_ids"]) for q in reqs for o in q["outputs"])
    print(
        f"\nthe dense engine agrees: tokens {'identical' if s['tokens_match'] else 'DIFFERENT'}, "
        f"largest logit difference {s['max_logit_diff']:.1e} (float32 rounding)"
    )
    hits = sum(q["hit_tokens"] for q in reqs)
    verdict = "served correctly" if s["tokens_match"] else "NOT served correctly"
    print(
        f"Verdict: the blocks {verdict} -- {generated} generated characters "
        f"{'equal' if s['tokens_match'] else 'differ from'} the dense engine's, while "
        f"{hits} prompt tokens came from the prefix cache and {_copies(r)} blocks were copied "
        f"instead of whole sequences; "
        + {
            True: "your own 3.4a and 3.4b served every token and block the same.",
            False: "your own 3.4a and 3.4b parted from the reference pool where named above.",
            None: "your own 3.4a and 3.4b are not written yet.",
        }[yours]
    )
