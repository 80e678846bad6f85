"""What may cross the socket between the grader and the code under test, and how it is read.

Part of pagedsim/testing/remote.py (see its docstring for the protocol). Invariants:
a value crosses by copy only when `is_plain` says so (plain data, NumPy arrays and
scalars of a non-object dtype); the grader's `_Unpickler` builds nothing but the
`SAFE_GLOBALS` and exception classes of `EXC_MODULES` that are already imported; a
proxy forwards only the `SPECIAL` methods, which the serving side runs through
`OPERATORS`; lists, dicts, sets and arrays (`MUTABLE`) passed to a call are copied
back into the caller's own objects afterwards.
"""

from __future__ import annotations

import operator
import pathlib
import pickle
import sys
import types

import numpy as np

PLAIN = {
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    bytearray,
    tuple,
    list,
    dict,
    set,
    frozenset,
    range,
    slice,
    type(Ellipsis),
    pathlib.PosixPath,
    pathlib.PurePosixPath,
}
MUTABLE = (list, dict, set, bytearray, np.ndarray)  # copied back after a call
SAFE_GLOBALS = (
    {("builtins", n) for n in ("complex", "set", "frozenset", "range", "slice", "bytearray")}
    | {
        (m, n)
        for m in ("numpy._core.multiarray", "numpy.core.multiarray")
        for n in ("_reconstruct", "scalar")
    }
    | {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("pathlib", "PosixPath"),
        ("pathlib", "PurePosixPath"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy.core.numeric", "_frombuffer"),
    }
)
EXC_MODULES = ("builtins", "pagedsim", "course", "cuda_kernels", "numpy", "numba")
SPECIAL = {
    "__len__",
    "__getitem__",
    "__setitem__",
    "__delitem__",
    "__iter__",
    "__next__",
    "__contains__",
    "__bool__",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__repr__",
    "__str__",
    "__hash__",
    "__int__",
    "__float__",
    "__index__",
    "__add__",
    "__sub__",
    "__mul__",
    "__neg__",
}
OPERATORS = {
    "__len__": len,
    "__getitem__": operator.getitem,
    "__setitem__": operator.setitem,
    "__delitem__": operator.delitem,
    "__iter__": iter,
    "__next__": next,
    "__contains__": lambda o, x: x in o,
    "__bool__": bool,
    "__eq__": operator.eq,
    "__ne__": operator.ne,
    "__lt__": operator.lt,
    "__le__": operator.le,
    "__gt__": operator.gt,
    "__ge__": operator.ge,
    "__repr__": repr,
    "__str__": str,
    "__hash__": hash,
    "__int__": int,
    "__float__": float,
    "__index__": operator.index,
    "__add__": operator.add,
    "__sub__": operator.sub,
    "__mul__": operator.mul,
    "__neg__": operator.neg,
}


class ChildDied(Exception):
    """The submission's process ended (or was stopped) while the grader waited for it."""


class RemoteError(Exception):
    """A message from the submission's process that the grader refused to read."""


def is_plain(obj) -> bool:
    t = type(obj)
    if t in PLAIN:
        return True
    if t is np.ndarray:
        return obj.dtype != object
    return isinstance(obj, (np.generic, np.dtype)) and t.__module__.startswith("numpy")


def _exc_class_by_value(cls) -> bool:
    """An exception class the other side can name: builtins, or pagedsim/course/... by module."""
    mod = getattr(cls, "__module__", "")
    top = sys.modules.get(mod)
    return (
        mod.split(".")[0] in EXC_MODULES
        and top is not None
        and getattr(top, cls.__qualname__, None) is cls
        and "<" not in cls.__qualname__
    )


def _safe_global(obj) -> bool:
    """A class or function that plain data pickles by name (np.ndarray, numpy's _reconstruct)."""
    if not isinstance(obj, (type, types.BuiltinFunctionType, types.FunctionType)):
        return False
    mod, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return (mod, name) in SAFE_GLOBALS or mod == "numpy.dtypes"


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, channel, args):
        super().__init__(file)
        self.ch, self.args = channel, args

    def find_class(self, module, name):
        if self.ch.trusting or (module, name) in SAFE_GLOBALS or module == "numpy.dtypes":
            return super().find_class(module, name)
        if module.split(".")[0] in EXC_MODULES and module in sys.modules:
            obj = getattr(sys.modules[module], name, None)
            if isinstance(obj, type) and issubclass(obj, BaseException):
                return obj
        raise RemoteError(f"refused a value of type {module}.{name} from the submission's process")

    def persistent_load(self, pid):
        return self.ch.resolve(pid, self.args)


def _collect_back(args, kwargs) -> dict:
    back = {i: a for i, a in enumerate(args) if isinstance(a, MUTABLE)}
    back.update({k: v for k, v in kwargs.items() if isinstance(v, MUTABLE)})
    return back


def _write_back(args, kwargs, back) -> None:
    """Apply the callee's changes to the caller's own lists, dicts, sets and arrays."""
    for key, new in (back or {}).items():
        old = args[key] if isinstance(key, int) and key < len(args) else kwargs.get(key)
        if old is new or type(old) is not type(new):
            continue
        if isinstance(old, np.ndarray):
            if old.shape == new.shape:
                old[...] = new
        elif isinstance(old, (list, bytearray)):
            old[:] = new
        elif isinstance(old, (dict, set)):
            old.clear()
            old.update(new)
