"""`pagedsim view FILE --html PAGE`: a saved trace or a vLLM KV event stream as a page.

FILE is a JSON trace (`pagedsim tour --json`, `play` or `generate` with `--trace-out`),
a vLLM KV event stream as JSON lines (one KVEventBatch or event per line), or a capture
of vLLM's ZMQ messages (`--save x.kvcap`; the format is in `pagedsim/kv_stream.py`).
Every event of a stream is one step; `--every N` keeps every Nth (the page says so).

`pagedsim view --zmq tcp://HOST:PORT --html PAGE` subscribes to a running vLLM server's
KV events, as vLLM's `kv_events_subscriber` example does, and rewrites PAGE every
`--refresh` seconds while events arrive (the page reloads itself and follows the newest
step while it shows the last one). Ctrl-C, `--max-events` or `--duration` stops it; the
page is then written without the reload, and `--save` keeps the stream (a `.kvcap`
capture, or JSON lines for any other name). Files are read as data only: JSON and msgpack
with closed schemas, size-limited; nothing is unpickled or evaluated.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..io.args import ArgParser, distinct_files, float_in, int_in
from ..text.lang import LANGS, detect
from . import page_html, sources, write_html
from . import stream as stream_page

YEAR = 365 * 24 * 3600  # seconds: the longest --duration or --refresh


def _parser():
    p = ArgParser(prog="pagedsim view", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "trace",
        type=Path,
        nargs="?",
        help="a JSON trace, a KV event stream (JSON lines) or a .kvcap capture",
    )
    p.add_argument("--html", type=Path, metavar="FILE", help="the page to write (one .html file)")
    p.add_argument("--title", default=None, help="the page's title (default: the trace's)")
    p.add_argument(
        "--lang", choices=LANGS, default=None, help="captions in en or zh (default: the locale)"
    )
    p.add_argument("--every", type=int_in(1, 1 << 30), default=1, help="show every Nth event")
    p.add_argument(
        "--no-kernel",
        action="store_true",
        help="leave out the kernel's view (cuda_kernels' split-K plan, bytes read, contiguous "
        "waste), which a trace's page has by default",
    )
    live = p.add_argument_group("a live vLLM server")
    live.add_argument("--zmq", metavar="URL", help="subscribe to KV events at tcp://HOST:PORT")
    live.add_argument("--topic", default="", help="the ZMQ topic to subscribe to (default: all)")
    live.add_argument(
        "--bind", action="store_true", help="bind URL (vLLM connects to a non-wildcard endpoint)"
    )
    live.add_argument("--replay", metavar="URL", help="vLLM's replay endpoint: ask gaps back")
    live.add_argument("--max-events", type=int_in(1, 1 << 40), default=None, help="stop after N")
    seconds = float_in(0, YEAR, open_low=True)  # nan would never stop, nor ever refresh
    live.add_argument("--duration", type=seconds, default=None, help="stop after SECONDS")
    live.add_argument("--refresh", type=seconds, default=1.0, help="rewrite the page every SECONDS")
    live.add_argument(
        "--save", type=Path, metavar="FILE", help="keep the stream (.kvcap or JSON lines)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    lang = detect(args.lang)
    distinct_files(p, {"FILE": args.trace}, {"--html": args.html, "--save": args.save})
    if args.zmq:
        if args.trace:
            p.error("give FILE or --zmq URL, not both")
        if not (args.html or args.save):
            p.error("--zmq needs --html PAGE or --save FILE (or both)")
        return _live(args, p, lang)
    if args.trace is None or args.html is None:
        p.error("give FILE and --html PAGE (or --zmq URL)")
    if not args.trace.is_file():
        p.error(f"no such trace: {args.trace}")
    from ..io.trace_json import MAX_BYTES, json_of, read_bounded
    from ..kv_stream import batches_in

    try:  # read once, bounded before reading: a stream's batches, or a trace's JSON below
        raw = read_bounded(args.trace, MAX_BYTES, "trace or stream")
        batches = batches_in(raw)
    except (OSError, ValueError) as e:
        p.error(f"{args.trace}: {e}")
    title = args.title or f"pagedsim view {args.trace.name}"
    if batches is not None:
        try:
            data = stream_page.page_data(batches, lang=lang, title=title, every=args.every)
        except ValueError as e:
            p.error(f"{args.trace}: {e}")
        print(f"wrote {_write(args.html, page_html(data))}", file=sys.stderr)
        return 0
    try:
        data = json_of(raw, args.trace)
    except ValueError as e:
        p.error(str(e))
    page = sources.saved(data, lang, title=title)
    if args.no_kernel:
        o = page["options"]
        page["options"] = replace(o, story={**(o.story or {}), "kernel": False})
    written = write_html(args.html, **page)
    size = args.html.stat().st_size
    print(
        f"wrote {written} ({size:,} bytes from a {len(raw):,}-byte trace)",
        file=sys.stderr,
    )
    return 0


def _write(path: Path, text: str) -> str:
    """Write the page whole (a reader reloading it never sees half of it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return str(path)


def _live(args, p, lang: str) -> int:
    from ..kv_subscriber import Subscriber

    try:
        sub = Subscriber(args.zmq, args.topic, args.bind, args.replay)
    except ValueError as e:
        p.error(str(e))
    print(f"pagedsim view: listening on {args.zmq} (Ctrl-C stops)", file=sys.stderr, flush=True)
    title = args.title or f"pagedsim view --zmq {args.zmq}"
    end = time.monotonic() + args.duration if args.duration else None
    written, dirty = 0.0, True

    def page(live: float) -> None:
        data = stream_page.page_data(
            sub.batches(), lang=lang, title=title, every=args.every, live=live
        )
        _write(args.html, page_html(data))

    try:
        while not (args.max_events and sub.num_events >= args.max_events):
            if end is not None and time.monotonic() >= end:
                break
            dirty |= sub.poll(100) > 0
            if args.html and dirty and time.monotonic() - written >= args.refresh:
                page(max(args.refresh, 1.0))
                written, dirty = time.monotonic(), False
    except KeyboardInterrupt:
        pass
    finally:
        sub.close()
    if args.html:
        page(0)
        print(f"wrote {args.html}", file=sys.stderr)
    if args.save:
        _save(sub, args.save)
        print(f"wrote {args.save}", file=sys.stderr)
    print(
        f"{sub.num_events:,} events in {len(sub.entries):,} batches"
        + (f", {sub.refused} messages refused" if sub.refused else ""),
        file=sys.stderr,
    )
    return 0


def _save(sub, path: Path) -> None:
    from ..kv_events import batch_to_json

    if path.suffix == ".kvcap":
        sub.save(path)
        return
    with open(path, "w", encoding="utf-8") as f:
        for b in sub.batches():
            f.write(json.dumps(batch_to_json(b)) + "\n")
