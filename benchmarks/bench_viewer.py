"""The trace page at scale: page size and step-change time for 2,000 steps on 4,096 blocks.

A random playground scenario (`scenario`) drives a real `Session`; it is written as a play
script, so the same page comes from the command line:

    python benchmarks/bench_viewer.py --script /tmp/long.play     (writes the script too)
    pagedsim play /tmp/long.play --num-gpu-blocks-override 4096 --block-size 16 --html long.html

Measured in headless system Chromium (Playwright, never a browser download): the page's size
(target <= 6 MB), the time to write and to load it, and each kind of step change (TIMING;
target < 100 ms); `--cpu` adds the renderer's CPU (`cpu_times`), `--paired` compares two
pages jump by jump (`paired_jumps`; with `--from I`, next steps from step I on instead).
benchmarks/README.md has the method and the figures.
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
VIEWPORT = {"width": 1600, "height": 1000}


def show(tab, path: Path):
    """The browser tab with the saved page `path` loaded and its viewer started."""
    tab.goto(path.resolve().as_uri())
    tab.wait_for_function("() => window.pagedsimViewer !== undefined")
    return tab


def mark_of(e: dict) -> str | None:
    """The message of a trace event that is a page's `console.timeStamp` mark, else None."""
    return (
        e.get("args", {}).get("data", {}).get("message") if e.get("name") == "TimeStamp" else None
    )


@contextlib.contextmanager
def chromium():
    """The system Chromium, headless (ARGS), closed after the block."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@contextlib.contextmanager
def traced(browser, tab, categories: list):
    """Chromium's trace of `tab` during the block: the list yielded holds its events after."""
    trace = Path(tempfile.mkdtemp()) / "trace.json"
    events: list = []
    browser.start_tracing(page=tab, path=str(trace), categories=categories)
    yield events
    browser.stop_tracing()
    data = json.loads(trace.read_text(encoding="utf-8"))
    shutil.rmtree(trace.parent)
    events += data["traceEvents"] if isinstance(data, dict) else data


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


def within(found: list, t0: float, t1: float) -> list:
    """The events of a time-ordered list that start in [t0, t1)."""
    at = [e["ts"] for e in found]
    return found[bisect.bisect_left(at, t0) : bisect.bisect_left(at, t1)]


def cpu_ms(found: list) -> float:
    """The thread time (ms) of these trace events."""
    return sum(e.get("tdur", 0) for e in found) / 1000


def cpu_median(rows: list, key: str) -> float:
    """The median over `rows` (of `per_change`) of their `key` events' thread time (ms)."""
    return statistics.median(cpu_ms(r[key]) for r in rows)


# the rendering phases a change and its frame are split into (trace event -> name shown)
PHASES = {
    "UpdateLayoutTree": "style",
    "Layout": "layout",
    "PrePaint": "prepaint",
    "Paint": "paint",
    "Layerize": "layerize",
}


def per_change(events: list, thread: tuple, fired: list, phases: dict = PHASES) -> list[dict]:
    """For each change marked at a time of `fired` (in order), trace events of the renderer
    thread: "change", the task it ran in; "frame", the tasks after it up to the next change's
    (what puts it on screen; None after the last); "change.<phase>" and "frame.<phase>", the
    outermost events of each of `phases` in them. ValueError for a change outside every task."""
    tasks = outer_tasks(events, thread)
    starts = [t["ts"] for t in tasks]  # these do not overlap
    outer = {name: outer_tasks(events, thread, name) for name in phases}
    held = []  # the index of the task each change ran in
    for ts in fired:
        i = bisect.bisect_right(starts, ts) - 1
        if i < 0 or ts >= starts[i] + tasks[i]["dur"]:
            raise ValueError(f"change {len(held)} ran outside every task")
        held.append(i)
    rows = []
    for i, j in zip(held, [*held[1:], None], strict=True):
        end = starts[i] + tasks[i]["dur"]
        row = {"change": [tasks[i]], "frame": None if j is None else tasks[i + 1 : j]}
        for name, label in phases.items():
            row[f"change.{label}"] = within(outer[name], starts[i], end)
            row[f"frame.{label}"] = None if j is None else within(outer[name], end, starts[j])
        rows.append(row)
    return rows


