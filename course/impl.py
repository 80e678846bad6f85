"""Which implementation a check is looking at: the solution, the student's stub, or any file.

The checks never import an exercise module by name. They call `load_impl("3.4a")`,
which reads two environment variables set by `pagedsim check`:

    PAGEDSIM_IMPL      path of the implementation file to load
    PAGEDSIM_EXERCISE  the exercise that path implements

When they are unset (or name another exercise), the reference solution is loaded, so
a plain `pytest` run checks the solutions and stays green.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from . import curriculum

_cache: dict = {}  # (path, mtime, size) -> module


def impl_path(exercise_id: str) -> Path:
    chosen = os.environ.get("PAGEDSIM_IMPL")
    if chosen and os.environ.get("PAGEDSIM_EXERCISE", exercise_id) == exercise_id:
        return Path(chosen).resolve()
    return curriculum.find(exercise_id).path("solution")


def load_impl(exercise_id: str):
    """Import the implementation file for `exercise_id` as a fresh module."""
    path = impl_path(exercise_id)
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _cache:
        name = f"_course_impl_{exercise_id.replace('.', '_')}_{len(_cache)}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look the module up by name
        spec.loader.exec_module(module)
        _cache[key] = module
    return _cache[key]
