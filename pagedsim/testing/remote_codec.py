"""The wire format between the grader and the code under test: JSON with a closed schema.

Part of pagedsim/testing/remote.py. A message is one length-prefixed JSON text (8-byte
big-endian length, then UTF-8). JSON can name no callable, and the decoder below builds
only the values of this table, each from plain data, through a fixed dispatch:

    null true false 1 2.5 "text"                 themselves (NaN and infinities included)
    ["b", base64]  ["ba", base64]                bytes, bytearray
    ["l", [v...]] ["t", ...] ["s", ...] ["fs", ...]   list, tuple, set, frozenset
    ["d", [[k, v]...]]                           dict (keys str, int, float, bool, None, tuple)
    ["c", re, im]  ["r", a, b, c]  ["sl", a, b, c]  ["..."]   complex, range, slice, Ellipsis
    ["p", str]  ["pp", str]                      PosixPath, PurePosixPath
    ["a", dtype, [shape], base64]                a NumPy array (C order), dtype from DTYPES
    ["n", dtype, base64]  ["dt", dtype]          a NumPy scalar, a NumPy dtype
    ["rec", name, [[field, v]...]]               a trace record (a Snapshot, a SeqState or an
                                                 event of pagedsim/trace.py) by value: RECORDS
    ["h", kind, key, name]                       the sender's object: an opaque handle here
    ["y", key]                                   the receiver's own object, handed over earlier
    ["g", index]                                 the request's index-th argument itself
    ["kx", name]                                 an exception class of KNOWN_EXCEPTIONS
    ["xc", key, name, [known base names]]        the sender's own exception class (a stand-in)
    ["x", class, [args], text, [[function, line]...], [[attr, v]...], cause, [notes], traceback]

A message longer than the receiver's limit is refused before it is read; anything outside
the table (an unknown tag, a wrong arity, a key that is not a handed-over object, an array
whose bytes do not match its shape) is a `RemoteError`, never a call. Exceptions are built
by remote_errors.py from the `["x", ...]` node.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
import pathlib
import re
from typing import Any, Callable, NoReturn

import numpy as np

from .. import trace as tr
from .remote_values import RemoteError

# The trace's records are plain frozen data (a snapshot tells no story itself: story.py does),
# so they cross by value: code under test tells a step's story with its own
# `pagedsim.story.caption`, which reads the events' classes and fields. Only these classes,
# named by their class name, are ever built, through their dataclass constructor.
RECORDS: dict[str, type] = {
    name: cls
    for name, cls in sorted(vars(tr).items())
    if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == tr.__name__
}
_RECORD_NAMES = {cls: name for name, cls in RECORDS.items()}

DEFAULT_LIMIT = 64 << 20  # bytes in one message from the submission's process
MAX_DEPTH = 200  # nesting of one value
DTYPES = {  # numbers and booleans, in any byte order
    order + code for order in "<>|" for code in "b1 i1 i2 i4 i8 u1 u2 u4 u8 f2 f4 f8 c8 c16".split()
}
_TEXT_DTYPE = re.compile(r"[<>|][US][0-9]{1,7}")


def dtype_of(name: object) -> np.dtype[Any]:
    """A dtype from its wire name; only numbers, booleans and fixed-width text."""
    if not isinstance(name, str) or not (name in DTYPES or _TEXT_DTYPE.fullmatch(name)):
        raise RemoteError(f"refused a value of dtype {str(name)[:40]!r} from the other process")
    return np.dtype(name)


def wire_dtype(dt: np.dtype[Any]) -> str | None:
    """`dt`'s wire name, or None when it does not cross by copy (objects, records, dates)."""
    name = dt.str
    return name if name in DTYPES or _TEXT_DTYPE.fullmatch(name) else None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object) -> bytes:
    if not isinstance(text, str):
        raise RemoteError("a malformed message: bytes that are not base64 text")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise RemoteError("a malformed message: bytes that are not base64 text") from None


def dump_message(message: object) -> bytes:
    return json.dumps(message, separators=(",", ":"), allow_nan=True).encode("ascii")


def load_message(data: bytes | bytearray) -> Any:
    """JSON text to plain lists, strings and numbers (no node is built yet)."""
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_no_objects)
    except RemoteError:
        raise
    except (ValueError, RecursionError, UnicodeDecodeError):
        raise RemoteError("a malformed message: not JSON text") from None


def _no_objects(pairs: object) -> NoReturn:
    raise RemoteError("a malformed message: a JSON object")


