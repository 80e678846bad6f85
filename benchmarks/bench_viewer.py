"""The trace page at scale: page size and step-change time for 2,000 steps on 4,096 blocks.

A random playground scenario (`scenario`) drives a real `Session` on a pool of 4,096
blocks x 16 tokens until it has 2,000 steps: prompts, decodes, beam-search forks,
finishes and, when the pool runs dry, OutOfBlocks steps. The scenario is written as a
play script, so the same page comes from the command line:

    python benchmarks/bench_viewer.py --script /tmp/long.play     (writes the script too)
    pagedsim play /tmp/long.play --num-gpu-blocks-override 4096 --block-size 16 --html long.html

Measured: the page's size in bytes (target <= 6 MB), the time to write it, and, in a
headless system Chromium (Playwright; never a browser download), the time from load to
the first drawn step and the time of one step change including the layout it forces, by
kind: next and previous step (ArrowRight / ArrowLeft), a random jump (`go(i)`, what a
`#step=i` link does), the scrubber (its input event) and Home/End. Target: under 100 ms
per step change, every kind. Times are wall-clock on this machine; run it on an idle one.
On a shared one, `--cpu` also traces the run and reports the renderer main thread's CPU
time (thread time) per step change and per frame after it (the paint that puts the change
on screen), each also split into style, layout, pre-paint, paint and layerize, which the
load of other processes moves far less; tracing slows the wall-clock figures of that run,
so compare those from runs without it.

    python benchmarks/bench_viewer.py [--steps 2000] [--blocks 4096] [--json]
    python benchmarks/bench_viewer.py --page a.html --page b.html    (side by side)
    python benchmarks/bench_viewer.py --page a.html --page b.html --cpu
    python benchmarks/bench_viewer.py --page a.html --page b.html --busy --samples 20
    python benchmarks/bench_viewer.py --page a.html --page b.html --paired 40

`--paired` opens the two pages in two tabs of one traced browser and makes the same random
jump in each in turn: the median of the per-jump CPU ratios is what to compare on a
machine whose load moves each page's own figure by tens of percent from run to run.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import json
import multiprocessing
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pagedsim.app.play_session import Options, Refused, Session
from pagedsim.view import sources, to_html

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def scenario(steps: int, blocks: int, block_size: int, seed: int = 0) -> tuple[Session, list]:
    """A session with `steps` accepted commands, and those commands (a play script)."""
    rng, session, made, script = random.Random(seed), Session(Options(blocks, block_size)), 0, []
    tokens = blocks * block_size
    while len(script) < steps:
        live, roll = session.manager.seq_ids(), rng.random()
        if not live or roll < 0.22:
            made += 1
            command = f"alloc s{made} {rng.randint(1, max(2, tokens // 48))}"
        elif roll < 0.72:
            command = f"append {rng.choice(live)} {rng.randint(1, 3 * block_size)}"
        elif roll < 0.80:
            made += 1
            command = f"fork {rng.choice(live)} s{made}"
        else:
            command = f"free {rng.choice(live)}"
        try:
            session.run(command)
        except Refused:
            continue
        script.append(command)
    return session, script


# One timed step change per kind, driven the way a person drives the page: keys dispatched on
# the document, the scrubber's input event, and go(i) (what a link's #step=i does). Between
# two samples the page renders a frame, so what scrolled into view is drawn, as in use.
MARK = "pagedsim-bench-change"
TIMING = """async ([jumps, samples]) => {
    const v = window.pagedsimViewer, n = v.count(), scrub = document.getElementById("scrubber");
    const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    const key = (k) => () =>
        document.dispatchEvent(new KeyboardEvent("keydown", {key: k, bubbles: true}));
    const slide = (i) => () => {
        scrub.value = String(i);
        scrub.dispatchEvent(new Event("input"));
    };
    const out = {next: [], prev: [], jump: [], scrub: [], home_end: []};
    const time = async (kind, change) => {
        await frame();
        const t = performance.now();
        console.timeStamp(MARK);  // tells the change's task apart in a trace (cpu_times)
        change();
        document.body.getBoundingClientRect();  // the layout the change forces
        out[kind].push(performance.now() - t);
    };
    v.go(0);
    for (let k = 0; k < samples; k++) await time("next", key("ArrowRight"));
    for (let k = 0; k < samples; k++) await time("prev", key("ArrowLeft"));
    for (const i of jumps) await time("jump", () => v.go(i));
    for (const i of jumps) await time("scrub", slide(n - 1 - i));
    for (let k = 0; k < samples; k += 2) {
        await time("home_end", key("Home"));
        await time("home_end", key("End"));
    }
    await frame();  // the last change's task ends inside the trace
    return out;
}""".replace("MARK", json.dumps(MARK))


TRACED = ["devtools.timeline", "disabled-by-default-devtools.timeline"]  # RunTask is in the second
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # Debian's, never a download


def mark_of(e: dict) -> str | None:
    """The message of a trace event that is a page's `console.timeStamp` mark, else None."""
    return (
        e.get("args", {}).get("data", {}).get("message") if e.get("name") == "TimeStamp" else None
    )


