"""The step-by-step scheduler behind check 3.7: it interleaves memory accesses as asked."""

import numpy as np
import pytest

from course.ch03_kv_block.interleaver import Stepper


def two_writes(a, b, out):
    i = cuda.grid(1)  # noqa: F821 - supplied by the stepper
    a[i] = i
    b[i] = a[i] + 1
    out[i] = cuda.atomic.add(b, 0, 0)  # noqa: F821


def lost_update(counter, out):
    i = cuda.grid(1)  # noqa: F821
    seen = counter[0]
    counter[0] = seen + 1
    out[i] = seen


def test_round_robin_gives_each_thread_one_memory_access_in_turn():
    a, b, out = np.zeros(3, np.int64), np.zeros(3, np.int64), np.zeros(3, np.int64)
    log = Stepper("round_robin").run(two_writes, 3, a, b, out, names=["a", "b", "out"])
    assert [tid for tid, _ in log[:6]] == [0, 1, 2, 0, 1, 2]
    assert log[0][1] == "write a[0] = 0" and log[3][1] == "read a[0] -> 0"  # what it read
    assert a.tolist() == [0, 1, 2] and b.tolist()[1:] == [2, 3]


def test_round_robin_loses_an_update_and_a_seeded_order_is_repeatable():
    counter, out = np.zeros(1, np.int64), np.zeros(4, np.int64)
    Stepper("round_robin").run(lost_update, 4, counter, out)
    assert counter[0] == 1 and out.tolist() == [0, 0, 0, 0]  # every thread read 0 before any wrote
    logs = []
    for _ in range(2):
        counter[0] = 0
        logs.append(Stepper(5).run(lost_update, 4, counter, out))
    assert logs[0] == logs[1]


def test_an_exception_in_a_kernel_thread_reaches_the_caller():
    def broken(a):
        a[0] = 1
        raise NotImplementedError("pop_kernel")

    with pytest.raises(NotImplementedError, match="pop_kernel"):
        Stepper().run(broken, 2, np.zeros(1))


def broadcast_through_shared_memory(out):
    tid = cuda.threadIdx.x  # noqa: F821
    box = cuda.shared.array(1, np.int64)  # noqa: F821
    if tid == 0:
        box[0] = 42
    cuda.syncthreads()  # noqa: F821
    out[tid] = box[0]


def test_shared_arrays_are_one_per_block_and_syncthreads_is_a_barrier():
    """Round robin would let threads 1 and 2 read the box before thread 0 fills it; the barrier
    holds them until every thread has arrived."""
    out = np.zeros(3, np.int64)
    log = Stepper("round_robin").run(broadcast_through_shared_memory, 3, out, names=["out"])
    assert out.tolist() == [42, 42, 42]
    first_read = next(i for i, (_, what) in enumerate(log) if what.startswith("read shared0"))
    assert all(what == "syncthreads" for _, what in log[first_read - 3 : first_read]), log


def cas_once(top, out):
    i = cuda.grid(1)  # noqa: F821
    old = top[0]
    out[i] = cuda.atomic.cas(top, 0, old, old - 1)  # noqa: F821


def test_an_atomic_logs_what_it_returned_and_what_it_left():
    top, out = np.array([5], np.int64), np.zeros(2, np.int64)
    log = Stepper("round_robin").run(cas_once, 2, top, out, names=["top", "out"])
    cas = [what for _, what in log if what.startswith("atomic cas")]
    assert cas == [
        "atomic cas top[0] expecting 5, new 4 -> returned 5, now 4",
        "atomic cas top[0] expecting 5, new 4 -> returned 4, now 4",
    ], cas
