"""Run a CUDA-style Python kernel one memory access at a time, in an order we choose.

Why: a racy kernel usually *passes* on Numba's CUDA simulator (its threads take turns
under Python's GIL at coarse points), and may pass on a GPU on a quiet day. To check
a concurrent pop deterministically, every simulated thread here runs in its own
Python thread, but only one moves at a time: each array read, array write or atomic
operation is one *step*, and a scheduler picks which thread takes the next step.

    round robin   thread 0 step, thread 1 step, ..., thread 0 step, ...: the classic
                  lost update (everyone reads `top` before anyone writes it)
    seed=k        a seeded random choice at each step

An atomic (cuda.atomic.add/sub/exch/max/min/cas/compare_and_swap) is one step, so an
atomic read-modify-write can never be split; a plain `x = a[0]; a[0] = x - 1` is two.
What this checks: the kernel's own logic under chosen interleavings of its memory
operations. What it does not model: warps, memory ordering, caches.
"""

from __future__ import annotations

import random
import threading
import types

import numpy as np


class StepArray:
    """A NumPy array whose element reads and writes are scheduler steps."""

    def __init__(self, sched: Stepper, arr: np.ndarray, name: str):
        self.sched, self.arr, self.name = sched, arr, name
        self.shape, self.size, self.dtype = arr.shape, arr.size, arr.dtype

    def __len__(self):
        return len(self.arr)

    def __getitem__(self, idx):
        self.sched.step(f"read {self.name}[{_index(idx)}]")
        try:
            value = self.arr[idx]
        except IndexError as e:
            raise self._past_the_end("read", idx, e) from None
        self.sched.note(f" -> {_plain(value)}")
        return value

    def __setitem__(self, idx, value):
        self.sched.step(f"write {self.name}[{_index(idx)}] = {_plain(value)}")
        try:
            self.arr[idx] = value
        except IndexError as e:
            raise self._past_the_end("wrote", idx, e) from None

    def _past_the_end(self, verb: str, idx, e: IndexError) -> IndexError:
        """The IndexError with the thread, the array and the index it used, as
        'thread 3 read key[0, 5]: index 5 is out of bounds for axis 1 with size 2'."""
        return IndexError(f"thread {self.sched.local.tid} {verb} {self.name}[{_index(idx)}]: {e}")


def _index(idx):
    return ", ".join(map(str, idx)) if isinstance(idx, tuple) else idx


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _as_dtype(dtype):
    """numba.int32, np.int32 or 'int32' as a NumPy dtype."""
    try:
        return np.dtype(dtype)
    except TypeError:
        return np.dtype(str(dtype))


class _Shared:
    """cuda.shared.array: one array per call site, shared by every thread of the block."""

    def __init__(self, sched: Stepper):
        self._s, self._arrays = sched, {}

    def array(self, shape, dtype):
        import sys

        caller = sys._getframe(1)
        key = (caller.f_code, caller.f_lasti)
        if key not in self._arrays:
            name = f"shared{len(self._arrays)}"
            self._arrays[key] = StepArray(self._s, np.zeros(shape, _as_dtype(dtype)), name)
        return self._arrays[key]


class _Local:
    """cuda.local.array: private to each thread, so its accesses are not scheduler steps."""

    @staticmethod
    def array(shape, dtype):
        return np.zeros(shape, _as_dtype(dtype))


class _Atomic:
    def __init__(self, sched: Stepper):
        self._s = sched

    def _rmw(self, op, ary, idx, new, shown=""):
        self._s.step(f"atomic {op} {ary.name}[{_index(idx)}]{shown}")
        old = ary.arr[idx]
        ary.arr[idx] = new(old)
        self._s.note(f" -> returned {_plain(old)}, now {_plain(ary.arr[idx])}")
        return old

    def add(self, ary, idx, val):
        return self._rmw("add", ary, idx, lambda old: old + val, f" {val}")

    def sub(self, ary, idx, val):
        return self._rmw("sub", ary, idx, lambda old: old - val, f" {val}")

    def exch(self, ary, idx, val):
        return self._rmw("exch", ary, idx, lambda old: val)

    def max(self, ary, idx, val):
        return self._rmw("max", ary, idx, lambda old: max(old, val))

    def min(self, ary, idx, val):
        return self._rmw("min", ary, idx, lambda old: min(old, val))

    def cas(self, ary, idx, expected, val):
        return self._rmw(
            "cas",
            ary,
            idx,
            lambda old: val if old == expected else old,
            f" expecting {_plain(expected)}, new {_plain(val)}",
        )

    def compare_and_swap(self, ary, expected, val):
        return self.cas(ary, 0, expected, val)