def cpu_times(trace: Path, counts: dict) -> dict:
    """The renderer main thread's CPU time (thread time, so the load of other processes on a
    shared machine counts far less than in wall time) for each step change, the layout it
    forces included, and for the frame after it (style, layout, paint, layerize: what the
    change costs before it is on screen), from a Chromium trace of the TIMING run; medians
    by kind. `counts`: how many changes of each kind the run made, in TIMING's order."""
    data = json.loads(trace.read_text(encoding="utf-8"))
    events = data["traceEvents"] if isinstance(data, dict) else data
    # each change is marked (console.timeStamp) in its task; the page's own timers (a URL
    # written when steps pause) are not changes
    fires = [e for e in events if mark_of(e) == MARK]
    if not fires:
        return {"cpu": "not measured: no change marked in the trace"}
    pid, tid = collections.Counter((e["pid"], e["tid"]) for e in fires).most_common(1)[0][0]
    fires = sorted((e for e in fires if (e["pid"], e["tid"]) == (pid, tid)), key=lambda e: e["ts"])
    if len(fires) != sum(counts.values()):
        return {"cpu": f"not measured: {len(fires)} marks for {sum(counts.values())} changes"}
    tasks = outer_tasks(events, (pid, tid))
    starts = [t["ts"] for t in tasks]  # these do not overlap
    holder = []  # the index of the task each change ran in
    for f in fires:
        i = bisect.bisect_right(starts, f["ts"]) - 1
        if i < 0 or f["ts"] >= starts[i] + tasks[i]["dur"]:
            return {"cpu": f"not measured: change {len(holder)} ran outside every task"}
        holder.append(i)
    change = [tasks[i].get("tdur", 0) / 1000 for i in holder]
    frame, spans = [], [(tasks[i]["ts"], tasks[i]["ts"] + tasks[i]["dur"]) for i in holder]
    frame_spans = []
    for i, j in zip(holder, holder[1:], strict=False):
        lo = bisect.bisect_left(starts, starts[i] + tasks[i]["dur"], i + 1)
        hi = bisect.bisect_left(starts, starts[j])
        frame.append(sum(t.get("tdur", 0) for t in tasks[lo:hi]) / 1000)
        frame_spans.append((starts[i] + tasks[i]["dur"], starts[j]))
    change_phases = phase_split(events, (pid, tid), spans)
    frame_phases = phase_split(events, (pid, tid), frame_spans)
    out, at = {}, 0
    for kind, n in counts.items():
        out[f"{kind}_cpu_ms_median"] = round(statistics.median(change[at : at + n]), 2)
        out[f"{kind}_cpu_phases"] = phase_medians(change_phases[at : at + n])
        frames = frame[at : at + n]  # the last change has no frame after it in the trace
        if frames:
            out[f"{kind}_frame_cpu_ms_median"] = round(statistics.median(frames), 2)
            out[f"{kind}_frame_cpu_phases"] = phase_medians(frame_phases[at : at + n])
        at += n
    return out


def outer_tasks(events: list, thread: tuple, name: str = "RunTask") -> list:
    """The thread's outermost tasks (or complete events `name`), in time order (one run inside
    another of the same name is counted in it); they do not overlap."""
    nested = sorted(
        (
            e
            for e in events
            if e.get("name") == name
            and e.get("ph") == "X"
            and (e.get("pid"), e.get("tid")) == thread
        ),
        key=lambda e: (e["ts"], -e["dur"]),
    )
    tasks: list = []
    for t in nested:
        if not tasks or t["ts"] >= tasks[-1]["ts"] + tasks[-1]["dur"]:
            tasks.append(t)
    return tasks


# the rendering phases a change and its frame are split into (trace event -> name shown)
PHASES = {
    "UpdateLayoutTree": "style",
    "Layout": "layout",
    "PrePaint": "prepaint",
    "Paint": "paint",
    "Layerize": "layerize",
}


