"""A bounded walk of a folder someone else filled, and a bounded read of one file in it.

Grading walks folders a student controls (`course/grade_job.py`) and folders a job could
write in (`jail.contents`): 1,100 levels deep, a million files, a link to `/`, a FIFO, a
1 GiB sparse file. So, unlike `Path.rglob`, the walk loops over an explicit stack (no
RecursionError), opens each folder relative to its parent's descriptor with O_NOFOLLOW (no
link is ever followed, not even one swapped in mid-walk), and stops at its `Bounds` with
`Stopped` and a one-line reason, never a partial answer passed off as whole. Open
descriptors at any time: at most depth + 2, whatever the folder's width.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 16  # bytes per read() call
NO_GO = ("/proc", "/sys")  # kernel views: endless, and they describe the grader itself
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


_TOO_MANY = "more than {} files and folders: not walked further"


class Stopped(Exception):
    """The walk or the read went past a bound or met what it may not enter: args[0] is one
    line, in the instructor's terms."""


@dataclass(frozen=True)
class Bounds:
    depth: int = 32  # folders below the root
    entries: int = 20_000  # files, folders and links seen in all


@dataclass(frozen=True)
class Entry:
    rel: str  # path relative to the root, '/'-separated
    kind: str  # "file" (regular), "link" (a symbolic link, never followed) or "other"
    size: int  # bytes (lstat); 0 for anything but a file


def _refuse_root(root: Path) -> str:
    """The root's real path, or Stopped: a link, or a folder in a kernel view."""
    if root.is_symlink():
        raise Stopped(f"{root.name or root} is a symbolic link: not followed")
    real = os.path.realpath(root)
    for top in NO_GO:
        if real == top or real.startswith(top + "/"):
            raise Stopped(f"{root.name} is under {top}: not entered")
    return real.rstrip("/") + "/"


def entries(root: str | os.PathLike[str], bounds: Bounds = Bounds()) -> list[Entry]:
    """Every file, link and special file below `root` (folders are walked, not listed), in
    sorted order; Stopped when a bound is reached or the root may not be walked."""
    root = Path(root)
    real = _refuse_root(root)
    try:
        top = os.open(root, _DIR_FLAGS)
    except OSError as e:
        raise Stopped(f"{root.name} cannot be opened as a folder: {e.strerror}") from None
    found: list[Entry] = []
    seen = 0
    # each frame: (descriptor, path relative to root, names still to look at), deepest last
    stack = [(top, "", _names(top, bounds.entries, bounds))]
    try:
        while stack:
            fd, rel, names = stack[-1]
            if not names:
                os.close(fd)
                stack.pop()
                continue
            name = names.pop()
            seen += 1
            if seen > bounds.entries:
                raise Stopped(_TOO_MANY.format(bounds.entries))
            path = f"{rel}{name}"
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # gone since it was listed
            if stat.S_ISDIR(st.st_mode):
                if real + path in NO_GO:  # the root is / itself
                    continue
                if len(stack) > bounds.depth:
                    raise Stopped(
                        f"folders nested more than {bounds.depth} deep ({path[:60]}...): "
                        "not walked further"
                    )
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    found.append(Entry(path, "other", 0))  # swapped for a link, or unreadable
                    continue
                stack.append((child, path + "/", _names(child, bounds.entries - seen, bounds)))
            else:
                kind = "link" if stat.S_ISLNK(st.st_mode) else "other"
                kind = "file" if stat.S_ISREG(st.st_mode) else kind
                found.append(Entry(path, kind, st.st_size if kind == "file" else 0))
    finally:
        for fd, _, _ in stack:
            os.close(fd)
    return sorted(found, key=lambda e: e.rel)


def _names(fd: int, budget: int, bounds: Bounds) -> list[str]:
    """A folder's names, reverse-sorted so that pop() takes them in order; Stopped past
    `budget` names (a folder of a million files is never listed whole)."""
    names: list[str] = []
    try:
        with os.scandir(fd) as it:
            for e in it:
                if len(names) >= budget:
                    raise Stopped(_TOO_MANY.format(bounds.entries))
                names.append(e.name)
    except OSError:
        return []
    return sorted(names, reverse=True)


def read(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file `path` (never through a link in its last part), or
    Stopped: not a regular file, or more than `limit` bytes by its size before reading or by
    what it holds while read (it may grow)."""
    path = Path(path)
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError as e:
        raise Stopped(f"{path.name} cannot be read: {e.strerror}") from None
    with os.fdopen(fd, "rb", buffering=0) as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Stopped(f"{path.name} is not a regular file: not read")
        if st.st_size > limit:
            raise Stopped(f"{path.name} is {st.st_size:,} bytes, over the limit of {limit:,}")
        parts, got = [], 0
        while got <= limit:
            chunk = f.read(min(CHUNK, limit + 1 - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        if got > limit:
            raise Stopped(f"{path.name} grew past the limit of {limit:,} bytes while read")
    return b"".join(parts)


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Delete the folder `path` and everything below it, however deep (a job can nest 1,100
    folders in its scratch, and shutil.rmtree recurses), following no link, making each
    folder writable as it is entered. One descriptor open at a time: the walk goes back up
    through "..". What cannot be removed is left behind, never retried."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
        return
    path.chmod(0o700)
    cur = os.open(path, _DIR_FLAGS)
    below: list[str] = []  # the names walked down through, from `path`
    pending = [_clear(cur)]  # per level: the folders still to go down into
    try:
        while True:
            if pending[-1]:
                name = pending[-1].pop()
                try:
                    os.chmod(name, 0o700, dir_fd=cur)
                    down = os.open(name, _DIR_FLAGS, dir_fd=cur)
                except OSError:
                    continue
                os.close(cur)
                cur = down
                below.append(name)
                pending.append(_clear(cur))
            elif below:
                up = os.open("..", _DIR_FLAGS, dir_fd=cur)
                os.close(cur)
                cur = up
                pending.pop()
                with contextlib.suppress(OSError):
                    os.rmdir(below.pop(), dir_fd=cur)
            else:
                break
    finally:
        os.close(cur)
    with contextlib.suppress(OSError):
        path.rmdir()


def _clear(fd: int) -> list[str]:
    """Unlink everything in the folder `fd` but its folders; returns their names."""
    folders = []
    with os.scandir(fd) as it:
        found = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    for name, is_dir in found:
        if is_dir:
            folders.append(name)
        else:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
    return folders


@contextlib.contextmanager
def temporary_folder(prefix: str) -> Iterator[Path]:
    """A new private folder (mode 0700) that is removed with `remove_tree` on leaving, whatever
    a job nested in it (tempfile.TemporaryDirectory's rmtree recurses)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        remove_tree(folder)
