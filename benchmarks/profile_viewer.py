"""Where one step change of a saved trace page spends the renderer's time: a Chromium trace.

`bench_viewer.py --cpu` gives medians by phase; this takes a few single step changes apart,
so a change can be aimed at a cause rather than tried as an ablation. Each change is marked
(`console.timeStamp`), and for each the renderer main thread's CPU (thread time) is split:

- the change's task: script, then the style recalc (elements restyled) and layout (objects
  laid out / in the tree) that `getBoundingClientRect` forces after it;
- the tasks after it, up to the next change (the frame that puts it on screen): pre-paint,
  paint, layerize and the intersection observers.

`--why` adds Chromium's invalidation tracking (a heavier trace, so its times are inflated):
for each change, which elements were marked to be restyled or laid out, and for what reason
(the class or attribute that changed, a node inserted or removed), most frequent first.

    python benchmarks/profile_viewer.py long.html --kind next     (steps 12.., as --cpu's next)
    python benchmarks/profile_viewer.py long.html --kind jump --count 8 --why
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import random
import shutil
import statistics
import tempfile
from pathlib import Path

import bench_viewer as bench

TRACED = [*bench.TRACED, "blink", "v8.execute"]
WHY = [
    "disabled-by-default-devtools.timeline.invalidationTracking",
    "blink.invalidation",
    "disabled-by-default-blink.invalidation",
]
FORCED = ["UpdateLayoutTree", "Layout"]  # the style and layout a change forces
FRAME_PHASES = {
    "PrePaint": "prepaint",
    "Paint": "paint",
    "Layerize": "layerize",
    "IntersectionObserverController::computeIntersections": "observers",
}
WHY_EVENTS = {  # an element marked for a style recalc, a layout object marked for layout
    "StyleRecalcInvalidationTracking": "restyled",
    "LayoutInvalidationTracking": "laid out",
}


def record(page: Path, kind: str, count: int, why: bool, seed: int = 7) -> tuple[list, list]:
    """The trace events of `count` step changes of `kind` ("next": from step 12 on, one at a
    time, as `bench_viewer --cpu`'s next steps; "jump": random), and their marks in order."""
    from playwright.sync_api import sync_playwright

    trace = Path(tempfile.mkdtemp()) / "trace.json"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=bench.CHROMIUM, args=bench.ARGS)
        tab = b.new_page(viewport={"width": 1600, "height": 1000})
        tab.goto(page.resolve().as_uri())
        tab.wait_for_function("() => window.pagedsimViewer !== undefined")
        n, rng = tab.evaluate("window.pagedsimViewer.count()"), random.Random(seed)
        if kind == "next":
            warm, steps = list(range(12)), [12 + k for k in range(count)]
        else:
            warm = [rng.randrange(n) for _ in range(6)]
            steps = [rng.randrange(n) for _ in range(count)]
        for i in warm:
            tab.evaluate(bench.PAIRED_JUMP, [i, "warm"])
        b.start_tracing(page=tab, path=str(trace), categories=TRACED + (WHY if why else []))
        marks = [f"{bench.MARK}:{kind} {k}: step {i}" for k, i in enumerate(steps)]
        for i, mark in zip(steps, marks, strict=True):
            tab.evaluate(bench.PAIRED_JUMP, [i, mark])
        tab.evaluate(bench.PAIRED_JUMP, [steps[-1] + 1, f"{bench.MARK}:end"])
        b.stop_tracing()
        b.close()
    events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    shutil.rmtree(trace.parent)
    return events, [*marks, f"{bench.MARK}:end"]


def _within(found: list, t0: float, t1: float) -> list:
    """The events of a time-ordered list that start in [t0, t1)."""
    at = [e["ts"] for e in found]
    return found[bisect.bisect_left(at, t0) : bisect.bisect_left(at, t1)]


def _ms(found: list) -> float:
    return sum(e.get("tdur", 0) for e in found) / 1000


def split(events: list, marks: list) -> list[dict]:
    """For each marked change: the CPU (ms) of its task and of the frame after it, by part."""
    fired = {bench.mark_of(e): e for e in events if bench.mark_of(e) in marks}
    first = fired[marks[0]]
    thread = (first["pid"], first["tid"])
    tasks = bench.outer_tasks(events, thread)
    outer = {name: bench.outer_tasks(events, thread, name) for name in FORCED + list(FRAME_PHASES)}
    starts = [t["ts"] for t in tasks]
    out = []
    for mark, following in zip(marks, marks[1:], strict=False):
        lo = bisect.bisect_right(starts, fired[mark]["ts"]) - 1
        hi = bisect.bisect_left(starts, fired[following]["ts"]) - 1
        task = tasks[lo]
        t0, t1 = task["ts"], task["ts"] + task["dur"]
        style, layout = (_within(outer[name], t0, t1) for name in FORCED)
        row = {
            "change": mark.split(":", 1)[1],
            "change_ms": task.get("tdur", 0) / 1000,
            "script_ms": task.get("tdur", 0) / 1000 - _ms(style) - _ms(layout),
            "style_ms": _ms(style),
            "restyled": sum(e["args"].get("elementCount", 0) for e in style),
            "layout_ms": _ms(layout),
            "laid_out": sum(e["args"]["beginData"].get("dirtyObjects", 0) for e in layout),
            "frame_ms": sum(t.get("tdur", 0) for t in tasks[lo + 1 : hi]) / 1000,
        }
        f0, f1 = t1, fired[following]["ts"]
        for name, label in FRAME_PHASES.items():
            row[f"{label}_ms"] = _ms(_within(outer[name], f0, f1))
        out.append(row)
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
            + ", ".join(f"{v} {row[f'{v}_ms']:.1f}" for v in FRAME_PHASES.values())
        )
        if args.why:
            for text, n in reasons(events, marks)[k]:
                print(f"    {n:5d}  {text}")
    total = [r["change_ms"] + r["frame_ms"] for r in rows]
    print(f"median change + frame: {statistics.median(total):.1f} ms over {len(rows)} changes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