def phase_split(events: list, thread: tuple, spans: list) -> list[dict]:
    """For each (start, end) span, the thread's CPU time (ms) in each of PHASES; an event
    nested in one of the same name (a paint inside a paint) is counted in the outer one."""
    found = sorted(
        (
            e
            for e in events
            if e.get("name") in PHASES
            and e.get("ph") == "X"
            and (e.get("pid"), e.get("tid")) == thread
        ),
        key=lambda e: (e["ts"], -e["dur"]),
    )
    outer: list = []
    ends: dict = {}
    for e in found:
        if e["ts"] >= ends.get(e["name"], -1):
            outer.append(e)
            ends[e["name"]] = e["ts"] + e["dur"]
    at = [e["ts"] for e in outer]
    split = []
    for t0, t1 in spans:
        took = dict.fromkeys(PHASES.values(), 0.0)
        for e in outer[bisect.bisect_left(at, t0) : bisect.bisect_left(at, t1)]:
            took[PHASES[e["name"]]] += e.get("tdur", 0) / 1000
        split.append(took)
    return split


def phase_medians(split: list[dict]) -> str:
    """'style 5.4, layout 5.2, ...': the median of each phase over the changes of a kind."""
    return ", ".join(f"{k} {statistics.median(d[k] for d in split):.1f}" for k in PHASES.values())


def _spin(stop) -> None:  # a busy process: what a loaded teaching machine runs beside the page
    while not stop.is_set():
        sum(range(10_000))


@contextlib.contextmanager
def busy(on: bool):
    """With `on`: one busy process per core for the duration (the issue's "machine under
    load"); each is ended when the block ends."""
    if not on:
        yield
        return
    stop = multiprocessing.Event()
    spinners = [
        multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(os.cpu_count() or 1)
    ]
    for proc in spinners:
        proc.start()
    try:
        yield
    finally:
        stop.set()
        for proc in spinners:
            proc.join(5)


def browser_times(pages: list[Path], samples: int, seed: int = 1, cpu: bool = False) -> list[dict]:
    """Each page's load time and step-change times, the pages timed in turn in one browser;
    `cpu`: the run is traced and `cpu_times` added."""
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for path in pages:
            page = b.new_page(viewport={"width": 1600, "height": 1000})
            t0 = time.perf_counter()
            page.goto(path.resolve().as_uri())
            page.wait_for_function("() => window.pagedsimViewer !== undefined")
            page.evaluate("() => document.body.getBoundingClientRect()")
            load = time.perf_counter() - t0
            n = page.evaluate("window.pagedsimViewer.count()")
            rng = random.Random(seed)
            if cpu:
                trace = Path(tempfile.mkdtemp()) / "trace.json"
                b.start_tracing(page=page, path=str(trace), categories=TRACED)
            timing = page.evaluate(TIMING, [[rng.randrange(n) for _ in range(samples)], samples])
            if cpu:
                b.stop_tracing()
            page.close()
            summary = {"page": str(path), "page_bytes": path.stat().st_size}
            summary.update(load_s=round(load, 3), steps=n)
            for kind, values in timing.items():
                summary[f"{kind}_ms_median"] = round(statistics.median(values), 2)
                summary[f"{kind}_ms_p95"] = round(sorted(values)[int(0.95 * (len(values) - 1))], 2)
                summary[f"{kind}_ms_max"] = round(max(values), 2)
            if cpu:
                summary.update(cpu_times(trace, {k: len(v) for k, v in timing.items()}))
                shutil.rmtree(trace.parent)
            out.append(summary)
        b.close()
    return out


# One jump of one page in a paired run: a frame, the marked change, its layout, a frame.
PAIRED_JUMP = """async ([i, mark]) => {
    const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    await frame();
    console.timeStamp(mark);
    window.pagedsimViewer.go(i);
    document.body.getBoundingClientRect();
    await frame();
}"""


