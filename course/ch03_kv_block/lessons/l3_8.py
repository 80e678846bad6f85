"""Lesson 3.8 (capstone): a real model served from the blocks, read as the whole chapter."""

from __future__ import annotations

from typing import Any, NamedTuple


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
