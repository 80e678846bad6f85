"""`pagedsim conform`: check a block manager (and a paged-attention function) from the shell.

The verdict is the parent's alone: the checks run here and the target in a child process
called through a socket (remote.py), so nothing it does (printing "OK", exiting 0,
ignoring SIGALRM, patching the kit) can make the command pass. Options and exit codes:
docs/testing-kit.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator

from ..io.args import ArgParser, float_in, int_in
from . import jail, remote
from .contract import Hung, NonConformance, time_limit

CHILD_FLAG = "--child"
Loaded = Callable[..., object]  # what MODULE:NAME names: a factory or an attention function


class LoadError(Exception):
    """The target named on the command line cannot be imported or is not callable."""


class Expired(BaseException):
    """--timeout passed: the target's process is gone and no call may start it again."""


def parser() -> argparse.ArgumentParser:
    p = ArgParser(
        prog="pagedsim conform",
        description="Check a block manager built by MODULE:FACTORY(num_gpu_blocks, block_size) "
        "against pagedsim's KVCacheManager, and optionally a paged-attention function against "
        "the float64 reference.",
    )
    p.add_argument("target", help="MODULE:FACTORY, MODULE a file path or an importable name")
    p.add_argument(
        "--attention",
        metavar="MODULE:FN",
        help="also check fn(query, kv_cache, block_tables, context_lens, scale)",
    )
    p.add_argument(
        "--check-free-order",
        choices=("lifo", "fifo"),
        help="also require the model's block ids for this free order",
    )
    call, whole = float_in(0, 3600, open_low=True), float_in(0, 86_400, open_low=True)
    for flag, kind, default, what in (
        ("--examples", int_in(1, 1_000_000), 100, "Hypothesis examples"),
        ("--steps", int_in(1, 100_000), 40, "calls per manager example"),
        ("--seed", int_in(0, 2**63 - 1), 0, "random seed"),
        ("--call-timeout", call, 10.0, "seconds one call into user code may take"),
        ("--timeout", whole, 600.0, "seconds the whole check may take before it is killed"),
    ):
        p.add_argument(flag, type=kind, default=default, help=f"{what} (default {default:g})")
    return p


def split_target(target: str) -> tuple[str, str]:
    module_name, sep, attr = target.rpartition(":")
    if not (sep and module_name and attr):
        raise LoadError(f"expected MODULE:NAME, got {target!r}")
    return module_name, attr


def load(target: str) -> Loaded:
    """MODULE:NAME -> the object; MODULE is a .py path or an importable module name."""
    module_name, attr = split_target(target)
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = os.path.abspath(module_name)
            if not os.path.isfile(path):
                raise LoadError(f"no such file: {module_name}")
            sys.path.insert(0, os.path.dirname(path))  # its siblings import as in a script
            spec = importlib.util.spec_from_file_location(f"conform_target_{abs(hash(path))}", path)
            if spec is None or spec.loader is None:
                raise LoadError(f"cannot import {module_name}: not a Python source file")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
        obj: object = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except LoadError:
        raise
    except BaseException as exc:  # noqa: BLE001 -- SystemExit in user code is a load error too
        raise LoadError(f"cannot load {target!r}: {type(exc).__name__}: {exc}") from None
    if not callable(obj):
        raise LoadError(f"{target!r} is a {type(obj).__name__}, not callable")
    return obj


