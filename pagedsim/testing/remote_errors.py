"""Exceptions across the socket: encoded by the side that raised, rebuilt by the other.

Part of pagedsim/testing/remote.py. An exception crosses as data (remote_codec.py's
`["x", ...]` node). Its class crosses by *name* only when the name is in `KNOWN_EXCEPTIONS`
(the builtins, and a fixed list of pagedsim's and the course's own); any other class (a
student's `PoolError(ValueError)`) becomes a stand-in made here with `type()`, with that
name and its known bases: no name from the other side is ever looked up anywhere else. It
is re-raised from frames with the student's file name, so messages read as they do
in-process. An exit, an interrupt or any non-`Exception` from the child becomes a
RemoteError in the grader, never obeyed. In the grader an exception is inert data: an
argument or attribute that holds a handle of the child's becomes the text `<Name>` (so
`str(exc)`, which the runner reads after the check's time limit, never calls the child),
and no attribute of the child's replaces one its class defines (`add_note`, `args`).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import pathlib
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .remote_proxy import Remote, RemoteModule
from .remote_values import RemoteError

if TYPE_CHECKING:
    from .remote import Channel

DEPTH = 4  # exception causes carried across
MAX_FRAMES = 50  # frames of the student's file kept from one exception
MAX_LINE = 100_000  # a line number past this is refused (it would be a string that long)
MAX_TRACEBACK = 20_000  # characters of formatted traceback carried along

# The exception classes that cross by name: every builtin one, and these (module, name)
# pairs, looked up only in modules this process has already imported.
_LISTED = """pagedsim.errors.OutOfBlocks pagedsim.errors.BlockError pagedsim.errors.SequenceError
    pagedsim.testing.contract.NonConformance pagedsim.testing.conform.LoadError
    course.impl.ImportFailed course.impl.ImportTimeout course.guard.SolutionsHidden
    course.ch03_kv_block.lessons.NeedsExercise cuda_kernels._checks.ArgumentTypeError""".split()
KNOWN_EXCEPTIONS = {
    **{
        name: ("builtins", name)
        for name, v in vars(builtins).items()
        if isinstance(v, type) and issubclass(v, BaseException)
    },
    **{wire: tuple(wire.rsplit(".", 1)) for wire in _LISTED},
}
_NEVER_FROM_CHILD = (SystemExit, KeyboardInterrupt, GeneratorExit)


def known_class(name: object) -> type[BaseException] | None:
    """The class a wire name stands for, when it is in the fixed table and imported here."""
    where = KNOWN_EXCEPTIONS.get(name) if isinstance(name, str) else None
    if where is None:
        return None
    mod = builtins if where[0] == "builtins" else sys.modules.get(where[0])
    cls = getattr(mod, where[1], None) if mod is not None else None
    return cls if isinstance(cls, type) and issubclass(cls, BaseException) else None


def known_name(cls: type) -> str | None:
    """`cls`'s wire name, when it is one of KNOWN_EXCEPTIONS."""
    mod, name = getattr(cls, "__module__", None), getattr(cls, "__qualname__", None)
    wire = name if mod == "builtins" else f"{mod}.{name}"
    return wire if known_class(wire) is cls else None


def class_node(cls: type, ch: Channel) -> list[Any]:
    """A class as a node: its name if known, our stand-in's key back, else a stand-in's recipe."""
    name = known_name(cls)
    if name is not None:
        return ["kx", name]
    back = cls.__dict__.get("_remote")
    if back is not None and back[0] is ch:
        return ["y", back[1]]
    bases = [known_name(c) for c in cls.__mro__[1:] if known_name(c) is not None]
    return ["xc", ch.export(cls), str(cls.__name__), bases]


def class_from(node: list[Any], ch: Channel) -> type[BaseException]:
    """The class a `["kx", ...]` or `["xc", ...]` node stands for (stand-ins cached by key)."""
    if node[0] == "kx":
        cls = known_class(node[1])
        if cls is None:
            raise RemoteError("a malformed message: an exception class outside the known list")
        return cls
    _tag, key, name, bases = node
    if type(key) is not int or type(name) is not str or type(bases) is not list:
        raise RemoteError("a malformed message: a malformed exception class")
    if key not in ch.proxies:
        known = [c for c in (known_class(b) for b in bases[:50]) if c is not None]
        base = [c for c in known if not any(o is not c and issubclass(o, c) for o in known)]
        choices: tuple[tuple[type, ...], ...] = (tuple(base), tuple(base[:1]), (Exception,))
        for chosen in choices:
            try:
                ch.proxies[key] = type(
                    name[:200] or "Error",
                    chosen or (Exception,),
                    {"__module__": "submission", "_remote": (ch, key)},
                )
                break
            except TypeError:  # bases with conflicting layouts (OSError with ValueError)
                continue
    made = ch.proxies[key]
    if not (isinstance(made, type) and issubclass(made, BaseException)):
        raise RemoteError("a malformed message: an exception class that is not one")
    return made


