"""The proxies: an object or module in the other process, used here as if it were local.

Part of pagedsim/testing/remote.py. Invariants: every use of a `Remote` is one message
(`ask`), so the object itself never leaves its process; only the `SPECIAL` methods are
forwarded; `ask` re-raises the other side's exception outside any except block, so its
cause chain -- what the runner reads -- is kept; a `RemoteModule` keeps the import
system's own dunder attributes here and forwards everything else.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .remote_values import SPECIAL, ChildDied

if TYPE_CHECKING:
    from .remote import Channel


class _Raised(Exception):
    """Carries the other side's exception out of `request` (unwrapped by Remote)."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.exc = exc


def ask(ch: Channel, op: str, *payload: Any) -> Any:
    """ch.request, raising the other side's exception itself (outside any except block, so that
    its cause, the chain the runner reads, is kept)."""
    try:
        return ch.request(op, *payload)
    except _Raised as r:
        exc = r.exc
    raise exc


class Remote:
    """A proxy for an object in the other process: every use is a message."""

    __slots__ = ("_ch", "_id", "_name")
    __pagedsim_remote__ = True

    def __init__(self, ch: Channel, key: int, name: str) -> None:
        object.__setattr__(self, "_ch", ch)
        object.__setattr__(self, "_id", key)
        object.__setattr__(self, "_name", name)

    def _ask(self, op: str, *payload: Any) -> Any:
        return ask(object.__getattribute__(self, "_ch"), op, self, *payload)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._ask("getattr", name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._ask("setattr", name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._ask("call", args, kwargs)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        out = self._ask("asarray")
        if not isinstance(out, np.ndarray):
            raise TypeError("the submission's object did not become an array")
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        try:
            return str(self._ask("special", "__repr__", ()))
        except ChildDied:
            return f"<{object.__getattribute__(self, '_name')} from a stopped run of your code>"

    def __hash__(self) -> int:
        return int(self._ask("special", "__hash__", ()))

    def _pagedsim_stepper_run(self, stepper: Any, num_threads: int, arrays: Any, names: Any) -> Any:
        """The stepper's run() (course/ch03_kv_block/interleaver.py), done where the kernel
        lives."""
        log, after = ask(
            object.__getattribute__(self, "_ch"),
            "stepper_run",
            self,
            stepper.schedule,
            stepper.timeout,
            num_threads,
            list(arrays),
            names,
        )
        for mine, new in zip(arrays, after, strict=True):
            mine[...] = new
        stepper.log = log
        return log


# What the checker never asks the submission: whether its object equals, orders against or
# holds the checker's own value. A proxy on the checker's side (an untrusting channel) compares
# by identity and orders not at all, so `got == 5` is False for any object of the submission's
# (an int subclass whose __eq__ says True included: the child sends an honest subclass of a
# data type as that data, remote.py), and `x in obj` compares each item the object yields here.
JUDGED: dict[str, Callable[..., Any]] = {
    "__eq__": lambda self, other: True if other is self else NotImplemented,
    "__ne__": lambda self, other: False if other is self else NotImplemented,
    **dict.fromkeys(("__lt__", "__le__", "__gt__", "__ge__"), lambda self, other: NotImplemented),
    "__contains__": lambda self, x: any(v is x or v == x for v in self),
}


def _special(name: str) -> Callable[..., Any]:
    judged = JUDGED.get(name)

    def method(self: Remote, *args: Any) -> Any:
        if judged is not None and not object.__getattribute__(self, "_ch").trusting:
            return judged(self, *args)
        return self._ask("special", name, args)

    method.__name__ = name
    return method


for _name in SPECIAL - {"__repr__", "__hash__"}:
    setattr(Remote, _name, _special(_name))


class RemoteModule(types.ModuleType):
    """The submission's module (or one of its libraries), as a module object here."""

    def __init__(self, ch: Channel, key: int, name: str) -> None:
        super().__init__(name)
        self.__dict__["_remote"] = Remote(ch, key, name)
        # so that `import matplotlib.figure` may look for a submodule
        self.__dict__["__path__"] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["_remote"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("__") and name.endswith("__"):  # the import system's, kept here
            self.__dict__[name] = value
        else:
            setattr(self.__dict__["_remote"], name, value)

    def __repr__(self) -> str:
        return f"<module {self.__name__!r} (in the submission's process)>"
