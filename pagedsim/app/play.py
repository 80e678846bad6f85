"""`pagedsim play`: a playground for the block manager, typed or scripted.

    pagedsim play                       type commands (stdin), see the pool after each
    pagedsim play SCRIPT --draw DIR     run a scenario script; write frames, key frames, a GIF
    pagedsim play --trace T.json --draw DIR   draw a trace saved by `pagedsim tour --json`
    pagedsim play --events E.jsonl --html F    replay a vLLM v1 KV event stream (JSON
                                        lines or a .kvcap capture), every event a step

The commands are `help_text()`; # starts a comment. After each command the pool is printed
(a SCRIPT written with `--html` prints captions only); a mistake is one line and changes
nothing. The flags pick the manager, under vLLM's engine-argument names:
`--enable-prefix-caching` (v1), `--sliding-window N` (with `--hybrid`: two KV cache groups),
`--preemption-mode recompute|swap` (preempt the newest sequence, as vLLM v0's scheduler does).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from ..io.args import ArgParser, distinct_files, int_in
from ..text.captions import caption
from ..text.lang import LANGS, detect, t, wrap
from ..trace import Snapshot
from ..view import sources, write_html
from . import tour
from .play_session import POLICIES, STEPS, Options, Refused, Session

FORMATS = ("png", "svg", "pdf")
OTHER = {  # command -> (arguments, what it does)
    "show": ("", "print the shown step again"),
    "back": ("[N]", "go N steps back in time (default 1)"),
    "forward": ("[N]", "go N steps forward again"),
    "draw": ("FILE", "draw the shown step into FILE (.png, .svg or .pdf)"),
    "help": ("", "this list"),
    "quit": ("", "stop (end of input does the same)"),
}


def help_text() -> str:
    rows = [(f"{op} {spec}".strip(), what) for op, (spec, what) in {**STEPS, **OTHER}.items()]
    return "\n".join(["commands:"] + [f"  {usage:<20} {what}" for usage, what in rows])


class Playground:
    """Reads commands, drives a `Session`, prints what happened. Never raises for a user mistake."""

    def __init__(
        self,
        session: Session,
        *,
        out: TextIO | None = None,
        width: int = 100,
        lang: str = "en",
        look: str = "paper",
        pool: bool = True,
    ):
        self.session, self.width, self.lang, self.look = session, width, lang, look
        self.pool = pool  # print the pool after each step (False: the caption only)
        self.out = out or sys.stdout
        self.mistakes = 0

    def say(self, text: str) -> None:
        echo(text, self.width, self.out)

    def show(self) -> None:
        s = self.session
        snap = s.shown(self.lang)
        where = f"moment {s.cursor}/{len(s.moments)}" + (
            "  (in the past: `forward` or a new command)" if s.cursor < len(s.moments) else ""
        )
        self.say(
            t("step {k}: {caption}", self.lang, tour.VIEW_ZH, k=snap.step, caption=caption(snap))
        )
        self.say(f"  [{where}]")
        if self.pool:
            self.say(tour.format_snapshot(snap, width=self.width, lang=self.lang))

    def command(self, line: str) -> bool:
        """Run one line; False when the user asked to stop."""
        text = line.split("#", 1)[0].strip()
        if not text:
            return True
        op, *words = text.split()
        try:
            if op in ("quit", "exit", "q"):
                return False
            if op == "help":
                self.say(help_text())
            elif op == "show":
                self.show()
            elif op in ("back", "forward"):
                n = _count(words, op)
                (self.session.back if op == "back" else self.session.forward)(n)
                self.show()
            elif op == "draw":
                if len(words) != 1:
                    raise Refused("usage: draw FILE (for example draw step.png)")
                self.say(f"wrote {draw_step(self.session, Path(words[0]), self.lang, self.look)}")
            else:
                self.session.run(text)
                self.show()
        except Refused as e:
            self.mistakes += 1
            self.say(f"! {text}: {e}")
        except Exception as e:  # noqa: BLE001 -- a playground never shows a traceback
            self.mistakes += 1
            self.say(
                f"! {text}: pagedsim could not do this ({type(e).__name__}: {e}); please report it"
            )
        return True

    def loop(self, lines: Iterable[str], *, echo: bool = False, prompt: str = "") -> None:
        for line in lines:
            if echo and line.strip():
                self.say(f"> {line.rstrip()}")
            if not self.command(line):
                break
            if prompt:
                print(prompt, end="", file=self.out, flush=True)


def echo(text: str, width: int, out: TextIO | None = None) -> None:
    """Print `text` made printable (`printable`) and wrapped at `width`, line by line."""
    lines = (printable(line) for line in text.split("\n"))
    print("\n".join(o for line in lines for o in wrap(line, width)), file=out or sys.stdout)


def printable(text: object) -> str:
    """`text` with control characters written as escapes: a sequence name cannot move the
    cursor or recolour the terminal."""
    return "".join(c if c.isprintable() or c == "\t" else ascii(c)[1:-1] for c in str(text))


def _count(words: list[str], op: str) -> int:
    if not words:
        return 1
    if len(words) > 1 or not words[0].isdigit() or int(words[0]) < 1:
        raise Refused(f"usage: {op} [N], N a positive whole number")
    return int(words[0])


def draw_step(session: Session, path: Path, lang: str = "en", look: str = "paper") -> Path:
    """Draw the shown step into `path`; the format comes from the suffix."""
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise Refused(f"draw: {path.name} must end in .png, .svg or .pdf")
    from ..draw import (
        scenario,  # matplotlib only now
        style,
    )

    with style.output(fmt=fmt, lang=lang, look=look):
        return scenario.draw_one(session.timeline(lang), session.cursor, path)


FILE_FLAGS = (  # (flag, metavar, help): what is read or written, in --help order
    ("--trace", "FILE", "a trace from `pagedsim tour --json` to draw"),
    ("--events", "FILE", "a vLLM KV event stream (JSON lines or a .kvcap capture) to replay"),
    ("--draw", "DIR", "write one frame per step, the key frames and a GIF"),
    ("--html", "FILE", "write the steps as one self-contained page to step through in a browser"),
    ("--trace-out", "FILE", "save the steps as a JSON trace (for `pagedsim view`)"),
)


def parser() -> ArgParser:
    """`pagedsim play`'s command line."""
    p = ArgParser(
        prog="pagedsim play",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_text(),
    )
    p.add_argument("script", nargs="?", type=Path, help="a scenario file (default: read stdin)")
    for flag, metavar, help_ in FILE_FLAGS:
        p.add_argument(flag, type=Path, metavar=metavar, help=help_)
    p.add_argument(
        "--format", choices=FORMATS, default="png", help="format of the frames (default png)"
    )
    p.add_argument(
        "--style",
        choices=("paper", "projector"),
        default="paper",
        help="projector: text >= 12 pt and strong colours, for slides",
    )
    _pool_arguments(p)
    p.add_argument(
        "--width",
        type=int_in(20, 1000),
        default=None,
        help="line width, 20..1000 (default: the terminal's)",
    )
    p.add_argument("--lang", choices=LANGS, default=None, help="en or zh (default: the locale)")
    return p


