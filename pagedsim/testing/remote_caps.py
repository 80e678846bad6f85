"""What the checker may hand to the code under test: capabilities with a fixed surface.

Part of pagedsim/testing/remote.py. The checker never hands the submission an object to
explore: a value crosses by copy when it is data (remote_codec.py's table), and anything
else only when its exact type is registered here with a `Surface` (the methods it may
call, attributes it may read or set, operators it may use). A request is checked against
the surface *before* any attribute is looked up, and every answer passes the same gate
back, so a method that returns a frame, a generator, a function, a class, a module or a
dict of callables is refused. The only callables that cross from the checker are `Method`,
`Cursor` and `Callback`. Handing over anything else fails with `Unregistered` (an error of
the checks, never the student's); tests/instructor/test_capabilities.py runs every type the
checks hand out.
"""

from __future__ import annotations

import collections.abc
import functools
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ..block_pool import BlockPool
from .remote_values import SPECIAL

# Served on any capability: what `object` itself answers, harmless data.
PLAIN = frozenset({"__repr__", "__str__", "__eq__", "__ne__", "__hash__", "__bool__"})
CALL = "__call__"  # the `call` request, on a capability that is itself callable
ARRAY = "asarray"  # np.asarray(capability), as data
OPERATIONS = SPECIAL | {CALL, ARRAY}

# Never a capability, whatever a check registers: each one leads to code, frames or names.
NEVER: tuple[type, ...] = (
    type,
    dict,
    functools.partial,
    property,
    staticmethod,
    classmethod,
    BaseException,
    *(
        getattr(types, name)
        for name in """ModuleType FunctionType BuiltinFunctionType MethodType MethodWrapperType
        WrapperDescriptorType MethodDescriptorType ClassMethodDescriptorType GetSetDescriptorType
        MemberDescriptorType GeneratorType CoroutineType AsyncGeneratorType FrameType
        TracebackType CodeType CellType MappingProxyType SimpleNamespace""".split()
    ),
)


class Unregistered(TypeError):
    """A check tried to hand the submission a value that is neither data nor a capability."""


@dataclass(frozen=True)
class Surface:
    """All that the submission may do with one capability."""

    methods: frozenset[str] = frozenset()  # obj.name(data...): answered by data or a capability
    attributes: frozenset[str] = frozenset()  # obj.name read: data or a capability
    settable: frozenset[str] = frozenset()  # obj.name = data
    operations: frozenset[str] = PLAIN  # of OPERATIONS


SURFACES: dict[type, Surface] = {}
T = TypeVar("T", bound=type)


def register(
    cls: T,
    *,
    methods: Iterable[str] = (),
    attributes: Iterable[str] = (),
    settable: Iterable[str] = (),
    operations: Iterable[str] = (),
) -> T:
    """Let instances of exactly `cls` cross, with this surface and no more. ValueError for a
    type that is never a capability, a name that is private or a dunder, an unknown
    operation."""
    if not isinstance(cls, type) or issubclass(cls, NEVER):
        raise ValueError(f"{cls!r} can never be handed to a submission")
    methods, attributes, settable = tuple(methods), tuple(attributes), tuple(settable)
    for name in (*methods, *attributes, *settable):
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"{name!r} is not a public name: it cannot be on a surface")
    unknown = set(operations) - OPERATIONS
    if unknown:
        raise ValueError(f"unknown operations {sorted(unknown)} (see remote_values.SPECIAL)")
    SURFACES[cls] = Surface(
        frozenset(methods), frozenset(attributes), frozenset(settable), PLAIN | set(operations)
    )
    return cls


def capability(**surface: Iterable[str]) -> Callable[[T], T]:
    """`register` as a class decorator."""
    return lambda cls: register(cls, **surface)


def surface_of(obj: object) -> Surface | None:
    """The surface of `obj`'s exact type (a subclass is not registered by its base)."""
    return SURFACES.get(type(obj))


class Method:
    """A registered method of one capability, looked up by name on the checker's side at each
    call: the bound method itself never crosses."""

    __slots__ = ("_obj", "_name")

    def __init__(self, obj: object, name: str) -> None:
        self._obj, self._name = obj, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._obj, self._name)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<method {self._name} of {type(self._obj).__name__}>"


class Cursor:
    """An iterator or a generator, served one value at a time (its frame never crosses)."""

    __slots__ = ("_it",)

    def __init__(self, it: Iterator[Any]) -> None:
        self._it = it

    def __next__(self) -> Any:
        return next(self._it)

    def __iter__(self) -> Cursor:
        return self

    def __repr__(self) -> str:
        return "<iterator>"


class Callback:
    """A check's own function, handed to the submission on purpose (e.g. a spy the student's
    figure calls back). It binds like a function when set on a class, so it works the same
    when the file under test runs in the checker's own process."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError("Callback needs a function")
        self._fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    def __get__(self, obj: object, owner: type | None = None) -> Callable[..., Any]:
        return self if obj is None else functools.partial(self._fn, obj)

    def __repr__(self) -> str:
        return f"<callback {getattr(self._fn, '__name__', 'function')}>"


# pagedsim's own types that checks hand out (3.4b: the pool the student's functions share)
register(
    BlockPool,
    methods="""allocate allocate_many take incref free release ref_count ref_counts is_shared
    is_free head free_list check_invariants""".split(),
    attributes="num_gpu_blocks block_size free_order num_free_blocks num_shared num_used".split(),
)
register(Method, operations={CALL})
register(Cursor, operations={"__next__", "__iter__"})
register(Callback, operations={CALL})


def served(obj: object) -> object:
    """`obj` as the checker may hand it over: itself when registered, an iterator as a
    `Cursor`; Unregistered otherwise (only the type is read, never an attribute)."""
    if type(obj) in SURFACES:
        return obj
    if isinstance(obj, collections.abc.Iterator):  # a generator included: never its frame
        return Cursor(obj)
    raise Unregistered(
        f"the checker does not hand a {type(obj).__name__} to the code under test: only data "
        "and the capabilities registered in pagedsim/testing/remote_caps.py cross"
    )