class Target:
    """The user's code in a child process; `live(name)` is a callable here that loads `name`
    there, and loads it again in a fresh child after a time limit stopped the last one."""

    def __init__(self, timeout: float):
        jail.become_subreaper()
        self.proc: subprocess.Popen[bytes] | None = None
        self.ch: remote.Channel | None = None
        self.loaded: dict[str, Loaded] = {}
        self.expired = False
        self.timer = threading.Timer(timeout, self.expire)
        self.timer.daemon = True
        self.timer.start()

    def expire(self) -> None:
        self.expired = True
        self.kill()

    def kill(self) -> None:
        if self.proc is not None:
            jail.kill_tree(self.proc.pid, sessions={self.proc.pid})
            self.proc.wait()

    def close(self) -> None:
        self.timer.cancel()
        if self.ch is not None and not self.ch.dead:
            self.ch.kill("closed")
        self.kill()

    def start(self) -> None:
        """A child that has imported the kit and answers (its start-up is never timed)."""
        with _alarm_paused():
            self._start()

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        serve = "import sys; from pagedsim.testing.conform import main; main(sys.argv[1:])"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", serve, CHILD_FLAG, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=jail.dies_with_parent(),  # `conform` stopped from outside takes it along
        )
        theirs.close()
        self.ch = remote.Channel(ours, trusting=False, on_dead=self.kill)
        self.loaded = {}
        remote.ask(self.ch, "load", None, os.getcwd())

    def get(self, target: str, call_timeout: float | None = None) -> Loaded:
        """The object `target` names, loaded in a live child (LoadError if it cannot be): a
        restarted child and its import are not counted in the time limit of the call that
        needs them, but the import has a limit of its own."""
        if self.expired:
            raise Expired()
        if self.ch is None or (self.ch.dead and self.ch.dead.startswith("stopped")):
            self.start()
        assert self.ch is not None and self.proc is not None, "start made a child"
        if target not in self.loaded:
            try:
                with _alarm_paused(), time_limit(call_timeout, f"importing {target}", []):
                    obj = remote.ask(self.ch, "load", target, os.getcwd())
            except remote.ChildDied:
                if self.expired:
                    raise Expired() from None
                raise LoadError(
                    f"cannot load {target!r}: its process ended while importing it "
                    f"(exit status {self.proc.poll()})"
                ) from None
            if not callable(obj):  # the child's load() refuses anything else
                raise LoadError(f"{target!r} did not load as a callable")
            self.loaded[target] = obj
        return self.loaded[target]

    def live(self, target: str, call_timeout: float | None = None) -> Loaded:
        def call(*args: object, **kwargs: object) -> object:
            obj = self.get(target, call_timeout)
            try:
                return obj(*args, **kwargs)
            except remote.ChildDied:
                if self.expired:
                    raise Expired() from None
                raise

        call.__name__ = target.rpartition(":")[2]
        return call


def _child_load(target: str | None, cwd: str) -> Loaded | None:
    os.chdir(cwd)
    return None if target is None else load(target)


@contextlib.contextmanager
def _alarm_paused() -> Iterator[None]:
    """Stop the running SIGALRM timer for the body, then let it run on with the time it had."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    left = signal.setitimer(signal.ITIMER_REAL, 0)[0] if usable else 0
    try:
        yield
    finally:
        if left > 0:
            signal.setitimer(signal.ITIMER_REAL, left)


def run_checks(args: argparse.Namespace) -> int:
    """Here, in the parent: load the target in its child, check it, print, return the exit code."""
    target = Target(args.timeout)
    try:
        try:
            target.start()
            with time_limit(args.call_timeout, f"importing {args.target}", []):
                target.get(args.target)
                if args.attention:
                    target.get(args.attention)
        except (LoadError, Hung) as exc:
            print(f"pagedsim conform: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 2
        factory = target.live(args.target, args.call_timeout)
        fn = target.live(args.attention, args.call_timeout) if args.attention else None
        return _verdict(args, target, factory, fn)
    except Expired:
        return _too_slow(args)
    finally:
        target.close()


def _too_slow(args: argparse.Namespace) -> int:
    print(
        f"pagedsim conform: {args.target} did NOT finish within {args.timeout:g} s and "
        f"was killed (a call that never returns?)"
    )
    return 1


def _verdict(args: argparse.Namespace, target: Target, factory: Loaded, fn: Loaded | None) -> int:
    from .attention import check_attention
    from .run import Summary, check_manager

    examples, seed, call_timeout = args.examples, args.seed, args.call_timeout
    done: list[Summary] = []
    try:
        done.append(
            check_manager(
                factory,
                examples=examples,
                steps=args.steps,
                seed=seed,
                check_free_order=args.check_free_order,
                call_timeout=call_timeout,
            )
        )
        if fn is not None:
            done.append(
                check_attention(fn, examples=examples, seed=seed, call_timeout=call_timeout)
            )
    except (NonConformance, Hung) as exc:
        if target.expired:
            return _too_slow(args)
        what = args.attention if fn is not None and len(done) == 1 else args.target
        print(f"pagedsim conform: {what} does NOT conform.\n\n{exc}")
        return 1
    except Exception:  # noqa: BLE001 -- e.g. Hypothesis's Flaky for a nondeterministic manager
        if target.expired:
            return _too_slow(args)
        traceback.print_exc()
        print(f"pagedsim conform: checking {args.target} failed (traceback above)")
        return 1
    print("pagedsim conform: OK: " + "; ".join(map(str, done)))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == [CHILD_FLAG]:
        remote.serve(int(argv[1]), {"load": _child_load})
        return 0
    args = parser().parse_args(argv)  # bad options exit 2 here, before any child starts
    try:
        for target in filter(None, (args.target, args.attention)):
            split_target(target)
    except LoadError as exc:
        print(f"pagedsim conform: {exc}", file=sys.stderr)
        return 2
    return run_checks(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
