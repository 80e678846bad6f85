"""Processes that end when the job ends, a sandbox where bubblewrap exists, and folder hashes.

    become_subreaper()     orphans of our children come back to us (Linux prctl), not to init,
                           so a child that calls setsid() and forks is still found and killed
    kill_tree(pid)         SIGKILL a process, its session, and every descendant, until none is left
    sandbox_argv(...)      `bwrap` in front of a command: its own PID, network, IPC and user
                           namespaces; the file system read-only but for the scratch folder, and
                           only the folders Python and the code need (no source tree, no solutions)
    tree_hash(folder)      sha256 over every file's relative path and bytes
    snapshot(folder)       {path: (size, mtime_ns)} to find files a job wrote

Without bubblewrap a submission runs as the grader's own user: it could then read any file
that user can, and signal its processes. The hashes and snapshots detect, after the fact,
what it changed in the places they cover; only the sandbox makes those writes impossible.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import signal
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (False where not supported)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id), for every process we can see."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            out[int(entry)] = (int(fields[1]), int(fields[3]))
    return out


def descendants(pid: int, table=None) -> set[int]:
    table = _processes() if table is None else table
    children: dict[int, list[int]] = {}
    for p, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(p)
    found, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def kill_tree(
    pid: int | None, *, sessions=(), orphans_of_self: bool = False, keep=frozenset()
) -> None:
    """SIGKILL `pid`, every process in `sessions`, their descendants, and (with `orphans_of_self`)
    every descendant of this process not in `keep`; repeat until a pass finds nobody."""
    me = os.getpid()
    for _ in range(100):
        table = _processes()
        doomed = {p for p, (_, sid) in table.items() if sid in sessions and p != me}
        if pid is not None and pid in table:
            doomed.add(pid)
        for p in list(doomed):
            doomed |= descendants(p, table)
        if orphans_of_self:
            doomed |= descendants(me, table) - set(keep)
        doomed.discard(me)
        if not doomed:
            return
        for p in doomed:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _reap()
        time.sleep(0.01)


def _reap() -> None:
    """Collect exited children (our own, and orphans handed to us as subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def bwrap() -> str | None:
    """The bubblewrap executable, if it is installed and works here (probed once)."""
    global _PROBED
    if _PROBED is None:
        exe = shutil.which("bwrap")
        ok = False
        if exe:
            import subprocess

            try:
                ok = (
                    subprocess.run(
                        [exe, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                        capture_output=True,
                        timeout=20,
                    ).returncode
                    == 0
                )
            except (OSError, subprocess.SubprocessError):
                ok = False
        _PROBED = exe if ok else ""
    return _PROBED or None


_PROBED: str | None = None


def _bind(flag: str, path: str) -> list[str]:
    if os.path.islink(path):
        return ["--symlink", os.readlink(path), path]
    return [flag, path, path] if os.path.exists(path) else []


def sandbox_argv(
    argv: list[str], *, code_root: Path, files=(), scratch: Path, hide=(), env=None
) -> list[str]:
    """`argv` under bubblewrap: read-only system, Python and `code_root`; `files` read-only;
    `scratch` writable; the relative paths `hide` (folders emptied, files blanked) hidden
    wherever they appear under a bound root or its site-packages; the environment cleared
    and set to `env` alone."""
    exe = bwrap()
    if exe is None:
        raise RuntimeError("bubblewrap (bwrap) is not available")
    out = [
        exe,
        "--die-with-parent",
        "--new-session",
        "--unshare-all",
        "--cap-drop",
        "ALL",
        "--clearenv",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"):
        out += _bind("--ro-bind", top)
    roots = list(
        dict.fromkeys(str(Path(p).resolve()) for p in (sys.base_prefix, sys.prefix, code_root))
    )
    for root in roots:
        out += ["--ro-bind", root, root]
    exe_real = str(Path(sys.executable).resolve().parent)
    if not any(exe_real.startswith(r) for r in roots):
        out += ["--ro-bind", exe_real, exe_real]
    for f in files:
        out += ["--ro-bind", str(Path(f).resolve()), str(Path(f).resolve())]
    for (
        root
    ) in roots:  # e.g. an installed or source `course` package: its answers are never mounted
        for hidden in [*Path(root).glob("lib/python*/site-packages"), Path(root)]:
            for rel in hide:
                if (hidden / rel).is_dir():
                    out += ["--tmpfs", str(hidden / rel)]
                elif (hidden / rel).is_file():
                    out += ["--ro-bind", "/dev/null", str(hidden / rel)]
    for key, value in (env or {}).items():
        out += ["--setenv", key, value]
    scratch = str(Path(scratch).resolve())
    out += ["--bind", scratch, scratch, "--chdir", scratch, "--"]
    return out + argv


PASSED_ON = ("NUMBA_ENABLE_CUDASIM", "PAGEDSIM_LANG", "PAGEDSIM_CUDA", "PAGEDSIM_CHILD_OUTPUT")


def child_env(*, home: Path, pythonpath: str) -> dict[str, str]:
    """The whole environment of a submission's process: what Python needs, a scratch HOME,
    LANG, and the few settings of ours in PASSED_ON; nothing else of the grader's (no
    tokens, no credentials, no paths of its own)."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(home),
        "LANG": "C.UTF-8",
        "PYTHONPATH": pythonpath,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": str(Path(home) / ".matplotlib"),
    }
    env.update({k: os.environ[k] for k in PASSED_ON if k in os.environ})
    return env


def tree_hash(folder: Path) -> str:
    h = hashlib.sha256()
    folder = Path(folder)
    for p in sorted(folder.rglob("*")):
        if p.is_file() or p.is_symlink():
            h.update(str(p.relative_to(folder)).encode() + b"\0")
            h.update(p.read_bytes() if p.is_file() else os.readlink(p).encode())
            h.update(b"\0")
    return h.hexdigest()


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for p in Path(folder).rglob("*"):
        try:
            st = p.lstat()
        except OSError:
            continue
        out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


def changed(before: dict, after: dict) -> list[str]:
    """Paths added, changed or removed between two snapshots."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def read_only(folder: Path) -> None:
    """chmod a-w every file and folder below `folder` (root ignores it: the hash still tells)."""
    for p in [*Path(folder).rglob("*"), Path(folder)]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode & ~0o222)


def writable(folder: Path) -> None:
    for p in [Path(folder), *Path(folder).rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o200)