class Encoder:
    """Turns values into nodes. `alias(obj)` is a node for a list, dict, set or array that is one
    of the request's arguments (else None); `handle(obj)` the node of anything not in the table
    (an object, a function, a module, an exception or an exception class)."""

    def __init__(
        self,
        alias: Callable[[Any], list[Any] | None],
        handle: Callable[[Any], Any],
        *,
        plain: bool = False,
    ) -> None:
        self.alias, self.handle, self.plain = alias, handle, plain

    def node(self, obj: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise TypeError("a value nested too deeply to send")
        t = type(obj)
        if obj is None or t in (bool, int, float, str):
            return obj
        if t in _LEAVES:
            return _LEAVES[t](obj)
        d = depth + 1
        if t in _SEQUENCES:
            return self.alias(obj) or [_SEQUENCES[t], [self.node(v, d) for v in obj]]
        if t is dict:
            pairs = [[self.node(k, d), self.node(v, d)] for k, v in obj.items()]
            return self.alias(obj) or ["d", pairs]
        if t in _RECORD_NAMES:
            fields = [[f.name, self.node(getattr(obj, f.name), d)] for f in dataclasses.fields(obj)]
            return ["rec", _RECORD_NAMES[t], fields]
        if t is slice:
            return ["sl", self.node(obj.start, d), self.node(obj.stop, d), self.node(obj.step, d)]
        if t is np.ndarray and wire_dtype(obj.dtype):
            return self.alias(obj) or [
                "a",
                wire_dtype(obj.dtype),
                list(obj.shape),
                _b64(np.ascontiguousarray(obj).tobytes()),
            ]
        if isinstance(obj, np.generic) and t.__module__ == "numpy" and wire_dtype(obj.dtype):
            return ["n", wire_dtype(obj.dtype), _b64(obj.tobytes())]
        if t.__module__ == "numpy.dtypes" and isinstance(obj, np.dtype) and wire_dtype(obj):
            return ["dt", wire_dtype(obj)]
        if self.plain and isinstance(obj, _PLAIN_TYPES):
            return self.node(_as_plain(obj), d)
        return self.handle(obj)


_LEAVES: dict[type, Callable[[Any], list[Any]]] = {
    bytes: lambda o: ["b", _b64(o)],
    bytearray: lambda o: ["ba", _b64(bytes(o))],
    complex: lambda o: ["c", o.real, o.imag],
    range: lambda o: ["r", o.start, o.stop, o.step],
    type(Ellipsis): lambda o: ["..."],
    pathlib.PosixPath: lambda o: ["p", str(o)],
    pathlib.PurePosixPath: lambda o: ["pp", str(o)],
}
_SEQUENCES: dict[type, str] = {list: "l", tuple: "t", set: "s", frozenset: "fs"}

# A subclass of a data type (a named tuple, an IntEnum, a defaultdict) crosses as the data it
# holds when `plain` (the submission's side): the checker compares values, never asks the
# submission's object whether it equals one (remote_proxy.JUDGED).
_PLAIN: dict[type, Callable[[Any], Any]] = {
    int: int.__int__,
    float: float.__float__,
    str: str.__str__,
    **{t: t for t in (bytes, bytearray, tuple, list, set, frozenset, dict)},
}

_PLAIN_TYPES = tuple(_PLAIN)


def _as_plain(obj: Any) -> Any:
    return next(make(obj) for base, make in _PLAIN.items() if isinstance(obj, base))


def _int(v: object, what: str) -> int:
    if type(v) is not int:
        raise RemoteError(f"a malformed message: {what} is not an integer")
    return v


def _str(v: object, what: str) -> str:
    if type(v) is not str:
        raise RemoteError(f"a malformed message: {what} is not text")
    return v


class Decoder:
    """Turns nodes back into values. The three hooks give handles and exceptions their meaning:
    `theirs(kind, key, name)` a proxy, `ours(key)` an object handed over, `arg(i)` an argument,
    `exc_class(node)` and `exception(node)` (remote_errors.py) the rest."""

    def __init__(
        self,
        *,
        theirs: Callable[[str, int, str], Any],
        ours: Callable[[int], Any],
        arg: Callable[[int], Any],
        exc_class: Callable[[list[Any]], Any],
        exception: Callable[[list[Any], int], Any],
    ) -> None:
        self.theirs, self.ours, self.arg = theirs, ours, arg
        self.exc_class, self.exception = exc_class, exception

    def decode(self, node: Any) -> Any:
        """`node` as a value, or a RemoteError: whatever the node, only the table is built."""
        try:
            return self.value(node)
        except RemoteError:
            raise
        except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as e:
            raise RemoteError(f"a malformed message: {type(e).__name__}") from None

    def value(self, node: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise RemoteError("a malformed message: a value nested too deeply")
        if node is None or type(node) in (bool, int, float, str):
            return node
        if type(node) is not list or not node or type(node[0]) is not str:
            raise RemoteError("a malformed message: a value that is not a tagged list")
        tag, rest = node[0], node[1:]
        if tag not in _TAGS:
            raise RemoteError(f"a malformed message: an unknown tag {tag[:20]!r}")
        fields, build = _TAGS[tag]
        if len(rest) != fields:
            raise RemoteError(f"a malformed message: {tag!r} with {len(rest)} fields")
        return build(self, tag, rest, depth + 1)

    def _items(self, tag: str, rest: list[Any], depth: int) -> Any:
        if type(rest[0]) is not list:
            raise RemoteError("a malformed message: items that are not a list")
        items = [self.value(v, depth) for v in rest[0]]
        return _CONTAINERS[tag](_keys(items) if tag in ("s", "fs") else items)

    def _dict(self, tag: str, rest: list[Any], depth: int) -> Any:
        pairs = rest[0]
        if type(pairs) is not list or any(type(p) is not list or len(p) != 2 for p in pairs):
            raise RemoteError("a malformed message: a dict that is not a list of pairs")
        keys = _keys([self.value(k, depth) for k, _ in pairs])
        return dict(zip(keys, [self.value(v, depth) for _, v in pairs], strict=True))

    def _complex(self, tag: str, rest: list[Any], depth: int) -> Any:
        re_, im = rest
        if type(re_) not in (int, float) or type(im) not in (int, float):
            raise RemoteError("a malformed message: a complex number that is not two numbers")
        return complex(re_, im)

    def _array(self, tag: str, rest: list[Any], depth: int) -> Any:
        dt, shape, data = dtype_of(rest[0]), rest[1], _unb64(rest[2])
        if (
            type(shape) is not list
            or len(shape) > 32
            or any(type(n) is not int or n < 0 for n in shape)
        ):
            raise RemoteError("a malformed message: an array shape that is not a list of sizes")
        if math.prod(shape) * dt.itemsize != len(data):
            raise RemoteError("a malformed message: an array whose bytes do not match its shape")
        return np.frombuffer(data, dtype=dt).reshape(shape).copy()

    def _scalar(self, tag: str, rest: list[Any], depth: int) -> Any:
        dt, data = dtype_of(rest[0]), _unb64(rest[1])
        if len(data) != dt.itemsize:
            raise RemoteError("a malformed message: a scalar whose bytes do not match its dtype")
        return np.frombuffer(data, dtype=dt)[0]

    def _record(self, tag: str, rest: list[Any], depth: int) -> Any:
        name, pairs = rest
        cls = RECORDS.get(name) if type(name) is str else None
        if cls is None:
            raise RemoteError("a malformed message: a record outside the trace's classes")
        if type(pairs) is not list or any(
            type(p) is not list or len(p) != 2 or type(p[0]) is not str for p in pairs
        ):
            raise RemoteError("a malformed message: a record's fields are not [name, value] pairs")
        names = {f.name for f in dataclasses.fields(cls)}
        if {k for k, _ in pairs} - names or len(pairs) != len({k for k, _ in pairs}):
            raise RemoteError(f"a malformed message: a {name} with unknown or repeated fields")
        return cls(**{k: self.value(v, depth) for k, v in pairs})

    def _handle(self, tag: str, rest: list[Any], depth: int) -> Any:
        kind, key, name = rest
        if kind not in ("object", "function", "module"):
            raise RemoteError("a malformed message: an unknown kind of handle")
        return self.theirs(kind, _int(key, "a handle"), _str(name, "a handle's name")[:200])


def _keys(values: list[Any]) -> list[Any]:
    if not all(map(_is_key, values)):
        raise RemoteError(
            "a malformed message: a set member or dict key that is not "
            "a number, text, bytes or a tuple of them"
        )
    return values


def _is_key(v: object) -> bool:
    if v is None or type(v) in (bool, int, float, str, bytes, complex, range, frozenset):
        return True
    if type(v) is tuple:
        return all(_is_key(x) for x in v)
    return isinstance(v, np.generic)


# tag -> (how many fields follow the tag, what builds the value: (decoder, tag, fields, depth))
_TAGS: dict[str, tuple[int, Callable[[Decoder, str, list[Any], int], Any]]] = {
    "b": (1, lambda d, tag, r, depth: _unb64(r[0])),
    "ba": (1, lambda d, tag, r, depth: bytearray(_unb64(r[0]))),
    **dict.fromkeys(("l", "t", "s", "fs"), (1, Decoder._items)),
    "d": (1, Decoder._dict),
    "c": (2, Decoder._complex),
    "r": (3, lambda d, tag, r, depth: range(*(_int(v, "a range bound") for v in r))),
    "sl": (3, lambda d, tag, r, depth: slice(*(d.value(v, depth) for v in r))),
    "...": (0, lambda d, tag, r, depth: Ellipsis),
    "p": (1, lambda d, tag, r, depth: pathlib.PosixPath(_str(r[0], "a path"))),
    "pp": (1, lambda d, tag, r, depth: pathlib.PurePosixPath(_str(r[0], "a path"))),
    "a": (3, Decoder._array),
    "n": (2, Decoder._scalar),
    "dt": (1, lambda d, tag, r, depth: dtype_of(r[0])),
    "rec": (2, Decoder._record),
    "h": (3, Decoder._handle),
    "y": (1, lambda d, tag, r, depth: d.ours(_int(r[0], "a handle"))),
    "g": (1, lambda d, tag, r, depth: d.arg(_int(r[0], "an argument index"))),
    "kx": (1, lambda d, tag, r, depth: d.exc_class([tag, *r])),
    "xc": (3, lambda d, tag, r, depth: d.exc_class([tag, *r])),
    "x": (8, lambda d, tag, r, depth: d.exception(r, depth)),
}
_CONTAINERS = {tag: t for t, tag in _SEQUENCES.items()}