def encode_exception(
    e: BaseException, ch: Channel, node: Callable[[Any], Any], depth: int = 0
) -> list[Any]:
    """`e` as an `["x", ...]` node; `node(value)` encodes its arguments and attributes."""
    impl = ch.helpers.get("impl_path", lambda: None)()
    frames: list[list[Any]] = []
    tb = e.__traceback__
    while tb is not None:
        if impl and _same_file(tb.tb_frame.f_code.co_filename, impl):
            frames.append([tb.tb_frame.f_code.co_name, tb.tb_lineno])
        tb = tb.tb_next
    if isinstance(e, _NEVER_FROM_CHILD) and ch.trusting:
        e = RuntimeError(
            f"your code called sys.exit({getattr(e, 'code', '')!r}) during a check"
            if isinstance(e, SystemExit)
            else repr(e)
        )
    args = [_safe(node, a if not isinstance(a, BaseException) else repr(a)) for a in e.args]
    attrs = [
        [k, _safe(node, v)]
        for k, v in (vars(e).items() if hasattr(e, "__dict__") else ())
        if isinstance(k, str) and not k.startswith("_")
    ]
    cause = e.__cause__ if e.__cause__ is not None else e.__context__
    inner = (
        encode_exception(cause, ch, node, depth + 1)
        if cause is not None and depth < DEPTH
        else None
    )
    notes = [str(n) for n in (getattr(e, "__notes__", None) or []) if isinstance(n, str)]
    return [
        "x",
        class_node(type(e), ch),
        args,
        _text(e),
        frames[-MAX_FRAMES:],
        attrs,
        inner,
        notes,
        _formatted(e),
    ]


def _safe(node: Callable[[Any], Any], value: object) -> Any:
    try:
        return node(value)
    except Exception:  # noqa: BLE001 - a value that cannot cross: its repr does
        return _text(value, repr)


def _text(e: object, how: Callable[[object], str] = str) -> str:
    try:
        return str(how(e))
    except Exception:  # noqa: BLE001
        return f"<{type(e).__name__}>"


def _formatted(e: BaseException) -> str:
    """`e`'s traceback as text: file, line and function of each frame, then the exception
    (no source lines: reading them would cost more than the rest of a round trip)."""
    try:
        frames = traceback.StackSummary.extract(
            traceback.walk_tb(e.__traceback__), lookup_lines=False
        )
        lines = [f'  File "{f.filename}", line {f.lineno}, in {f.name}' for f in frames]
        text = "\n".join(
            ["Traceback (most recent call last):", *lines, f"{type(e).__name__}: {_text(e)}"]
        )
        return text[-MAX_TRACEBACK:]
    except Exception:  # noqa: BLE001
        return ""


def _same_file(a: str, b: str) -> bool:
    try:
        return pathlib.Path(a).resolve() == pathlib.Path(b)
    except (OSError, ValueError):
        return False


