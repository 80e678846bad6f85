"""Lesson 3.1: why fixed-size blocks (external fragmentation, shown on one trace)."""

from __future__ import annotations

import random

from course.ch03_kv_block.lessons import reference, verdict
from pagedsim import BlockPool, blocks_needed


def random_trace(seed: int = 3, steps: int = 120):
    """("alloc", id, size) and ("free", id) steps: sizes 5..40 tokens, about half finish."""
    rng, live, out = random.Random(seed), [], []
    for i in range(steps):
        if live and rng.random() < 0.45:
            out.append(("free", live.pop(rng.randrange(len(live)))))
        else:
            out.append(("alloc", i, rng.randint(5, 40)))
            live.append(i)
    return out


def demo(out_dir) -> None:
    ref = reference("3.1")
    FirstFit, external_fragmentation = ref.FirstFit, ref.external_fragmentation

    capacity, bs = 240, 8
    ff, pool = FirstFit(capacity), BlockPool(capacity // bs, bs)
    ranges, tables = {}, {}
    refused_ff = refused_ff_with_room = refused_blocks = worst = 0
    for step in random_trace():
        if step[0] == "free":
            if step[1] in ranges:
                ff.free(*ranges.pop(step[1]))
            for b in tables.pop(step[1], []):
                pool.free(b)
            continue
        _, rid, size = step
        start = ff.allocate(size)
        if start is None:
            refused_ff += 1
            refused_ff_with_room += ff.free_slots() >= size
        else:
            ranges[rid] = (start, size)
        worst = max(worst, external_fragmentation(ff.holes))
        need = blocks_needed(size, bs)
        if need <= pool.num_free_blocks:
            tables[rid] = [pool.allocate() for _ in range(need)]
        else:
            refused_blocks += 1
    print(
        f"first fit over {capacity} slots: refused {refused_ff} requests, "
        f"{refused_ff_with_room} of them while enough slots were free in total"
    )
    print(f"  worst external fragmentation seen: {worst:.0%} (1 - largest hole / free slots)")
    print(
        f"fixed blocks of {bs}: refused {refused_blocks} requests, each only because too few "
        f"blocks were free"
    )
    print("look at: the requests refused 'with room' -- they are pure external fragmentation.")
    if refused_ff_with_room and refused_blocks < refused_ff:
        verdict(
            f"{refused_ff_with_room} of first fit's {refused_ff} refusals happened with enough "
            f"slots free, and fixed blocks refused only {refused_blocks}: the difference is "
            "external fragmentation, which fixed blocks cannot have",
            f"首次适配的 {refused_ff} 次拒绝里有 {refused_ff_with_room} 次发生在空闲槽位足够"
            f"时，而固定块只拒绝了 {refused_blocks} 次：差别就是外部碎片，固定块不会有外部碎片",
        )
    else:
        verdict(
            f"on this trace first fit refused {refused_ff} requests ({refused_ff_with_room} "
            f"with room) and fixed blocks {refused_blocks}: fragmentation did not show here",
            f"在这条轨迹上首次适配拒绝了 {refused_ff} 次（{refused_ff_with_room} 次有空间），固定块"
            f" {refused_blocks} 次：这里没有显出碎片",
        )
