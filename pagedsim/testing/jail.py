"""Processes that end when the job ends, a sandbox where bubblewrap exists, and folder hashes.

In order below: `kill_tree` (a process, its session and every descendant), `sandbox_argv`
(bubblewrap), a uid of its own per job (`job_uid`, `kill_user`), `confined` (a mount
namespace of its own, then an `Account`), `Limits` and `child_env`, and `contents` (files
by sha256, to find what a job changed).

Without bubblewrap and as a user other than root, a submission runs as the grader's own
user: it could then read any file that user can, and signal its processes; `pagedsim
grade` refuses that unless told --no-sandbox, and marks such results unverified.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import resource
import shutil
import signal
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import walk

# Linux constants: prctl options, mount(2) and unshare(2) flags
PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, LAST_CAP = 36, 38, 24, 63
PR_SET_PDEATHSIG = 1
CLONE_NEWNS, MS_PRIVATE, MS_RDONLY, MS_NOEXEC, MS_REMOUNT = 0x20000, 1 << 18, 1, 8, 32
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC = 2, 4, 4096, 16384


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (False where not supported)."""
    try:
        return bool(
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        )
    except (OSError, AttributeError):
        return False


def dies_with_parent() -> Callable[[], None]:
    """A preexec_fn step (run it last: a change of uid clears it) that has the kernel SIGKILL the
    child when the process that started it ends, by SIGTERM or SIGKILL included, so that a
    checker stopped from outside leaves no submission looping or sleeping behind."""
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: nothing is loaded after the fork

    def run() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # it ended before the line above
            os._exit(1)

    return run


def _pids(newest_first: bool = False) -> list[int]:
    """Every process id we can see."""
    return sorted((int(e) for e in os.listdir("/proc") if e.isdigit()), reverse=newest_first)


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, parent pid, process group, session) of `pid`; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2]), int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id), for every process we can see."""
    stats = ((pid, _stat(pid)) for pid in _pids())
    return {pid: (st[1], st[3]) for pid, st in stats if st is not None and st[0] != "Z"}


def descendants(pid: int, table: dict[int, tuple[int, int]] | None = None) -> set[int]:
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
    pid: int | None,
    *,
    sessions: Collection[int] = (),
    orphans_of_self: bool = False,
    keep: Collection[int] = frozenset(),
) -> None:
    """SIGKILL `pid`, every process in `sessions`, their descendants, and (with `orphans_of_self`)
    every descendant of this process not in `keep`: all are stopped first, pass after pass, so
    a chain that forks and exits cannot stay ahead; then killed until a pass finds nobody."""
    me = os.getpid()

    def doomed() -> set[int]:
        table = _processes()
        found = {p for p, (_, sid) in table.items() if sid in sessions and p != me}
        if pid is not None and pid in table:
            found.add(pid)
        for p in list(found):
            found |= descendants(p, table)
        if orphans_of_self:
            found |= descendants(me, table) - set(keep)
        found.discard(me)
        return found

    # A session's own process group is stopped, then killed, by the kernel's group signal: a
    # fork chain (fork, parent exits, repeat) outruns any /proc sweep, but not that. Stopping
    # first keeps the tree whole, so members that left the group (setsid) are still found
    # below as descendants of a stopped parent, not orphans in flight.
    for sid in sessions:
        _signal_group(sid, signal.SIGSTOP)
    stopped: set[int] = set()
    for _ in range(200):
        caught = _stop_new_children(me, stopped, set(keep)) if orphans_of_self else set()
        stopped |= caught
        fresh = doomed() - stopped
        if not fresh and not caught:
            break
        _signal(fresh, signal.SIGSTOP)
        stopped |= fresh
    killed: set[int] = set()
    for _ in range(100):
        found = doomed() | stopped
        stopped = set()
        if not found:
            break
        for sid in sessions:
            _signal_group(sid, signal.SIGKILL)
        _signal(found, signal.SIGKILL)
        killed |= found
        for p in killed:
            _wait(p)
        time.sleep(0.01)
    _reap_each(killed, sessions)


def _stop_new_children(me: int, stopped: set[int], spare: set[int]) -> set[int]:
    """SIGSTOP each running child of ours or of a process in `stopped` (but `spare`), newest pid
    first, the moment it is seen: an orphan chain's member lives only until its next fork,
    often less than one /proc sweep takes, so `doomed` keeps missing it; newest first meets it."""
    caught: set[int] = set()
    parents = set(stopped) | {me}  # grows as we go: a child caught now is a parent below
    for pid in _pids(newest_first=True):
        if pid in spare or pid in parents:
            continue
        st = _stat(pid)
        if st is not None and st[0] != "Z" and st[1] in parents:
            _signal([pid], signal.SIGSTOP)
            caught.add(pid)
            parents.add(pid)
    return caught


def _reap_each(pids: set[int], sessions: Collection[int], seconds: float = 5.0) -> None:
    """Wait until every process of `pids` and `sessions` (killed by group, never listed) is
    gone, collecting each zombie handed to us as subreaper: nobody else would, and a
    long-lived grader would pile them up until the system runs out of pids."""
    me, groups = os.getpid(), set(sessions)
    pending, deadline = set(pids), time.monotonic() + seconds
    while time.monotonic() < deadline:
        for p, pgid, sid in _zombies_of(me):
            if p in pending or pgid in groups or sid in groups:
                _wait(p)
        for p in list(pending):
            if _wait(p) or not os.path.exists(f"/proc/{p}"):
                pending.discard(p)
        alive = any(sid in groups for _, sid in _processes().values())
        dead = any(pgid in groups or sid in groups for _, pgid, sid in _zombies_of(me))
        if not (pending or alive or dead):
            return
        time.sleep(0.01)


def _wait(pid: int) -> bool:
    """Collect `pid` if it is our exited child. Never `waitpid(-1)`: it would take another
    thread's child, whose Popen would then read a false status of 0."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return False


