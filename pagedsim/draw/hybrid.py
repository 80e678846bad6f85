"""The hybrid allocator drawn: two KV cache groups over one pool (v1 HybridKVCacheCoordinator),
from snapshots of a real `HybridManager` run, drawn by the ordinary renderer.
"""

from __future__ import annotations

from pathlib import Path

from ..policies.hybrid import HybridManager
from . import scenario, style

PROMPT = [7, 7, 7, 7, 1, 2, 3, 4, 5, 9]  # 10 tokens: two full blocks of 4 and a partial one


def hybrid_snapshots() -> list:
    """A arrives, decodes past its window, B shares A's prompt, A finishes."""
    m = HybridManager(14, 4, sliding_window=6)
    m.add_sequence("A", len(PROMPT), PROMPT)
    m.append_tokens("A", 4)
    hit = m.get_computed_blocks(PROMPT)
    m.allocate_slots("B", len(PROMPT) - hit.num_tokens, new_token_ids=PROMPT, computed=hit)
    m.free_sequence("A")
    m.check_invariants()
    assert m.trace is not None, "HybridManager records a trace by default"
    return m.trace.snapshots


def make_hybrid(out_dir: Path) -> list[Path]:
    """Two KV cache groups (full attention, sliding window) over one pool, from a real run."""
    snaps = hybrid_snapshots()
    if style.slides():  # one frame per slide: five panels at 18 pt do not fit one
        return scenario.write_slides(snaps, out_dir, "hybrid-groups", picks=range(len(snaps)))
    return [
        scenario.write_strip(snaps, Path(out_dir) / "hybrid-groups.png", picks=range(len(snaps)))
    ]


FIGURES = {"hybrid-groups": make_hybrid}