class _FakeCuda:
    """The parts of numba.cuda a one-block kernel uses; thread ids come from the stepper."""

    def __init__(self, sched: Stepper, num_threads: int):
        self._s = sched
        self.atomic = _Atomic(sched)
        self.shared, self.local = _Shared(sched), _Local()
        self.blockIdx = types.SimpleNamespace(x=0, y=0, z=0)
        self.blockDim = types.SimpleNamespace(x=num_threads, y=1, z=1)
        self.gridDim = types.SimpleNamespace(x=1, y=1, z=1)

    @property
    def threadIdx(self):
        return types.SimpleNamespace(x=self._s.local.tid, y=0, z=0)

    def grid(self, ndim):
        return self._s.local.tid if ndim == 1 else (self._s.local.tid,) + (0,) * (ndim - 1)

    def syncthreads(self):
        """A barrier: this thread waits until every thread still running has reached one."""
        self._s.barrier()

    def syncwarp(self, mask=0xFFFFFFFF):
        self._s.barrier()  # one block of at most a warp's worth of simulated threads


class Stepper:
    def __init__(self, schedule="round_robin", timeout: float = 10.0):
        self.schedule = schedule  # "round_robin" or an int seed
        self.timeout = timeout
        self.local = threading.local()
        self.log: list[tuple[int, str]] = []  # (thread, memory operation) in execution order

    def step(self, what: str) -> None:
        tid = self.local.tid
        self._back.release()  # "I am about to touch memory": hand control to the scheduler
        if not self._go[tid].acquire(timeout=self.timeout):
            raise TimeoutError("stepper: the scheduler never resumed this thread")
        self.log.append((tid, what))

    def note(self, more: str) -> None:
        """Add what the access found to this thread's last logged step (nothing ran since)."""
        tid, what = self.log[-1]
        self.log[-1] = (tid, what + more)

    def barrier(self) -> None:
        """syncthreads: not scheduled again until every running thread waits here too."""
        self._waiting[self.local.tid] = True
        self.step("syncthreads")

    def run(
        self, kernel, num_threads: int, *arrays: np.ndarray, names=None
    ) -> list[tuple[int, str]]:
        """Run `kernel(*arrays)` as `num_threads` threads of one block; arrays change in place."""
        if getattr(type(kernel), "__pagedsim_remote__", False):  # a submission in its own process
            # (pagedsim/testing/remote.py)
            return kernel._pagedsim_stepper_run(self, num_threads, arrays, names)
        fn = getattr(kernel, "py_func", None) or getattr(kernel, "fn", None) or kernel
        fake = _FakeCuda(self, num_threads)
        func = types.FunctionType(
            fn.__code__,
            {**fn.__globals__, "cuda": fake},
            fn.__name__,
            fn.__defaults__,
            fn.__closure__,
        )
        names = names or [f"arg{i}" for i in range(len(arrays))]
        wrapped = [StepArray(self, a, n) for a, n in zip(arrays, names, strict=False)]
        self._back = threading.Semaphore(0)
        self._go = [threading.Semaphore(0) for _ in range(num_threads)]
        self._waiting = [False] * num_threads
        done, errors = [False] * num_threads, []

        def body(tid):
            self.local.tid = tid
            try:
                func(*wrapped)
            except BaseException as e:  # reported to the caller below
                errors.append(e)
            done[tid] = True
            self._back.release()

        rng = random.Random(self.schedule) if self.schedule != "round_robin" else None
        threads = [
            threading.Thread(target=body, args=(t,), daemon=True) for t in range(num_threads)
        ]
        for t in threads:  # start them one by one; each stops at its first memory access
            t.start()
            self._wait()
        turn = 0
        while not all(done):
            ready = [t for t in range(num_threads) if not done[t] and not self._waiting[t]]
            if not ready:  # every running thread is at the barrier: all pass it
                self._waiting = [False] * num_threads
                ready = [t for t in range(num_threads) if not done[t]]
            if rng is None:
                tid = min((t for t in ready if t >= turn), default=ready[0])
                turn = tid + 1
            else:
                tid = rng.choice(ready)
            self._go[tid].release()
            self._wait()
        if errors:
            raise errors[0]
        return self.log

    def _wait(self):
        if not self._back.acquire(timeout=self.timeout):
            raise TimeoutError(
                "stepper: a kernel thread did not reach its next memory access in time"
            )