def build_exception(
    rest: list[Any], ch: Channel, value: Callable[[Any, int], Any], depth: int
) -> BaseException:
    """The other side's exception (the fields of an `["x", ...]` node) as one of this side, with
    its frames in the student's file. `value(node, depth)` decodes a nested value."""
    cls_node, args, text, frames, attrs, inner, notes, formatted = rest
    if type(cls_node) is not list or not cls_node or cls_node[0] not in ("kx", "xc", "y"):
        raise RemoteError("a malformed message: an exception without a class")
    cls = value(cls_node, depth)
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        raise RemoteError("a malformed message: an exception class that is not one")
    fields = (args, text, frames, attrs, notes, formatted)
    if tuple(map(type, fields)) != (list, str, list, list, list, str):
        raise RemoteError("a malformed message: a malformed exception")
    exc = _instance(cls, [_inert(value(a, depth), ch) for a in args], text, ch)
    for pair in attrs:  # public names its class does not define: never __class__, add_note, ...
        if type(pair) is list and len(pair) == 2 and type(pair[0]) is str and pair[0][:1] != "_":
            attr = _inert(value(pair[1], depth), ch)
            if not hasattr(cls, pair[0]):
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(exc, pair[0], attr)
    add_note = getattr(exc, "add_note", None)  # Python 3.11+: on 3.10 the notes are dropped
    for note in notes:
        if type(note) is str and add_note is not None:
            add_note(note)
    with contextlib.suppress(AttributeError, TypeError):  # their own account, for a person
        exc.__dict__["remote_traceback"] = formatted
    if inner is not None:
        if type(inner) is not list or not inner or inner[0] != "x" or depth > DEPTH * 10:
            raise RemoteError("a malformed message: a malformed cause")
        exc.__cause__ = value(inner, depth)
    impl = ch.helpers.get("impl_path", lambda: None)() or ch.impl_file
    frames = [f for f in frames if type(f) is list and list(map(type, f)) == [str, int]]
    frames = [f for f in frames if 0 < f[1] <= MAX_LINE][-MAX_FRAMES:]
    if frames and impl:
        try:
            raise_from_frames(exc, frames, str(impl))
        except BaseException as raised:  # noqa: BLE001 - only to attach the traceback
            return raised
    return exc


def _inert(value: Any, ch: Channel) -> Any:
    """`value`, or in the grader (an untrusting end) the text `<Name>` when it holds a handle of
    the other side's object anywhere (a decoded value is a tree of the codec's table)."""
    name = None if ch.trusting else _handle_in(value)
    return value if name is None else f"<{name}>"


def _handle_in(v: Any, depth: int = 0) -> str | None:
    """The name of the first handle of the other side's inside `v`, or None."""
    if isinstance(v, (Remote, RemoteModule)):
        return str(object.__getattribute__(v, "_name") if isinstance(v, Remote) else v.__name__)
    if depth > 400:  # deeper than a decoded value can be: hold it as unknown
        return "value"
    if type(v) in (list, tuple, set, frozenset):
        items: Any = v
    elif type(v) is dict:
        items = [*v.keys(), *v.values()]
    elif type(v) is slice:
        items = (v.start, v.stop, v.step)
    elif dataclasses.is_dataclass(v) and not isinstance(v, type):  # a trace record
        items = [getattr(v, f.name) for f in dataclasses.fields(v)]
    else:
        return None
    return next((n for n in (_handle_in(x, depth + 1) for x in items) if n is not None), None)


def _instance(cls: type[BaseException], args: list[Any], text: str, ch: Channel) -> BaseException:
    """`cls(*args)`: `cls` is a known class or a stand-in, so its constructor is one of ours."""
    if not ch.trusting and not issubclass(cls, Exception):
        cls, args = RemoteError, [f"{cls.__name__}: {text}"]
    try:
        return cls(*args)
    except Exception:  # noqa: BLE001 - a constructor with another signature
        exc = cls.__new__(cls)
        exc.args = tuple(args)
        return exc


# One frame of the student's file, compiled once, here: a frame of the chain is this code
# with the student's file name, function name and line put in (`CodeType.replace`), so that
# rebuilding an exception compiles nothing in the checker (course/isolation.py's audit hook
# refuses a compile while the checker reads the submission's messages).
FRAME = compile("__next()", "<frame>", "exec")


def is_frame(code: Any) -> bool:
    """Whether `code` is FRAME with another name, file or line (it can only call __next)."""
    return (
        getattr(code, "co_code", None) == FRAME.co_code
        and code.co_names == FRAME.co_names
        and code.co_consts == FRAME.co_consts
    )


def raise_from_frames(exc: BaseException, frames: list[list[Any]], filename: str) -> None:
    """Raise `exc` from nested frames named like the student's functions, at their lines."""
    codes = []
    for name, line in frames:
        name = str(name)[:200]
        code = FRAME.replace(co_name=name, co_filename=filename, co_firstlineno=max(int(line), 1))
        if sys.version_info >= (3, 11):  # 3.10's code objects have no co_qualname
            code = code.replace(co_qualname=name)
        codes.append(code)

    def run(i: int) -> None:
        if i == len(codes):
            raise exc
        exec(codes[i], {"__next": lambda: run(i + 1), "__builtins__": {}})  # noqa: S102 - only calls __next

    run(0)