def _pool_arguments(p: ArgParser) -> None:
    """The pool a script plays on: its size, the block size, and the vLLM features it runs."""
    p.add_argument(
        "--num-gpu-blocks-override",
        type=int_in(1, 4096),
        default=12,
        metavar="N",
        help="blocks in the pool (default 12)",
    )
    p.add_argument(
        "--block-size", type=int_in(1, 1024), default=4, help="tokens per block (default 4)"
    )
    p.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="share full prompt blocks (equal WORDs); off unless given",
    )
    p.add_argument(
        "--sliding-window",
        "--window",  # the flag's name before it took vLLM's: scripts and lecture notes use it
        type=int_in(1, 1 << 20),
        metavar="N",
        help="sliding-window attention over N tokens (--window N is the same flag)",
    )
    p.add_argument(
        "--hybrid",
        nargs="?",
        const=True,
        default=False,
        type=int_in(1, 1 << 20),
        metavar="N",
        help="two KV cache groups (vLLM v1): full attention + the --sliding-window N group "
        "(--hybrid N gives the window here)",
    )
    p.add_argument(
        "--preemption-mode",
        choices=POLICIES,
        default="none",
        help="when the pool is short: none (the step fails), recompute or swap the newest",
    )


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if sum(map(bool, (args.script, args.trace, args.events))) > 1:
        p.error(
            "give one of SCRIPT, --trace FILE or --events FILE (a trace or an event stream "
            "is drawn as saved; a script builds a new one)"
        )
    reads = {"SCRIPT": args.script, "--trace": args.trace, "--events": args.events}
    distinct_files(p, reads, {"--html": args.html, "--trace-out": args.trace_out})
    lang, width = detect(args.lang), args.width or tour.terminal_width()
    if args.trace:
        return _draw_trace(args, p, width, lang)
    if args.events:
        return _draw_events(args, p, width, lang)
    return _play(args, p, width, lang)


def options(args: argparse.Namespace) -> Options:
    """The pool the flags ask for; `--hybrid N` is `--hybrid --sliding-window N`."""
    sliding_window, hybrid = args.sliding_window, args.hybrid
    if hybrid is not True and hybrid is not False:
        if sliding_window not in (None, hybrid):
            raise Refused(
                f"--hybrid {hybrid} and --sliding-window {sliding_window} name two windows: "
                "give one"
            )
        sliding_window, hybrid = hybrid, True
    return Options(
        num_gpu_blocks=args.num_gpu_blocks_override,
        block_size=args.block_size,
        enable_prefix_caching=args.enable_prefix_caching,
        sliding_window=sliding_window,
        preemption_mode=args.preemption_mode,
        hybrid=hybrid,
    )


