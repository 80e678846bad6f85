"""`pagedsim tour`: chapter 3's block manager, one step at a time, on a 12-block pool.

The script follows the chapter: two sequences grow across block boundaries (3.3),
one forks for beam search so blocks are shared and copy-on-write happens (3.4),
one finishes and its blocks go back to the free list, and finally the pool runs
dry and the `OutOfBlocks` that follows is explained. Each step prints the event,
the free list head first, every block table, and every physical block's owners,
count and fill. `--json` prints the recorded trace instead; `--draw DIR` also
writes the frames and a GIF (needs matplotlib, imported only then).
"""

from __future__ import annotations

import json
import sys

from .errors import OutOfBlocks
from .manager import KVCacheManager
from .trace import Snapshot

NUM_BLOCKS, BLOCK_SIZE = 12, 4

# (why this step matters, the operation). Each operation is one manager step.
SCRIPT = [
    ("3.4: allocate() pops the head of the free list, so A's 6 prompt tokens take the "
     "first two blocks; the second is only half full.",
     lambda m: m.add_sequence("A", 6)),
    ("3.3: B's blocks come next on the free list. Logical blocks 0, 1 of B are physical 2, 3.",
     lambda m: m.add_sequence("B", 5)),
    ("A decodes two tokens. They fit in A's partly filled last block: no allocation.",
     lambda m: m.append_tokens("A", 2)),
    ("A's last block is full, so its next token needs a new block from the free list.",
     lambda m: m.append_tokens("A", 1)),
    ("3.4 pitfall: beam search forks B into B2. Nothing is copied; both tables name the same "
     "blocks, and each block's ref count goes to 2.",
     lambda m: m.fork("B", "B2")),
    ("B writes into its shared, partly filled last block. Writing in place would corrupt B2, "
     "so B gets a private copy: a new block plus a (src, dst) pair for the copy kernel.",
     lambda m: m.append_tokens("B", 1)),
    ("B2 is now the only owner of block 3 (count 1), so it appends in place.",
     lambda m: m.append_tokens("B2", 1)),
    ("A finishes. Its blocks are released last-first; each count drops to 0, so each "
     "block rejoins the free list (LIFO: at the head).",
     lambda m: m.free_sequence("A")),
    ("C arrives with a 20-token prompt and reuses A's freed blocks first.",
     lambda m: m.add_sequence("C", 20)),
    ("D takes every block that is left: the free list is now empty.",
     lambda m: m.add_sequence("D", 13)),
    ("C needs a sixth block for its next token, but the free list is empty. The manager "
     "raises OutOfBlocks and changes nothing.",
     lambda m: m.append_tokens("C", 1)),
]

OUT_OF_BLOCKS_NOTE = (
    "The pool ran dry. The chapter's allocate() would call evict_blocks() here; a real "
    "scheduler (vLLM) instead preempts a sequence -- frees its blocks and recomputes it "
    "later, or swaps its blocks to CPU memory -- and retries. The failed call left every "
    "table and count exactly as before. See `pagedsim policies`.")


def tour_manager(steps: int | None = None) -> KVCacheManager:
    """Run the tour's script (all of it, or the first `steps` steps) and return the manager."""
    m = KVCacheManager(NUM_BLOCKS, BLOCK_SIZE, free_order="lifo")
    for _, op in SCRIPT[:steps]:
        try:
            op(m)
        except OutOfBlocks:
            pass  # recorded in the trace as an AllocationFailed step
        m.drain_copies()  # the copy_blocks kernel consumes copy-on-write pairs after each step
        m.check_invariants()
    return m


def format_snapshot(s: Snapshot, per_row: int = 6) -> str:
    owners = {b: [] for b in range(s.num_blocks)}
    for seq in s.sequences:
        for b in seq.blocks:
            if b >= 0:
                owners[b].append(str(seq.seq_id))
    free = " -> ".join(map(str, s.free_list)) or "(empty)"
    lines = [f"  free list, head first ({len(s.free_list)} free): {free}", "  block tables:"]
    for seq in s.sequences or ():
        mapping = ", ".join(f"{i}->{b}" for i, b in enumerate(seq.blocks))
        lines.append(f"    {str(seq.seq_id):<3} {seq.num_tokens:>3} tokens   logical->physical: {mapping}")
    if not s.sequences:
        lines.append("    (no sequences)")
    if s.pending_copies:
        lines.append(f"  copy-on-write pairs for the copy_blocks kernel (src, dst): "
                     f"{list(s.pending_copies)}")
    lines.append("  physical blocks (owners, ref count, fill):")
    for start in range(0, s.num_blocks, per_row):
        ids = range(start, min(start + per_row, s.num_blocks))
        cells = []
        for b in ids:
            if s.ref_counts[b] == 0:
                cells.append(f"#{b:<2} free".ljust(17))
            else:
                who = "+".join(owners[b])
                cells.append(f"#{b:<2} {who} x{s.ref_counts[b]} {s.block_fill[b]}/{s.block_size}".ljust(17))
        lines.append("    " + " ".join(cells).rstrip())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from .cli import ArgParser, int_in, writable_dir
    p = ArgParser(prog="pagedsim tour", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int_in(0, 10**6), default=None, help="stop after N steps")
    p.add_argument("--json", action="store_true", help="print the recorded trace as JSON")
    p.add_argument("--draw", metavar="DIR", help="also write PNG frames and a GIF into DIR")
    args = p.parse_args(argv)
    if args.draw:  # fail on an unwritable folder before printing anything
        writable_dir(args.draw)
    m = tour_manager(args.steps)
    snaps = m.trace.snapshots
    if args.json:
        json.dump(m.trace.to_dict(), sys.stdout, indent=1, default=str)
        print()
    else:
        print(f"pagedsim tour: chapter 3 on a pool of {NUM_BLOCKS} blocks x {BLOCK_SIZE} tokens "
              f"(free order: LIFO, as in the chapter)\n")
        for s in snaps:
            why = SCRIPT[s.step - 1][0] if s.step else "3.1: every block is created up front and starts on the free list."
            print(f"step {s.step}: {s.caption}\n  why: {why}")
            print(format_snapshot(s))
            print()
        if any(e.kind == "allocation_failed" for e in snaps[-1].events):
            print(OUT_OF_BLOCKS_NOTE)
    if args.draw:
        from .draw.animate import write_trace  # matplotlib only when asked for

        for path in write_trace(snaps, args.draw):
            print(f"wrote {path}", file=sys.stderr)
    return 0
