"""The fixtures every exercise check (and an instructor's extra check) may ask for.

    impl      the implementation under test, imported once per module: the reference
              solution in a plain pytest run, the student's file under `pagedsim check`
    kernels   the `cuda_kernels` package (a GPU or Numba's CUDA simulator), or a skip

`impl` is the module seen through `traced`: an exception leaving one of the file's functions or
methods carries the student's own call in `exc.raised_by` (e.g. "external_fragmentation([])").
`pagedsim check` registers this module as a pytest plugin, so `--extra-checks` files get both
fixtures, and one marker per curriculum section (ch3_1, ...)."""

import atexit
import contextlib
import functools
import inspect
import os
import re
import shutil
import tempfile
import types

import pytest
from hypothesis import configuration

from course import curriculum
from course.impl import load_impl


def pytest_configure(config):
    if os.environ.get("PAGEDSIM_EXERCISE"):  # under `pagedsim check`: none in the student's folder
        _private_hypothesis_home()
    for marker, section in curriculum.markers().items():
        config.addinivalue_line("markers", f"{marker}: checks for course section {section}")


_HOME: list = []  # [the temporary folder, the home Hypothesis had before the run]


def _private_hypothesis_home() -> None:
    """Hypothesis's .hypothesis/ folder in one temporary folder per process."""
    if not _HOME:
        _HOME.append(tempfile.mkdtemp(prefix="pagedsim-hypothesis-"))
        atexit.register(shutil.rmtree, _HOME[0], True)
    _HOME[1:] = [getattr(configuration, "__hypothesis_home_directory", None)]
    configuration.set_hypothesis_home_dir(_HOME[0])


def pytest_unconfigure(config):
    if len(_HOME) == 2:  # give an in-process caller (a test, a notebook) its own home back
        configuration.set_hypothesis_home_dir(_HOME.pop())


def short(value, limit: int = 60) -> str:
    """A call argument as the student would write it, cut to `limit` characters."""
    shape = getattr(value, "shape", None)
    if shape is not None and getattr(value, "dtype", None) is not None and len(shape) > 1:
        return f"<{value.dtype} array of shape {tuple(shape)}>"
    text = repr(value.tolist()) if hasattr(value, "tolist") and shape is not None else repr(value)
    if re.fullmatch(r"<[\w.]+ object at 0x[0-9a-fA-F]+>", text):  # never an address
        name = type(value).__name__
        return "pool" if name.endswith("Pool") else f"<a {name}>"
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def _wrap(fn, name: str, bound: bool):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except NotImplementedError:
            raise
        except Exception as e:
            if getattr(e, "raised_by", None) is None:
                shown = args[1:] if bound else args
                text = ", ".join(
                    [*map(short, shown), *(f"{k}={short(v)}" for k, v in kwargs.items())]
                )
                with contextlib.suppress(AttributeError):  # an exception type with __slots__
                    e.raised_by = f"{name}({text})"
            raise

    return call


class _Named:
    """A name served by a submission in its own process, whose calls name the call that raised;
    indexing (a kernel launch) and attributes pass through."""

    __pagedsim_remote__ = True

    def __init__(self, target, name: str):
        self._target, self._call = target, _wrap(target, name, bound=False)

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __getitem__(self, key):
        return self._target[key]

    def __getattr__(self, name):
        return getattr(self.__dict__["_target"], name)


class _LazyView(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = getattr(self.__dict__["_source"], name)
        return _Named(value, name) if callable(value) and not isinstance(value, type) else value


def traced(module):
    """A view of `module` whose own functions and classes name the call that raised."""
    if "__getattr__" in vars(type(module)):  # served on demand: name each call as it is made
        lazy = _LazyView(module.__name__, module.__doc__)
        lazy.__dict__["_source"] = module
        return lazy
    view = types.ModuleType(module.__name__, module.__doc__)
    view.__dict__.update(vars(module))
    for name, value in vars(module).items():
        if getattr(value, "__module__", None) != module.__name__:
            continue  # imported: np, cuda, pagedsim's classes
        if inspect.isfunction(value):
            setattr(view, name, _wrap(value, name, bound=False))
        elif inspect.isclass(value) and not issubclass(value, BaseException):
            methods = {
                k: _wrap(v, k, bound=True)
                for k, v in vars(value).items()
                if inspect.isfunction(v) and (not k.startswith("_") or k == "__init__")
            }
            if "__init__" in methods:
                methods["__init__"] = _wrap(value.__init__, name, bound=True)
            names = {"__module__": value.__module__, "__qualname__": value.__qualname__}
            with contextlib.suppress(TypeError):  # a class refusing subclasses stays as it is
                setattr(view, name, type(name, (value,), {**methods, **names}))
    return view


@pytest.fixture(scope="module")
def impl(request):
    exercise = getattr(request.module, "EXERCISE", None) or os.environ.get("PAGEDSIM_EXERCISE")
    if exercise is None:
        pytest.fail("this check file names no EXERCISE and PAGEDSIM_EXERCISE is unset")
    return traced(load_impl(exercise))


@pytest.fixture
def kernels():
    try:
        import cuda_kernels
    except ImportError as e:  # built by another part of the project
        pytest.skip(f"cuda_kernels is not available ({e}); the NumPy parts are still checked")
    return cuda_kernels
