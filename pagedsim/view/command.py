"""`pagedsim view TRACE.json --html FILE`: a saved trace as a page to step through in a browser.

TRACE.json is what `pagedsim tour --json`, `pagedsim play ... --trace-out` or
`pagedsim generate ... --trace-out` saved. The file is read as data only (JSON with a
closed schema, `app/trace_json.py`, size-limited), so a trace from anyone is safe to view.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..app.lang import LANGS, detect
from . import sources, write_html

MAX_BYTES = 256 << 20  # a 2,000-step trace on 4,096 blocks is far smaller


def main(argv: list[str] | None = None) -> int:
    from ..app.args import ArgParser

    p = ArgParser(prog="pagedsim view", description=__doc__.split("\n\n")[0])
    p.add_argument("trace", type=Path, help="a JSON trace (tour --json, play/generate --trace-out)")
    p.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        required=True,
        help="the page to write (one self-contained .html file)",
    )
    p.add_argument("--title", default=None, help="the page's title (default: the trace's)")
    p.add_argument(
        "--lang", choices=LANGS, default=None, help="captions in en or zh (default: the locale)"
    )
    p.add_argument(
        "--kernel",
        action="store_true",
        help="add the kernel's view (cuda_kernels' split-K plan, bytes read, contiguous waste)",
    )
    args = p.parse_args(argv)
    if not args.trace.is_file():
        p.error(f"no such trace: {args.trace}")
    if args.trace.stat().st_size > MAX_BYTES:
        p.error(f"{args.trace} is larger than {MAX_BYTES >> 20} MiB")
    try:
        data = json.loads(args.trace.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as e:
        p.error(f"{args.trace}: not JSON ({e.msg} at line {e.lineno})")
    except UnicodeDecodeError as e:
        p.error(f"{args.trace}: not UTF-8 text (byte {e.start})")
    page = sources.saved(data, detect(args.lang), title=f"pagedsim view {args.trace.name}")
    if args.title:
        page["title"] = args.title
    if args.kernel:
        from .kernel_view import kernel_story

        page["story"] = {
            **page.get("story", {}),
            "kernel": kernel_story(page["trace_or_snapshots"]),
        }
    written = write_html(args.html, **page)
    size = args.html.stat().st_size
    print(
        f"wrote {written} ({size:,} bytes from a {args.trace.stat().st_size:,}-byte trace)",
        file=sys.stderr,
    )
    return 0
