"""`pagedsim tour`: chapter 3's block manager, one step at a time, on a 12-block pool.

Its fork and copy-on-write follow vLLM v0 (v1 shares only full blocks, through the
prefix cache); its free list is v1's free queue (block_pool.py).

The script (tour.toml) follows the chapter: sequences grow across block boundaries (3.3),
one forks for beam search and copy-on-write happens (3.4), one finishes, and the pool runs
dry. Each step prints the event, the free list, every block table and every block's
owners, count and fill.
"""

from __future__ import annotations

import json
import shutil
import sys
from typing import TYPE_CHECKING, Any, TypedDict

from ..errors import OutOfBlocks
from ..io import tables, trace_json
from ..manager import KVCacheManager
from ..text.captions import caption
from ..text.lang import LANGS, detect, display_width, t, wrap
from ..trace import Snapshot

if TYPE_CHECKING:
    from ..io.args import ArgParser
    from ..view import PageOptions

NUM_GPU_BLOCKS, BLOCK_SIZE = 12, 4

# the script, why the chapter makes each call (English and Chinese), the Chinese templates
TEXT = tables.beside(__file__)
SCRIPT: list[dict[str, Any]] = TEXT["step"]  # {call: [method, arguments...], en, zh} per step
VIEW_ZH: dict[str, str] = TEXT["view_zh"]  # the snapshot view, printed by `play` too
ZH = {**VIEW_ZH, **TEXT["tour_zh"]}  # everything the tour prints


def _whys(snaps: list[Snapshot], lang: str) -> tuple[list[str], str | None]:
    """Why each snapshot's call is made, in `lang`, and the note if the pool ran dry."""
    key = "zh" if lang == "zh" else "en"
    whys = [SCRIPT[s.step - 1][key] if s.step else TEXT["start"][key] for s in snaps]
    dry = any(e.kind == "allocation_failed" for e in snaps[-1].events)
    return whys, TEXT["out_of_blocks_note"][key] if dry else None


def tour_manager(steps: int | None = None) -> KVCacheManager:
    """Run the tour's script (all of it, or the first `steps` steps) and return the manager."""
    m = KVCacheManager(NUM_GPU_BLOCKS, BLOCK_SIZE, free_order="lifo")
    for step in SCRIPT[:steps]:
        method, *args = step["call"]
        try:
            getattr(m, method)(*args)
        except OutOfBlocks:
            pass  # recorded in the trace as an AllocationFailed step
        m.drain_copies()  # the copy_blocks kernel consumes copy-on-write pairs after each step
        m.check_invariants()
    return m


CELL = 18  # characters per physical-block cell in the text picture