def paired_jumps(pages: list[Path], jumps: int, seed: int = 1) -> dict:
    """Two pages in two tabs of one traced browser take the same random jumps in turn (which
    goes first alternates), so a load spike falls on both: per page the renderer main
    thread's CPU per jump (the change's task and its thread's tasks up to its next jump),
    and the median of the per-jump ratios second / first, which the load moves far less
    than either page's own figure."""
    from playwright.sync_api import sync_playwright

    marks = [f"{MARK}-{k}" for k in range(len(pages))] + [f"{MARK}-end"]
    trace = Path(tempfile.mkdtemp()) / "trace.json"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        tabs = [b.new_page(viewport={"width": 1600, "height": 1000}) for _ in pages]
        for tab, path in zip(tabs, pages, strict=True):
            tab.goto(path.resolve().as_uri())
            tab.wait_for_function("() => window.pagedsimViewer !== undefined")
        rng, n = random.Random(seed), tabs[0].evaluate("window.pagedsimViewer.count()")
        b.start_tracing(page=tabs[0], path=str(trace), categories=TRACED)
        for j in range(jumps):
            i = rng.randrange(n)
            for k in range(len(tabs)) if j % 2 == 0 else reversed(range(len(tabs))):
                tabs[k].evaluate(PAIRED_JUMP, [i, marks[k]])
        for tab in tabs:
            tab.evaluate(PAIRED_JUMP, [0, marks[-1]])
        b.stop_tracing()
        b.close()
    events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    shutil.rmtree(trace.parent)
    per_thread = collections.defaultdict(list)
    for e in events:
        message = mark_of(e)
        if message in marks:
            per_thread[(e["pid"], e["tid"])].append((e["ts"], marks.index(message)))
    cpu: list[list[float]] = [[] for _ in pages]
    for thread, fired in per_thread.items():
        tasks, fired = outer_tasks(events, thread), sorted(fired)
        starts = [t["ts"] for t in tasks]
        for (ts, k), (next_ts, _) in zip(fired, fired[1:], strict=False):
            lo, hi = bisect.bisect_right(starts, ts) - 1, bisect.bisect_left(starts, next_ts) - 1
            if k < len(pages):
                cpu[k].append(sum(t.get("tdur", 0) for t in tasks[lo:hi]) / 1000)
    if any(len(c) != jumps for c in cpu):
        return {"paired": f"not measured: {[len(c) for c in cpu]} jumps found of {jumps}"}
    out: dict = {
        str(path): round(statistics.median(c), 2) for path, c in zip(pages, cpu, strict=True)
    }
    out["median_ratio_second_to_first"] = round(
        statistics.median(y / x for x, y in zip(*cpu, strict=True)), 3
    )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--blocks", type=int, default=4096)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--samples", type=int, default=200, help="step changes timed per kind")
    p.add_argument("--script", type=Path, help="also write the scenario as a play script here")
    p.add_argument("--html", type=Path, help="keep the page here (default: a temporary file)")
    p.add_argument(
        "--page",
        type=Path,
        action="append",
        help="time this page instead of a new one (repeat to time pages side by side)",
    )
    p.add_argument(
        "--cpu",
        action="store_true",
        help="also trace the run: the renderer's CPU time per step change and per frame after it",
    )
    p.add_argument(
        "--busy",
        action="store_true",
        help="time with one busy process per core beside the browser (keep --samples small)",
    )
    p.add_argument(
        "--paired",
        type=int,
        metavar="JUMPS",
        help="with two --page: the two in two tabs, one random jump each in turn, JUMPS times",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.page:
        missing = [str(x) for x in args.page if not x.is_file()]
        if missing:
            p.error(f"no such page: {', '.join(missing)}")
        if args.paired:
            if len(args.page) != 2:
                p.error("--paired takes two --page")
            print(json.dumps(paired_jumps(args.page, args.paired), indent=1))
            return 0
        with busy(args.busy):
            results = browser_times(args.page, args.samples, cpu=args.cpu)
    else:
        t0 = time.perf_counter()
        session, script = scenario(args.steps, args.blocks, args.block_size)
        simulate = time.perf_counter() - t0
        if args.script:
            args.script.write_text("\n".join(script) + "\n", encoding="utf-8")
        t0 = time.perf_counter()
        html = to_html(**sources.play(session))
        write = time.perf_counter() - t0
        out = args.html or Path(tempfile.mkdtemp()) / "long.html"
        out.write_text(html, encoding="utf-8")
        with busy(args.busy):
            results = browser_times([out], args.samples, cpu=args.cpu)
        results[0].update(
            steps=args.steps,
            blocks=args.blocks,
            simulate_s=round(simulate, 2),
            write_page_s=round(write, 2),
        )
    if args.json:
        print(json.dumps(results if len(results) > 1 else results[0], indent=1))
    else:
        for result in results:
            for k, v in result.items():
                print(f"{k:>18}: {v}")
            print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
