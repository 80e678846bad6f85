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
    assert log[0][1] == "write a[0] = 0" and log[3][1] == "read a[0]"
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
