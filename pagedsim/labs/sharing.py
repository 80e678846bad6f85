"""Memory saved by sharing blocks: parallel sampling and beam search (vLLM paper Sec. 4.4, Fig. 15).

Sharing here is vLLM v0's: one group per request, forked, with copy-on-write (v1 turns n
samples into n requests sharing full prompt blocks through the prefix cache). Each request
runs through the driver in a pool that never preempts; the saving is

    1 - sum over steps of blocks used / sum over steps of unshared blocks

Samples share only the prompt. Beams are synthetic: each step each beam, with probability
`beam_reshuffle`, becomes a fork of another, so beams share long histories like real
survivors (the paper measures real OPT-13B beams on Alpaca).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from ..block_table import blocks_needed
from ..errors import MAX_BLOCK_SIZE, count_arg
from ..manager import KVCacheManager
from ..scheduler_v0 import SchedulerV0, V0Settings
from ..workloads import Request

PAPER = {  # the vLLM paper's reported savings on Alpaca (Sec. 6.3)
    "parallel sampling": "6.1% - 9.8% (n = 2, 4, 6)",
    "beam search": "37.6% - 55.2% (width = 2, 4, 6)",
}


def saving(
    requests: Iterable[Request],
    block_size: int,
    *,
    n: int = 1,
    beam_width: int = 1,
    beam_reshuffle: float = 0.25,
    seed: int = 0,
) -> float:
    block_size = count_arg("block_size", block_size, 1, MAX_BLOCK_SIZE)
    reqs = [replace(r, n=n, beam_width=beam_width, arrival_step=0) for r in requests]
    k = max(n, beam_width)
    blocks = sum(k * blocks_needed(r.total_len, block_size) + k for r in reqs) + 1
    manager = KVCacheManager(blocks, block_size, trace=False)
    s = SchedulerV0(
        reqs, manager, settings=V0Settings(beam_reshuffle=beam_reshuffle, seed=seed)
    ).run()
    used = sum(r.blocks_used for r in s.records)
    unshared = sum(r.unshared_blocks for r in s.records)
    return 1.0 - used / unshared if unshared else 0.0


def sharing_savings(
    requests: Sequence[Request],
    block_size: int = 16,
    widths: Sequence[int] = (2, 4, 6),
    *,
    beam_reshuffle: float = 0.25,
    seed: int = 0,
) -> dict[str, dict[int, float]]:
    """{"parallel sampling": {2: saving, ...}, "beam search": {2: saving, ...}}."""
    knobs = {"parallel sampling": "n", "beam search": "beam_width"}
    return {
        kind: {
            w: saving(requests, block_size, **{knob: w}, beam_reshuffle=beam_reshuffle, seed=seed)
            for w in widths
        }
        for kind, knob in knobs.items()
    }


def format_savings(result: Mapping[str, Mapping[int, float]]) -> str:
    lines = ["blocks saved by sharing (vs the same sequences without sharing):"]
    for kind, by_width in result.items():
        ours = ", ".join(f"{w}: {100 * v:.1f}%" for w, v in by_width.items())
        lines.append(f"  {kind:<17}  ours {ours}   paper {PAPER[kind]}")
    return "\n".join(lines)
