"""Exceptions across the socket: encoded by the side that raised, rebuilt by the other.

Part of pagedsim/testing/remote.py. An exception crosses as its class (one the other side
can name, else a stand-in), its arguments, its text, public attributes, notes, its cause
(up to `DEPTH` deep) and the (function, line) frames it passed in the student's file; it
is re-raised from frames with that file name, so messages read as they do in-process.
The grader turns an exit or interrupt from the child into a RemoteError, never obeys it.
"""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING

from .remote_values import RemoteError, is_plain

if TYPE_CHECKING:
    from .remote import Channel

DEPTH = 4  # exception causes carried across


def encode_exception(e: BaseException, ch: Channel, depth: int = 0):
    """(class, args, text, [(function, line) in the student's file], public attributes, cause)."""
    impl = ch.helpers.get("impl_path", lambda: None)()
    frames, tb = [], e.__traceback__
    while tb is not None:
        if impl and _same_file(tb.tb_frame.f_code.co_filename, impl):
            frames.append((tb.tb_frame.f_code.co_name, tb.tb_lineno))
        tb = tb.tb_next
    cls = type(e)
    if isinstance(e, (SystemExit, KeyboardInterrupt, GeneratorExit)) and ch.trusting:
        cls, e = (
            RuntimeError,
            RuntimeError(
                f"your code called sys.exit({getattr(e, 'code', '')!r}) during a check"
                if isinstance(e, SystemExit)
                else repr(e)
            ),
        )
    args = tuple(a if is_plain(a) or not isinstance(a, BaseException) else repr(a) for a in e.args)
    attrs = (
        {k: v for k, v in vars(e).items() if not k.startswith("_")}
        if hasattr(e, "__dict__")
        else {}
    )
    cause = e.__cause__ if e.__cause__ is not None else e.__context__
    inner = encode_exception(cause, ch, depth + 1) if cause is not None and depth < DEPTH else None
    return (cls, args, _text(e), frames, attrs, inner, list(getattr(e, "__notes__", []) or []))


def _text(e) -> str:
    try:
        return str(e)
    except Exception:  # noqa: BLE001
        return f"<{type(e).__name__}>"


def _same_file(a: str, b: str) -> bool:
    try:
        return pathlib.Path(a).resolve() == pathlib.Path(b)
    except (OSError, ValueError):
        return False


def build_exception(enc, ch: Channel) -> BaseException:
    """The other side's exception as one of this side, with its frames in the student's file."""
    cls, args, text, frames, attrs, inner, notes = enc
    if (
        not (isinstance(cls, type) and issubclass(cls, BaseException))
        or issubclass(cls, (SystemExit, KeyboardInterrupt, GeneratorExit))
        and not ch.trusting
    ):
        cls, args = RemoteError, (f"{getattr(cls, '__name__', cls)}: {text}",)
    try:
        exc = cls(*args)
    except Exception:  # noqa: BLE001 - a constructor with another signature
        exc = cls.__new__(cls)
        exc.args = tuple(args)
    for k, v in (attrs or {}).items():
        try:
            setattr(exc, str(k), v)
        except Exception:  # noqa: BLE001
            pass
    for note in notes or ():
        if isinstance(note, str) and hasattr(exc, "add_note"):
            exc.add_note(note)
    if inner is not None:
        exc.__cause__ = build_exception(inner, ch)
    impl = ch.helpers.get("impl_path", lambda: None)() or getattr(ch, "impl_file", None)
    if frames and impl:
        try:
            raise_from_frames(exc, frames, str(impl))
        except BaseException as raised:  # noqa: BLE001 - only to attach the traceback
            return raised
    return exc


def raise_from_frames(exc: BaseException, frames, filename: str) -> None:
    """Raise `exc` from nested frames named like the student's functions, at their lines."""
    codes = []
    for name, line in frames:
        src = "\n" * (max(int(line), 1) - 1) + "__next()"
        code = compile(src, filename, "exec")
        codes.append(code.replace(co_name=str(name), co_qualname=str(name)))

    def run(i: int) -> None:
        if i == len(codes):
            raise exc
        exec(codes[i], {"__next": lambda: run(i + 1), "__builtins__": {}})  # noqa: S102 - only calls __next

    run(0)