def _zombies_of(me: int) -> list[tuple[int, int, int]]:
    """(pid, process group, session) of each exited child of ours not yet collected."""
    stats = ((pid, _stat(pid)) for pid in _pids())
    return [(pid, st[2], st[3]) for pid, st in stats if st is not None and st[:2] == ("Z", me)]


def _signal_group(pgid: int, sig: int) -> None:
    if pgid <= 1 or pgid == os.getpgrp():
        return  # never our own group, never "every process" (0 and -1 mean that to killpg)
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal(pids: Iterable[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


@functools.cache
def bwrap() -> str | None:
    """The bubblewrap executable, if it is installed and works here (probed once)."""
    exe = shutil.which("bwrap")
    probe = [exe or "", "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"]
    return exe if exe and _succeeds(probe, 20) else None


def _succeeds(argv: list[str], timeout: float, **popen: Any) -> bool:
    """Whether `argv` runs and exits 0 within `timeout` seconds (its output discarded)."""
    import subprocess

    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout, **popen).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _bind(flag: str, path: str) -> list[str]:
    if os.path.islink(path):
        return ["--symlink", os.readlink(path), path]
    return [flag, path, path] if os.path.exists(path) else []


def sandbox_argv(
    argv: list[str],
    *,
    code_root: Path,
    files: Iterable[str | Path] = (),
    scratch: Path,
    hide: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """`argv` under bubblewrap: system, Python, `code_root` and `files` read-only, `scratch`
    writable, the relative paths `hide` emptied under every bound root and its site-packages,
    and the environment `env` alone."""
    exe = bwrap()
    if exe is None:
        raise RuntimeError("bubblewrap (bwrap) is not available")
    flags = "--die-with-parent --new-session --unshare-all --cap-drop ALL --clearenv"
    out = [exe, *flags.split(), "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
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
    # e.g. an installed or source `course` package: its answers are never mounted
    for root in roots:
        for hidden in [*Path(root).glob("lib/python*/site-packages"), Path(root)]:
            for rel in hide:
                if (hidden / rel).is_dir():
                    out += ["--tmpfs", str(hidden / rel)]
                elif (hidden / rel).is_file():
                    out += ["--ro-bind", "/dev/null", str(hidden / rel)]
    for key, value in (env or {}).items():
        out += ["--setenv", key, value]
    work = str(Path(scratch).resolve())
    # /tmp read-only once all is mounted: a write anywhere but scratch fails, and says so
    out += ["--bind", work, work, "--remount-ro", "/tmp", "--chdir", work, "--"]
    return out + argv


# -- a user of its own per job (when the grader runs as root) ------------------------------------
UID_BASE = 1_000_000  # job uids: UID_BASE + grader pid * 64 + slot, unique on this machine


CHECKER_UID_BASE = UID_BASE + (1 << 29)  # checker uids: past every job uid (pids < 2**22)


def job_uid(slot: int) -> int:
    """A uid (and gid) no other process uses: for one job of this grader, `slot` < 64."""
    return UID_BASE + os.getpid() * 64 + slot


def checker_uid(slot: int) -> int:
    """The uid of the checker of the job in `slot` (< 64): never 0, never a job's."""
    return CHECKER_UID_BASE + os.getpid() * 64 + slot


# -- the runtime a job's user can reach -----------------------------------------------------------


def closed_folders(paths: Iterable[str | Path]) -> list[tuple[str, tuple[str, ...]]]:
    """[(a folder others may not pass through, the needed paths below it)]: e.g. a pyenv
    under a 0700 /root gives ("/root", ("/root/.pyenv/versions/3.11.7",))."""
    found: dict[str, list[str]] = {}
    for p in dict.fromkeys(str(Path(p).resolve()) for p in paths):
        for folder in reversed(Path(p).parents[:-1]):  # the outermost first, "/" left out
            try:
                passable = folder.stat().st_mode & 0o001
            except OSError:
                break
            if not passable:
                found.setdefault(str(folder), []).append(p)
                break
    return [
        (f, tuple(q for q in ps if not any(q.startswith(r + "/") for r in ps if r != q)))
        for f, ps in found.items()
    ]


def runtime_paths(*extra: str | Path) -> list[str]:
    """What a job's Python needs to reach: its installation, its environment, `extra`."""
    exe = str(Path(sys.executable).resolve().parent)
    return [sys.base_prefix, sys.prefix, exe, *map(str, extra)]


@dataclass(frozen=True)
class Account:
    """Who a process becomes before it runs its program (`switch`): a uid (and gid) of its own,
    the only other groups it is in, its rlimits and its folder."""

    uid: int
    groups: tuple[int, ...] = ()  # supplementary groups (e.g. the job's, to read its code)
    limits: Limits | None = None
    cwd: str | None = None  # entered as the uid: its folder is 0700, and root lacks DAC powers
    bare: bool = False  # no capability left even in the bounding set, and no_new_privs set


def switch(account: Account, libc: Any = None) -> None:
    """In the child (as root, between fork and exec): become `account`. Leaving uid 0 clears
    the permitted, effective and ambient capability sets; with `account.bare` the bounding
    set is emptied first and no_new_privs is set, so no setuid or file-capability program
    can give any power back."""
    if account.limits is not None:
        account.limits.apply(True)
    if account.bare:
        for cap in range(LAST_CAP + 1):
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # past the last one: EINVAL, ignored
        _ok(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    os.setgroups(list(account.groups))
    os.setresgid(account.uid, account.uid, account.uid)
    os.setresuid(account.uid, account.uid, account.uid)
    if account.cwd is not None:
        os.chdir(account.cwd)


def become(
    uid: int,
    *,
    reach: Iterable[str | Path] = (),
    limits: Limits | None = None,
    cwd: str | Path | None = None,
) -> Callable[[], None]:
    """A preexec_fn (as root, in the child) that starts a process as `uid` (gid `uid`, no other
    groups), with `limits`, in `cwd`, able to reach `reach` (default: this Python) even in a
    folder only root may enter: in a mount namespace of its own each such folder is an empty
    tmpfs with only the needed paths bound back. Nothing is copied, the host is unchanged."""
    view = closed_folders(reach or runtime_paths())
    libc = ctypes.CDLL(None, use_errno=True) if view else None
    account = Account(uid, limits=limits, cwd=None if cwd is None else str(cwd))

    def run() -> None:
        if view:
            _private_view(libc, view)
        switch(account)

    return run


# What a confined view keeps of the root folder, as bubblewrap's does (sandbox_argv): every other
# folder of / (/home, /root, /opt, /srv, a source checkout with its .git, another clone's
# solutions) is an empty tmpfs there, but for the paths the process needs below it.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/proc", "/sys", "/dev")


def _blanked(reach: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """[(a folder of / outside SYSTEM, or /dev/shm; the paths of `reach` below it)]."""
    folders = [e.path for e in os.scandir("/") if e.is_dir(follow_symlinks=False)]
    if os.path.isdir("/dev/shm") and not os.path.islink("/dev/shm"):
        folders.append("/dev/shm")
    return [
        (f, tuple(k for k in reach if k.startswith(f + "/")))
        for f in sorted(folders)
        if f not in SYSTEM and not any(f == k or f.startswith(k + "/") for k in reach)
    ]


# What a confined process that stays root keeps of root's powers (a submission's bubblewrap when
# no uid of its own is used: it maps uid 0 into its namespace, setfcap): no CAP_SYS_ADMIN (it
# cannot remount what is read-only), no CAP_DAC_OVERRIDE, no ptrace. One that `switch`es to an
# `Account` keeps nothing of them.
ROOT_CAPS = {0, 3, 5, 6, 7, 31}  # chown, fowner, kill, setgid, setuid, setfcap
_KEPT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}


def confined(
    *,
    keep: Iterable[str | Path],
    writable: str | Path,
    hide: Iterable[str | Path] = (),
    account: Account | None = None,
) -> Callable[[], None]:
    """A preexec_fn (as root, in the child): a mount namespace of its own in which every folder
    of / but the system's (SYSTEM; /tmp, /var/tmp, /home, a source checkout included) and
    /dev/shm is empty but for `keep` (the job's own folder: no other job's, no student's) and
    this Python, each path of `hide` (the reference solutions on disk) is an empty folder or
    file, every file system is read-only but `writable` (its scratch), and there is no network
    (a namespace of its own with nothing in it); then the process
    becomes `account` (`switch`), or, with none, stays uid 0 with root's capabilities cut to
    ROOT_CAPS."""
    keep = [str(Path(k).resolve()) for k in keep]
    # this Python stays reachable wherever it sits (a venv in /tmp, a pyenv under a 0700 /root)
    reach = sorted({str(Path(p).resolve()) for p in (*keep, *runtime_paths())})
    reach = [p for p in reach if not any(p.startswith(q + "/") for q in reach)]
    covers = _blanked(reach)
    hides = [str(Path(h).resolve()) for h in hide if os.path.exists(h)]
    scratch = str(Path(writable).resolve())
    libc = ctypes.CDLL(None, use_errno=True)
    b"".decode("unicode_escape")  # its codec imported now: no import between fork and exec

    def run() -> None:
        # no network either, as under bubblewrap: no other job's abstract or localhost socket,
        # no host service, no cloud metadata endpoint (pipes and socketpairs still work)
        _ok(libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        _private_view(libc, covers, hides)
        _mount(libc, scratch.encode(), scratch.encode(), None, MS_BIND)  # a mount of its own
        _read_only_but(libc, scratch)
        if account is not None:
            switch(account, libc)
            return
        for cap in range(LAST_CAP + 1):
            if cap not in ROOT_CAPS:
                libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # past the last one: EINVAL, ignored

    return run


def _read_only_but(libc: Any, writable: str) -> None:
    """Remount every mount of this namespace read-only, but `writable` and the kernel's own
    (/proc, /sys, /dev: /dev/null stays writable)."""
    with open("/proc/self/mountinfo", "rb") as f:
        rows = [line.split() for line in f.read().splitlines()]
    for row in rows:
        point = row[4].decode("unicode_escape")  # \040 for a space
        if point == writable or point.startswith(("/proc", "/sys", "/dev")):
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for option in row[5].decode().split(","):
            flags |= _KEPT_FLAGS.get(option, 0)
        try:
            _mount(libc, None, point.encode(), None, flags)
        except OSError:
            if point == "/":
                raise


def _mount(libc: Any, src: Any, dst: bytes, kind: Any, flags: int, data: Any = None) -> None:
    _ok(libc.mount(src, dst, kind, flags, data), f"mount {dst!r}")


def _ok(result: int, what: str) -> None:
    """OSError (with errno) when a libc call returned non-zero."""
    if result != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _private_view(
    libc: Any, view: Iterable[tuple[str, tuple[str, ...]]], hides: Iterable[str] = ()
) -> None:
    mount = functools.partial(_mount, libc)
    _ok(libc.unshare(CLONE_NEWNS), "unshare")
    mount(b"none", b"/", None, MS_REC | MS_PRIVATE)
    for folder, below in view:
        fds = [os.open(p, os.O_PATH | os.O_CLOEXEC) for p in below]  # before they are covered
        mount(b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755")
        for p, fd in zip(below, fds, strict=True):
            os.makedirs(p, exist_ok=True)
            mount(f"/proc/self/fd/{fd}".encode(), p.encode(), None, MS_BIND | MS_REC)
            os.close(fd)
    for p in hides:
        if os.path.isdir(p):
            mount(b"tmpfs", p.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0555,size=4k")
        elif os.path.exists(p):
            mount(b"/dev/null", p.encode(), None, MS_BIND)


@functools.cache
def can_run_as_user(sandbox: bool) -> bool:
    """Whether a job's user could run this Python (under bubblewrap too, with `sandbox`): only
    root can switch users, and the interpreter must not sit in a folder only root may enter
    (e.g. a pyenv under /root). Probed once per value of `sandbox`."""
    if os.geteuid() != 0:
        return False
    import tempfile

    uid = job_uid(63)
    with tempfile.TemporaryDirectory() as home:
        give_to(uid, Path(home))
        argv = [sys.executable, "-S", "-c", "pass"]
        if sandbox:
            argv = sandbox_argv(argv, code_root=Path(home), scratch=Path(home), env={"HOME": home})
        reach = become(uid, reach=runtime_paths(home))
        ok = _succeeds(argv, 30, preexec_fn=reach, cwd=home, env={"HOME": home})
        kill_user(uid)
    return ok


def processes_of(uid: int) -> list[int]:
    """The live processes whose real uid is `uid`."""
    out = []
    for pid in _pids():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("State", "").strip().startswith("Z"):
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            out.append(pid)
    return out


def kill_user(uid: int) -> None:
    """SIGKILL every process of `uid` until none is left. A process of that uid sends
    kill(-1, SIGKILL), which reaches all of them at once (a fork chain cannot outrun it); a
    /proc sweep from here follows, and both repeat while any remains."""
    import subprocess

    kill_all = [sys.executable, "-S", "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"]
    seen: set[int] = set()
    for attempt in range(50):  # kill(-1) at least once: a scan can miss a process mid-fork
        for p in seen:
            _wait(p)
        if attempt and not processes_of(uid) and not processes_of(uid):
            return
        _succeeds(kill_all, 10, preexec_fn=become(uid), env={}, stdin=subprocess.DEVNULL)
        found = processes_of(uid)
        seen.update(found)
        _signal(found, signal.SIGKILL)
        time.sleep(0.02)


def give_to(uid: int, folder: Path) -> None:
    """`folder` (made here) becomes `uid`'s own, mode 0700: the only place its job writes."""
    os.chown(folder, uid, uid)
    os.chmod(folder, 0o700)


def share_with(gid: int, folder: Path) -> None:
    """Let group `gid` read (never write) `folder`; nobody else gets in."""
    for p in [Path(folder), *Path(folder).rglob("*")]:
        if p.is_symlink():
            continue
        os.chown(p, 0, gid)
        p.chmod(0o550 if p.is_dir() else 0o440)


# -- resource limits per job ----------------------------------------------------------------------
@dataclass(frozen=True)
class Limits:
    """What one job's submission process may use (setrlimit in the child, before exec)."""

    memory: int = 2 << 30  # bytes of address space (RLIMIT_AS)
    cpu: int = 300  # seconds of CPU time (RLIMIT_CPU; SIGXCPU past it)
    file_size: int = 64 << 20  # bytes in any one file it writes (RLIMIT_FSIZE; SIGXFSZ)
    open_files: int = 256  # file descriptors (RLIMIT_NOFILE)
    processes: int = 64  # processes of its uid at once (RLIMIT_NPROC; only with a uid of its own)

    def apply(self, own_uid: bool) -> None:
        """In the child, between fork and exec (so nothing here may import)."""
        for what, n in (
            (resource.RLIMIT_AS, self.memory),
            (resource.RLIMIT_FSIZE, self.file_size),
            (resource.RLIMIT_NOFILE, self.open_files),
        ):
            resource.setrlimit(what, (n, n))
        # SIGXCPU at the soft limit; the hard one (SIGKILL, which names nothing) a second later
        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu, self.cpu + 1))
        if own_uid:
            resource.setrlimit(resource.RLIMIT_NPROC, (self.processes, self.processes))

    def why(self, returncode: int | None) -> str | None:
        """The limit a child that ended with `returncode` ran into, in one line, if any (a
        signal's number, negative from Python, or 128 + it as bubblewrap passes it on)."""
        if returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
            return f"cpu time limit {self.cpu} s"
        if returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
            return f"file size limit {_amount(self.file_size)}"
        return None

    def as_json(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_json(cls, text: str | None) -> Limits:
        return cls(**{k: int(v) for k, v in json.loads(text).items()}) if text else cls()


def _amount(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} bytes"


def memory_reason(limits: Limits) -> str:
    return f"memory limit {_amount(limits.memory)}"


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


def contents(folder: Path, hash_limit: int | None = None) -> dict[str, str]:
    """{relative path: sha256 of its bytes} for every file below `folder` (a link: of its
    target's name), so a file rewritten at the same size and mtime still shows. The walk is
    bounded (walk.entries); where it stops, one entry names why. Past `hash_limit` bytes
    hashed in all, a file is known by its size, ctime (no user can put it back) and inode."""
    folder = Path(folder)
    try:
        found = walk.entries(folder)
    except walk.Stopped as stop:
        return {f"<not walked: {stop.args[0]}>": "stopped"}
    out = {}
    budget = hash_limit
    for e in found:
        p = folder / e.rel
        try:
            if e.kind == "link":
                out[e.rel] = "link:" + hashlib.sha256(os.readlink(p).encode()).hexdigest()
            elif e.kind == "file" and budget is not None and e.size > budget:
                st = p.lstat()
                out[e.rel] = f"large:{st.st_size}:{st.st_ctime_ns}:{st.st_ino}"
            elif e.kind == "file":
                h = hashlib.sha256()
                with open(p, "rb", opener=_no_follow) as f:
                    for chunk in iter(functools.partial(f.read, 1 << 20), b""):
                        h.update(chunk)
                out[e.rel] = h.hexdigest()
                budget = None if budget is None else budget - e.size
        except OSError:
            out[e.rel] = "unreadable"
    return out


def _no_follow(path: str | Path, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)


def changed(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """Paths added, changed or removed between two `contents`."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def read_only(folder: Path) -> None:
    """chmod a-w every file and folder below `folder` (root ignores it: the hash still tells)."""
    for p in [*Path(folder).rglob("*"), Path(folder)]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode & ~0o222)