def _play(args: argparse.Namespace, p: ArgParser, width: int, lang: str) -> int:
    """A new session, played from the script or typed (stdin), then drawn and saved."""
    try:
        session = Session(options(args))
    except Refused as e:
        p.error(str(e))
    # a script written to a page prints captions only: the page shows the pool
    play = Playground(
        session, width=width, lang=lang, look=args.style, pool=not (args.script and args.html)
    )
    if args.script:
        play.loop(_script(args.script, p), echo=True)
    else:
        live = sys.stdin.isatty()
        if live:
            play.say(
                f"pagedsim play: {args.num_gpu_blocks_override} blocks x "
                f"{args.block_size} tokens. "
                f"`help` lists the commands, `quit` stops."
            )
            print("play> ", end="", flush=True)
        play.loop(sys.stdin, echo=not live, prompt="play> " if live else "")
    if args.draw:
        _write(session.timeline(lang), args, lang)
    write_pages(args, partial(sources.play, session, lang))
    return 1 if args.script and play.mistakes else 0


MAX_SCRIPT_BYTES = 1 << 20  # a scenario is a few dozen lines; a larger file is refused unread


def _script(path: Path, p: ArgParser) -> list[str]:
    """A scenario's lines; a file missing, too large or not UTF-8 is a usage error."""
    if not path.is_file():
        p.error(f"no such script: {printable(path)}")
    from ..io.trace_json import read_bounded

    try:
        raw = read_bounded(path, MAX_SCRIPT_BYTES, "script")
    except ValueError as e:
        p.error(f"{printable(path)}: {e}")
    try:
        return raw.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as e:
        p.error(f"{printable(path)}: not UTF-8 text (byte {e.start})")


def _draw_trace(args: argparse.Namespace, p: argparse.ArgumentParser, width: int, lang: str) -> int:
    from ..io.trace_json import load_json, snapshots_from_dict

    try:
        data = load_json(args.trace)
        snaps = snapshots_from_dict(data)
    except (OSError, ValueError) as e:
        p.error(f"--trace: {printable(e)}")
    for s in snaps:
        echo(
            t("step {k}: {caption}", lang, tour.VIEW_ZH, k=s.step, caption=caption(s, lang)),
            width,
        )
        text = tour.format_snapshot(s, width=width, lang=lang)
        print("\n".join(printable(line) for line in text.split("\n")))
    if args.draw:
        _write(snaps, args, lang)
    title = f"pagedsim play --trace {args.trace.name}"
    write_pages(args, partial(sources.saved, data, lang, title=title))
    return 0


# A stream is printed and put on a page whole, one line or step per event; only its
# figures are summarised (a frame costs ~0.4 s plus ~15 ms a block to draw): past these
# limits, the first and last events and the first slots are drawn, and a line says so.
SHOWN_EVENTS = 8  # events of a stream drawn: the first and last 4
SHOWN_BLOCKS = 64  # slots of one snapshot drawn


def _draw_events(
    args: argparse.Namespace, p: argparse.ArgumentParser, width: int, lang: str
) -> int:
    from ..io.trace_json import MAX_BYTES
    from ..kv_events import replay, shown_frames, summarised
    from ..kv_stream import read_any
    from ..view import command, page_html
    from ..view import stream as stream_page

    try:
        batches = read_any(args.events, MAX_BYTES)
        if batches is None:
            raise ValueError("a JSON trace, not an event stream (use --trace)")
        data = stream_page.page_data(
            batches, lang=lang, title=f"pagedsim play --events {args.events.name}"
        )
    except (OSError, UnicodeDecodeError, ValueError) as e:
        p.error(f"--events: {printable(e)}")
    assert batches is not None  # p.error exits
    for step in data["steps"][1:]:
        echo(step["c"] + "".join(f" [{n}]" for n in step["kv"]["notes"]), width)
    if args.draw:
        events = [e for b in batches for e in b.events]
        frames = shown_frames(len(events), SHOWN_EVENTS)
        _write([summarised(s, SHOWN_BLOCKS) for s in replay(events, frames)], args, lang)
    if args.html:
        print(f"wrote {command._write(args.html, page_html(data))}", file=sys.stderr)
    if args.trace_out:  # the stream itself, lossless: `pagedsim view` reads it back
        from ..kv_events import batch_to_json

        lines = [json.dumps(batch_to_json(b)) + "\n" for b in batches]
        args.trace_out.write_text("".join(lines), encoding="utf-8")
        print(f"wrote {args.trace_out}", file=sys.stderr)
    return 0


def write_pages(args: argparse.Namespace, make_page: Callable[[], dict[str, Any]]) -> None:
    """--html and --trace-out (`play`, `generate`): the page (`pagedsim.view`) and its trace."""
    if not (args.html or args.trace_out):
        return
    page = make_page()
    if args.html:
        print(f"wrote {write_html(args.html, **page)}", file=sys.stderr)
    if args.trace_out:
        Path(args.trace_out).write_text(
            json.dumps(sources.trace_out(page), default=str), encoding="utf-8"
        )
        print(f"wrote {args.trace_out}", file=sys.stderr)


def _write(snapshots: Sequence[Snapshot], args: argparse.Namespace, lang: str) -> None:
    from ..draw import scenario, style  # matplotlib only now

    with style.output(look=args.style):
        for path in scenario.write_all(snapshots, args.draw, fmt=args.format, lang=lang):
            print(f"wrote {path}", file=sys.stderr)
