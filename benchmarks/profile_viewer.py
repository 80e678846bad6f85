"""Where one step change of a saved trace page spends the renderer's time: a Chromium trace.

A few single step changes, each split into its script, the style and layout it forces, and
the frame after it (`bench_viewer.per_change`); `--why` adds Chromium's invalidation tracking
(which elements were restyled or laid out, and why). benchmarks/README.md, "What a trace of
one step change shows", has the method and the figures.

    python benchmarks/profile_viewer.py long.html --kind next     (steps 12.., as --cpu's next)
    python benchmarks/profile_viewer.py long.html --kind jump --count 8 --why
"""

from __future__ import annotations

import argparse
import bisect
import collections
import random
import statistics
from pathlib import Path

import bench_viewer as bench

TRACED = [*bench.TRACED, "blink", "v8.execute"]
WHY = [
    "disabled-by-default-devtools.timeline.invalidationTracking",
    "blink.invalidation",
    "disabled-by-default-blink.invalidation",
]
PHASES = {**bench.PHASES, "IntersectionObserverController::computeIntersections": "observers"}
FRAME = ("prepaint", "paint", "layerize", "observers")  # the parts of a change's frame shown
WHY_EVENTS = {  # an element marked for a style recalc, a layout object marked for layout
    "StyleRecalcInvalidationTracking": "restyled",
    "LayoutInvalidationTracking": "laid out",
}


def record(page: Path, kind: str, count: int, why: bool, seed: int = 7) -> tuple[list, list]:
    """The trace events of `count` step changes of `kind` ("next": from step 12 on, one at a
    time, as `bench_viewer --cpu`'s next steps; "jump": random), and their marks in order."""
    with bench.chromium() as b:
        tab = bench.show(b.new_page(viewport=bench.VIEWPORT), page)
        n, rng = tab.evaluate("window.pagedsimViewer.count()"), random.Random(seed)
        if kind == "next":
            warm, steps = list(range(12)), [12 + k for k in range(count)]
        else:
            warm = [rng.randrange(n) for _ in range(6)]
            steps = [rng.randrange(n) for _ in range(count)]
        for i in warm:
            tab.evaluate(bench.PAIRED_JUMP, [i, "warm"])
        marks = [f"{bench.MARK}:{kind} {k}: step {i}" for k, i in enumerate(steps)]
        with bench.traced(b, tab, TRACED + (WHY if why else [])) as events:
            for i, mark in zip(steps, marks, strict=True):
                tab.evaluate(bench.PAIRED_JUMP, [i, mark])
            tab.evaluate(bench.PAIRED_JUMP, [steps[-1] + 1, f"{bench.MARK}:end"])
    return events, [*marks, f"{bench.MARK}:end"]


def split(events: list, marks: list) -> list[dict]:
    """For each marked change: the CPU (ms) of its task and of the frame after it, by part."""
    fired = {bench.mark_of(e): e for e in events if bench.mark_of(e) in marks}
    first = fired[marks[0]]
    changes = bench.per_change(
        events, (first["pid"], first["tid"]), [fired[m]["ts"] for m in marks], PHASES
    )
    out = []
    for mark, c in zip(marks, changes[:-1], strict=False):
        style, layout = c["change.style"], c["change.layout"]
        row = {
            "change": mark.split(":", 1)[1],
            "change_ms": bench.cpu_ms(c["change"]),
            "script_ms": bench.cpu_ms(c["change"]) - bench.cpu_ms(style) - bench.cpu_ms(layout),
            "style_ms": bench.cpu_ms(style),
            "restyled": sum(e["args"].get("elementCount", 0) for e in style),
            "layout_ms": bench.cpu_ms(layout),
            "laid_out": sum(e["args"]["beginData"].get("dirtyObjects", 0) for e in layout),
            "frame_ms": bench.cpu_ms(c["frame"]),
        }
        out.append(row | {f"{v}_ms": bench.cpu_ms(c[f"frame.{v}"]) for v in FRAME})
    return out


def reasons(events: list, marks: list, top: int = 8) -> list[list[tuple[str, int]]]:
    """For each change, up to its next: the most frequent (what, element, why) invalidation
    events (an element marked for several reasons, or several times, counts each time)."""
    fired = sorted((e["ts"], bench.mark_of(e)) for e in events if bench.mark_of(e) in marks)
    at = [ts for ts, _ in fired]
    counts: list[collections.Counter] = [collections.Counter() for _ in fired]
    for e in events:
        what = WHY_EVENTS.get(e.get("name", ""))
        k = bisect.bisect_right(at, e.get("ts", -1)) - 1
        if what is None or k < 0 or k >= len(fired) - 1:
            continue
        d = e.get("args", {}).get("data", {})
        change = d.get("changedClass") or d.get("changedAttribute") or d.get("changedPseudo")
        why = d.get("reason", "") + (f" ({change})" if change else "")
        counts[k][f"{what}: {d.get('nodeName', '?')[:48]}: {why}"] += 1
    return [c.most_common(top) for c in counts[:-1]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("page", type=Path)
    p.add_argument("--kind", choices=["next", "jump"], default="jump")
    p.add_argument("--count", type=int, default=6, help="step changes traced")
    p.add_argument("--why", action="store_true", help="also trace what was invalidated, and why")
    args = p.parse_args(argv)
    if not args.page.is_file():
        p.error(f"no such page: {args.page}")
    events, marks = record(args.page, args.kind, args.count, args.why)
    rows = split(events, marks)
    for k, row in enumerate(rows):
        print(
            f"{row['change']}: change {row['change_ms']:.1f} ms (script {row['script_ms']:.1f}, "
            f"style {row['style_ms']:.1f} for {row['restyled']} elements, layout "
            f"{row['layout_ms']:.1f} for {row['laid_out']} objects); frame {row['frame_ms']:.1f} "
            + ", ".join(f"{v} {row[f'{v}_ms']:.1f}" for v in FRAME)
        )
        if args.why:
            for text, n in reasons(events, marks)[k]:
                print(f"    {n:5d}  {text}")
    total = [r["change_ms"] + r["frame_ms"] for r in rows]
    print(f"median change + frame: {statistics.median(total):.1f} ms over {len(rows)} changes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