def format_snapshot(
    s: Snapshot, per_row: int | None = None, width: int = 100, lang: str = "en"
) -> str:
    """The snapshot as text (free list, tables, copies, blocks), no line over `width`."""

    per_row = per_row or max(1, (width - 4) // CELL)

    def say(template: str, **kw: object) -> str:
        return t(template, lang, VIEW_ZH, **kw)

    owners: dict[int, list[str]] = {b: [] for b in range(s.num_gpu_blocks)}
    for seq in s.sequences:
        for b in seq.blocks:
            if b >= 0:
                owners[b].append(str(seq.seq_id))
    free = " -> ".join(map(str, s.free_list)) or say("(empty)")
    lines = [
        say("  free list, head first ({n} free): {free}", n=len(s.free_list), free=free),
        say("  block tables:"),
    ]
    for seq in s.sequences or ():
        mapping = ", ".join(
            f"{i}->{b if b >= 0 else say('dropped')}" for i, b in enumerate(seq.blocks)
        )
        lines.append(
            say(
                "    {seq:<3} {n:>3} tokens   logical->physical: {mapping}",
                seq=str(seq.seq_id),
                n=seq.num_tokens,
                mapping=mapping,
            )
        )
    if not s.sequences:
        lines.append(say("    (no sequences)"))
    if s.pending_copies:
        lines.append(
            say(
                "  copy-on-write pairs for the copy_blocks kernel (src, dst): {pairs}",
                pairs=list(s.pending_copies),
            )
        )
    lines.append(
        say(
            "  physical blocks (owners, ref count, fill): {used} used, {shared} shared, "
            "{free} free",
            used=sum(1 for c in s.ref_counts if c),
            shared=sum(1 for c in s.ref_counts if c > 1),
            free=len(s.free_list),
        )
    )
    for start in range(0, s.num_gpu_blocks, per_row):
        cells = []
        for b in range(start, min(start + per_row, s.num_gpu_blocks)):
            if s.ref_counts[b] == 0:
                cell = f"#{b:<2} {say('free')}"
            else:
                who = "+".join(owners[b])
                cell = f"#{b:<2} {who} x{s.ref_counts[b]} {s.block_fill[b]}/{s.block_size}"
            cells.append(cell + " " * max(0, CELL - 1 - display_width(cell)))
        lines.append("    " + " ".join(cells).rstrip())
    return "\n".join(out for line in lines for out in wrap(line, width))


def terminal_width() -> int:
    return shutil.get_terminal_size((100, 24)).columns


def parser() -> ArgParser:
    """`pagedsim tour`'s command line."""
    from ..io.args import ArgParser, int_in

    p = ArgParser(prog="pagedsim tour", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int_in(0, 10**6), default=None, help="stop after N steps")
    p.add_argument("--json", action="store_true", help="print the recorded trace as JSON")
    p.add_argument("--draw", metavar="DIR", help="also write PNG frames and a GIF into DIR")
    p.add_argument(
        "--width",
        type=int,
        default=None,
        metavar="N",
        help="no output line wider than N columns (default: the terminal's width)",
    )
    p.add_argument(
        "--step",
        action="store_true",
        help="wait between steps (live use): Enter = next, b = back, q = stop",
    )
    p.add_argument(
        "--html",
        metavar="FILE",
        help="also write the tour as one self-contained page to step through in a "
        "browser (pagedsim.view)",
    )
    p.add_argument(
        "--lang",
        choices=LANGS,
        default=None,
        help="en or zh (default: from PAGEDSIM_LANG or the locale)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    from ..io.args import writable_dir

    p = parser()
    args = p.parse_args(argv)
    if args.width is not None and args.width < 40:
        p.error("--width must be at least 40")
    if args.draw:  # fail on an unwritable folder before printing anything
        writable_dir(args.draw)
    lang, width = detect(args.lang), args.width or terminal_width()
    m = tour_manager(args.steps)
    assert m.trace is not None, "tour_manager records a trace"
    snaps = m.trace.snapshots
    if args.json:
        json.dump(trace_json.to_dict(m.trace), sys.stdout, indent=1, default=str)
        print()
    elif not _narrate(snaps, lang, width, wait=args.step):
        return 0
    if args.html:
        from ..view import write_html

        print(f"wrote {write_html(args.html, **tour_page(lang, args.steps))}", file=sys.stderr)
    if args.draw:
        from ..draw import style  # matplotlib only when asked for
        from ..draw.animate import write_trace

        with style.output(lang=lang):
            for path in write_trace(snaps, args.draw):
                print(f"wrote {path}", file=sys.stderr)
    return 0


def _narrate(snaps: list[Snapshot], lang: str, width: int, wait: bool) -> bool:
    """Print each step (caption, why, pool); `wait` pauses between steps. False: q."""

    def say(template: str, **kw: object) -> str:
        return t(template, lang, ZH, **kw)

    def show(text: str, indent: str = "      ") -> None:  # a step's caption hangs under it
        print("\n".join(o for line in text.split("\n") for o in wrap(line, width, indent)))

    show(
        say(
            "pagedsim tour: chapter 3 on a pool of {n} blocks x {b} tokens (free order: LIFO, "
            "as in the chapter)",
            n=NUM_GPU_BLOCKS,
            b=BLOCK_SIZE,
        )
        + "\n"
    )
    whys, note = _whys(snaps, lang)
    k = 0
    while k < len(snaps):
        s = snaps[k]
        show(say("step {k}: {caption}", k=s.step, caption=caption(s, lang)))
        show(say("  why: {why}", why=whys[k]))
        print(format_snapshot(s, width=width, lang=lang))
        print()
        k += 1
        if wait and k < len(snaps):
            print(say("press Enter for the next step (b back, q to stop)"), end=" ", flush=True)
            answer = sys.stdin.readline()
            if not answer or answer.strip().lower() == "q":
                print()
                return False
            if answer.strip().lower() == "b":  # show the step before this one again
                k = max(0, k - 2)
    if note:
        show(note, indent="")
    return True


class TourPage(TypedDict):
    """`pagedsim.view.write_html`'s keywords for the tour."""

    trace_or_snapshots: list[Snapshot]
    options: PageOptions


def tour_page(lang: str = "en", steps: int | None = None) -> TourPage:
    """The tour as `pagedsim.view.write_html`'s keywords: snapshots, captions, why lines."""
    from ..view import PageOptions
    from ..view.sources import TOUR_VERSION

    trace = tour_manager(steps).trace
    assert trace is not None, "the tour's manager records a trace"
    snaps = trace.snapshots
    whys, note = _whys(snaps, lang)
    if note:
        whys[-1] += " " + note
    options = PageOptions(
        captions=[caption(s, lang) for s in snaps],
        whys=whys,
        lang=lang,
        title="pagedsim tour: chapter 3 on a 12-block pool",
        version=TOUR_VERSION,
    )
    return TourPage(trace_or_snapshots=snaps, options=options)
