"""Keep the reference solutions out of reach while a student's file is checked.

While `solutions_hidden()` is active, a finder first on `sys.meta_path` refuses every module under
SOLUTIONS, and any already imported is out of `sys.modules` (put back after). pytest's assertion
rewriter puts itself first when pytest starts, so the runner calls `keep_first()` once pytest is
configured. This closes the import route only; the instructor's export closes the rest."""

from __future__ import annotations

import contextlib
import sys

SOLUTIONS = "course.ch03_kv_block.solutions"


class SolutionsHidden(ImportError):
    """Raised for an import of the reference solutions during a check."""


class _Blocker:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == SOLUTIONS or name.startswith(SOLUTIONS + "."):
            raise SolutionsHidden(
                f"{name} cannot be imported while your code is checked: "
                "the reference solutions are hidden; write the exercise yourself"
            )
        return None


@contextlib.contextmanager
def solutions_hidden():
    hidden = {
        k: sys.modules.pop(k)
        for k in list(sys.modules)
        if k == SOLUTIONS or k.startswith(SOLUTIONS + ".")
    }
    parent = sys.modules.get("course.ch03_kv_block")
    attr = getattr(parent, "solutions", None) if parent else None
    if attr is not None:
        delattr(parent, "solutions")
    blocker = _Blocker()
    sys.meta_path.insert(0, blocker)
    try:
        yield
    finally:
        sys.meta_path.remove(blocker)
        sys.modules.update(hidden)
        if attr is not None:
            parent.solutions = attr


def keep_first() -> None:
    """Put the active blockers back in front of `sys.meta_path`."""
    blockers = [f for f in sys.meta_path if isinstance(f, _Blocker)]
    for f in blockers:
        sys.meta_path.remove(f)
    sys.meta_path[:0] = blockers
