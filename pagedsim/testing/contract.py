"""The manager contract the kit drives, and how it talks to a manager it has never seen.

Any object built by `factory(num_gpu_blocks, block_size)` with these names can be checked
(those of pagedsim's `KVCacheManager`, which follows vLLM v0's BlockSpaceManager: fork
shares blocks, appending into a shared partly filled last block copies it first):

    add_sequence(seq_id, num_tokens)   admit a prompt of num_tokens tokens
    append_tokens(seq_id, n)           grow a sequence by n tokens
    fork(parent_id, child_id)          the child shares every block of the parent
    free_sequence(seq_id)              release the sequence's blocks
    block_table(seq_id)                a sequence of ints: logical block i -> physical id
    num_free_blocks                    an int attribute, or a zero-argument method
    drain_copies()                     optional: the (src, dst) copy-on-write pairs since
                                       the last call; without it, a written block that
                                       moves is taken to have been copied

Running out of blocks raises `pagedsim.OutOfBlocks` or `MemoryError`; return values of
the four operations are ignored.
"""

from __future__ import annotations

import functools
import operator
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType
from typing import Any, NoReturn, SupportsIndex, cast

from ..errors import OutOfBlocks
from .messages import render

RAN_OUT = (OutOfBlocks, MemoryError)  # the two ways to say "no free blocks"
NEEDED = "add_sequence append_tokens fork free_sequence block_table num_free_blocks".split()


class NonConformance(AssertionError):
    """The checked code disagrees with the model; the message ends with a paste-able script."""


class Hung(BaseException):
    """A call did not return in time. A BaseException, so Hypothesis stops at once
    instead of shrinking (each shrink step would wait for the time limit again);
    `hangs.shrink_hang` shrinks its script instead."""

    def __init__(self, message: str, script: list[str]):
        super().__init__(message)
        self.script = script  # the calls, the hanging one last


@contextmanager
def alarm(seconds: float | None, make_error: Callable[[], BaseException]) -> Iterator[None]:
    """Raise `make_error()` in the body if it runs longer than `seconds` (SIGALRM).

    A no-op where a timer cannot interrupt: off POSIX, outside the main thread, or
    seconds falsy. The course's checks share this (course/impl.py)."""
    usable = (
        seconds
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if seconds is None or not usable:
        yield
        return

    def on_alarm(signum: int, frame: FrameType | None) -> NoReturn:
        raise make_error()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def hung(what: str, seconds: float, script: list[str]) -> Hung:
    """The `Hung` of a call `what` that ran past `seconds`, the script ending in it."""
    problem = f"{what} did not return within {seconds:g} s (an infinite loop?)"
    return Hung(render(problem, script, "# <- hangs here"), list(script))


def time_limit(seconds: float | None, what: str, script: list[str]) -> AbstractContextManager[None]:
    """Raise `Hung` if the body runs longer than `seconds` (POSIX main thread only)."""
    return alarm(seconds, functools.partial(hung, what, seconds or 0, script))


class Managed:
    """A user's manager seen through the contract; every call is logged as Python."""

    def __init__(self, script: list[str], call_timeout: float | None = None) -> None:
        self.script = script  # the calls so far, as lines of Python
        self.call_timeout = call_timeout  # seconds per call, or None
        self.obj: Any = None  # the user's manager: duck-typed, each answer checked here
        self.broken = False  # a check failed or a call hung: nothing more may be called

    def fail(self, problem: str) -> NoReturn:
        self.broken = True
        raise NonConformance(render(problem, self.script))

    def call(
        self, text: str, fn: Callable[..., Any], *args: object, log: bool = True
    ) -> tuple[str, Any]:
        """Run fn(*args). Returns ("ok", value), ("ran_out", exc) or ("error", exc); value is
        the user's answer, duck-typed like `obj` (each caller checks it)."""
        if log:
            self.script.append(text)
        try:
            with time_limit(self.call_timeout, text, self.script):
                return "ok", fn(*args)
        except Hung:
            self.broken = True
            raise
        except RAN_OUT as exc:
            return "ran_out", exc
        except Exception as exc:  # noqa: BLE001 -- the caller decides whether it is expected
            return "error", exc

    def build(
        self, factory: Callable[[int, int], object], num_gpu_blocks: int, block_size: int
    ) -> None:
        text = f"factory({num_gpu_blocks}, {block_size})"
        self.script.append(f"m = {text}")
        outcome, value = self.call(text, factory, num_gpu_blocks, block_size, log=False)
        if outcome != "ok":
            self.fail(f"{text} raised {describe(value)}")
        for name in NEEDED:
            if not hasattr(value, name):
                self.fail(
                    f"{text} returned {type_name(value)}, which has no `{name}` "
                    f"(see pagedsim.testing.contract for the names the kit needs)"
                )
        self.obj = value

    def query(self, text: str, fn: Callable[..., Any], *args: object) -> Any:
        """A read-only call (block_table, num_free_blocks): it must not fail."""
        outcome, value = self.call(text, fn, *args, log=False)
        if outcome != "ok":
            self.fail(f"{text} raised {describe(value)}")
        return value

    def num_free(self) -> int:
        # read under the time limit too: it may be a property
        value = self.query("m.num_free_blocks", getattr, self.obj, "num_free_blocks")
        if callable(value):
            value = self.query("m.num_free_blocks()", value)
        try:
            return operator.index(cast(SupportsIndex, value))  # TypeError if it is not one
        except TypeError:
            self.fail(
                f"m.num_free_blocks is {value!r}: expected an int (or a method returning one)"
            )

    def table(self, seq: object) -> list[int]:
        raw = self.query(f"m.block_table({seq!r})", self.obj.block_table, seq)
        try:
            return [operator.index(b) for b in raw]
        except TypeError:
            self.fail(f"m.block_table({seq!r}) returned {raw!r}: expected a sequence of ints")

    def drain(self) -> list[tuple[int, int]]:
        drain = getattr(self.obj, "drain_copies", None)
        if drain is None:
            return []
        pairs = self.query("m.drain_copies()", drain)
        try:
            return [(operator.index(s), operator.index(d)) for s, d in pairs]
        except (TypeError, ValueError):
            self.fail(f"m.drain_copies() returned {pairs!r}: expected (src, dst) int pairs")


def type_name(value: object) -> str:
    """The name of `value`'s class; for an object in the target's process (conform runs the
    target there, pagedsim/testing/remote.py), the name it has there."""
    if getattr(type(value), "__pagedsim_remote__", False):
        name: str = object.__getattribute__(value, "_name")
        return name
    return type(value).__name__


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