def cpu_times(events: list, counts: dict) -> dict:
    """The renderer main thread's CPU time (thread time, so the load of other processes on a
    shared machine counts far less than in wall time) for each step change, the layout it
    forces included, and for the frame after it (style, layout, paint, layerize: what the
    change costs before it is on screen), from a Chromium trace of the TIMING run; medians
    by kind. `counts`: how many changes of each kind the run made, in TIMING's order."""
    # each change is marked (console.timeStamp) in its task; the page's own timers (a URL
    # written when steps pause) are not changes
    fires = [e for e in events if mark_of(e) == MARK]
    if not fires:
        return {"cpu": "not measured: no change marked in the trace"}
    pid, tid = collections.Counter((e["pid"], e["tid"]) for e in fires).most_common(1)[0][0]
    fires = sorted(e["ts"] for e in fires if (e["pid"], e["tid"]) == (pid, tid))
    if len(fires) != sum(counts.values()):
        return {"cpu": f"not measured: {len(fires)} marks for {sum(counts.values())} changes"}
    try:
        rows = per_change(events, (pid, tid), fires)
    except ValueError as why:
        return {"cpu": f"not measured: {why}"}
    out, at = {}, 0
    for kind, n in counts.items():
        for part, key in (("change", "cpu"), ("frame", "frame_cpu")):
            done = [r for r in rows[at : at + n] if r[part] is not None]  # the last: no frame
            if done:
                out[f"{kind}_{key}_ms_median"] = round(cpu_median(done, part), 2)
                out[f"{kind}_{key}_phases"] = ", ".join(
                    f"{v} {cpu_median(done, f'{part}.{v}'):.1f}" for v in PHASES.values()
                )
        at += n
    return out


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
    out = []
    with chromium() as b:
        for path in pages:
            page = b.new_page(viewport=VIEWPORT)
            t0 = time.perf_counter()
            show(page, path).evaluate("() => document.body.getBoundingClientRect()")
            load = time.perf_counter() - t0
            n = page.evaluate("window.pagedsimViewer.count()")
            rng = random.Random(seed)
            jumps = [rng.randrange(n) for _ in range(samples)]
            with traced(b, page, TRACED) if cpu else contextlib.nullcontext([]) as events:
                timing = page.evaluate(TIMING, [jumps, samples])
            page.close()
            summary = {"page": str(path), "page_bytes": path.stat().st_size}
            summary.update(load_s=round(load, 3), steps=n)
            for kind, values in timing.items():
                summary[f"{kind}_ms_median"] = round(statistics.median(values), 2)
                summary[f"{kind}_ms_p95"] = round(sorted(values)[int(0.95 * (len(values) - 1))], 2)
                summary[f"{kind}_ms_max"] = round(max(values), 2)
            if cpu:
                summary.update(cpu_times(events, {k: len(v) for k, v in timing.items()}))
            out.append(summary)
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


def paired_jumps(pages: list[Path], jumps: int, seed: int = 1, first: int | None = None) -> dict:
    """Two pages in two tabs of one traced browser take the same random jumps in turn (which
    goes first alternates), so a load spike falls on both: per page the renderer main
    thread's CPU per jump (the change's task and its thread's tasks up to its next jump),
    and the median of the per-jump ratios second / first, which the load moves far less
    than either page's own figure. `first`: next steps from that step on, not random jumps."""
    marks = [f"{MARK}-{k}" for k in range(len(pages))] + [f"{MARK}-end"]
    with chromium() as b:
        tabs = [show(b.new_page(viewport=VIEWPORT), path) for path in pages]
        rng, n = random.Random(seed), tabs[0].evaluate("window.pagedsimViewer.count()")
        with traced(b, tabs[0], TRACED) as events:
            for j in range(jumps):
                i = rng.randrange(n) if first is None else min(n - 1, first + j)
                for k in range(len(tabs)) if j % 2 == 0 else reversed(range(len(tabs))):
                    tabs[k].evaluate(PAIRED_JUMP, [i, marks[k]])
            for tab in tabs:
                tab.evaluate(PAIRED_JUMP, [0, marks[-1]])
    per_thread = collections.defaultdict(list)
    for e in events:
        if mark_of(e) in marks:
            per_thread[(e["pid"], e["tid"])].append((e["ts"], marks.index(mark_of(e))))
    cpu: list[list[float]] = [[] for _ in pages]
    for thread, fired in per_thread.items():
        fired.sort()
        try:
            rows = per_change(events, thread, [ts for ts, _ in fired], {})
        except ValueError as why:
            return {"paired": f"not measured: {why}"}
        for (_, k), row in zip(fired[:-1], rows, strict=False):
            if k < len(pages):
                cpu[k].append(cpu_ms(row["change"] + row["frame"]))
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
    p.add_argument(
        "--from", type=int, dest="first", metavar="I", help="--paired: next steps from I"
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
            print(json.dumps(paired_jumps(args.page, args.paired, first=args.first), indent=1))
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
