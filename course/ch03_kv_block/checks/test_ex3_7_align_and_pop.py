"""Checks for exercise 3.7: aligned block starts and a concurrent pop (chapter 3.7).

Alignment is checked by its definition on random sizes. The pop kernel is checked in
two ways, and they are not equally strong:

* deterministically, by course.ch03_kv_block.interleaver, which runs the kernel's Python
  body with one simulated thread per request and interleaves their memory accesses
  in a chosen order (round robin, then seeded random orders). A pop that reads top
  and writes top - 1 as two steps hands one block to two threads under round robin,
  every time. An atomic is one step and cannot be split.
* end to end, by launching the kernel (GPU, or Numba's CUDA simulator). This shows
  the kernel runs and pops correctly, but a racy kernel may also pass here: the
  simulator does not interleave threads at every memory access.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle import table
from course.ch03_kv_block.interleaver import Stepper
from course.i18n import say

EXERCISE = "3.7"
pytestmark = pytest.mark.ch3_7


def test_align_up_rounds_up_to_the_next_multiple_of_128(impl):
    """0 -> 0, 1 -> 128, 128 -> 128, 129 -> 256, 8,388,608 stays."""
    for n, want in [(0, 0), (1, 128), (127, 128), (128, 128), (129, 256), (8_388_608, 8_388_608)]:
        got = impl.align_up(n)
        assert got == want, say(
            f"align_up({n}) gave {got}, expected {want}: round up to the next multiple of 128, "
            "and leave a size that is already a multiple alone",
            f"align_up({n}) 得到 {got}，应为 {want}：向上取整到下一个 128 的倍数，已经是倍数的大"
            f"小保持不变",
        )


@settings(max_examples=50, derandomize=True, database=None, deadline=None)
@given(st.integers(0, 10**7), st.sampled_from([1, 2, 32, 64, 128, 256, 4096]))
def test_align_up_is_the_smallest_aligned_size_not_below_n(impl, n, alignment):
    """For any size and power-of-two alignment: a multiple, not smaller, less than one step
    above."""
    got = impl.align_up(n, alignment)
    call = f"align_up({n}, {alignment}) = {got}"
    fixed = [a for a in (128, 256, 64, 32) if a != alignment and got == -(-n // a) * a]
    assert not fixed or got == -(-n // alignment) * alignment, say(
        f"{call}, which is {n} rounded up to {fixed[0] if fixed else 0}, not to {alignment}: "
        "the alignment argument is ignored (a size hard-coded); round to `alignment`",
        f"{call}，这是把 {n} 向上取整到 {fixed[0] if fixed else 0} 的倍数，而不是 {alignment}："
        "忽略了 alignment 参数（尺寸写死了）；应按 `alignment` 取整",
    )
    assert got % alignment == 0, say(
        f"{call} is not a multiple of {alignment}", f"{call} 不是 {alignment} 的倍数"
    )
    assert got >= n, say(
        f"{call} rounds down: the block would overlap the next one",
        f"{call} 向下取整了：这个块会与下一个块重叠",
    )
    assert got - n < alignment, say(
        f"{call} pads by a whole extra step", f"{call} 多补了一整个步长"
    )


def test_every_block_starts_on_a_128_byte_boundary_and_blocks_never_overlap(impl):
    """Blocks of 1,000 bytes start at 0, 1024, 2048, ...: aligned, disjoint, and no more padding
    than needed."""
    starts = list(impl.block_starts(5, 1000))
    assert starts == [0, 1024, 2048, 3072, 4096], say(
        f"block_starts(5, 1000) gave {starts}, expected a stride of 1024 (1000 rounded up to 128)",
        f"block_starts(5, 1000) 得到 {starts}，步长应为 1024（1000 向上取整到 128 的倍数）",
    )


def test_block_starts_at_the_chapters_scale_pass_2_to_the_31(impl):
    """The chapter's pool: 5,120 blocks of 8 MiB (40 GiB). Block 256 starts at 2**31 and the last
    at 42,941,284,352: exact ints, never an int32 that wraps negative."""
    block_bytes = 8 * 2**20
    starts = impl.block_starts(5120, block_bytes)
    for i in (255, 256, 4096, 5119):
        got = int(starts[i])
        assert got == i * block_bytes, say(
            f"block_starts(5120, 8 MiB)[{i}] is {got:,}, expected {i * block_bytes:,}: past "
            "2**31 = 2,147,483,648 bytes a 32-bit integer wraps; compute starts in Python ints "
            "(or int64)",
            f"block_starts(5120, 8 MiB)[{i}] 是 {got:,}，应为 {i * block_bytes:,}：超过 "
            "2**31 = 2,147,483,648 字节时 32 位整数会回绕；用 Python int（或 int64）计算起点",
        )
    big = impl.align_up(5 * 2**31 + 1)
    assert int(big) == 5 * 2**31 + 128, say(
        f"align_up({5 * 2**31 + 1:,}) gave {big:,}, expected {5 * 2**31 + 128:,}: a mask of 32 "
        "bits (& 0xFFFFFF80) or an int32 drops the high bits; use ~(alignment - 1)",
        f"align_up({5 * 2**31 + 1:,}) 得到 {big:,}，应为 {5 * 2**31 + 128:,}：32 位的掩码"
        "（& 0xFFFFFF80）或 int32 会丢掉高位；用 ~(alignment - 1)",
    )


def describe_starts(starts, num_gpu_blocks, block_bytes, alignment):
    """'' when the starts are right, else the first thing wrong with them, in words."""
    stride = -(-block_bytes // alignment) * alignment
    want = [i * stride for i in range(num_gpu_blocks)]
    if starts == want:
        return ""
    call = f"block_starts({num_gpu_blocks}, {block_bytes}, {alignment})"
    if len(starts) != num_gpu_blocks:
        return say(
            f"{call} gave {len(starts)} starts, expected {num_gpu_blocks}",
            f"{call} 给出 {len(starts)} 个起点，应为 {num_gpu_blocks} 个",
        )
    for i in range(1, num_gpu_blocks):
        if starts[i] - starts[i - 1] < block_bytes:
            return say(
                f"{call}: block {i - 1} starts at {starts[i - 1]} and is {block_bytes} "
                f"bytes long, but block {i} starts at {starts[i]}: they overlap by "
                f"{starts[i - 1] + block_bytes - starts[i]} B. Round the block size up once "
                f"to get the stride ({stride}), then start block i at i * stride",
                f"{call}：块 {i - 1} 从 {starts[i - 1]} 开始、长 {block_bytes} 字节，而块 {i} 从 "
                f"{starts[i]} 开始：两者重叠 {starts[i - 1] + block_bytes - starts[i]} 字节。先把块"
                f"大小向上取整一次得到步长（{stride}），再让第 i 块从 i × 步长开始",
            )
    bad = [x for x in starts if x % alignment]
    if bad:
        return say(
            f"{call} gave {starts}: {bad[0]} is not a multiple of {alignment}",
            f"{call} 给出 {starts}：{bad[0]} 不是 {alignment} 的倍数",
        )
    return say(
        f"{call} gave {starts}, expected {want}: every block is {stride} bytes after the "
        f"previous one, no more",
        f"{call} 给出 {starts}，应为 {want}：每个块都比前一个块晚 {stride} 字节，不多不少",
    )


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(st.integers(1, 6000), st.sampled_from([128, 128, 64, 256]), st.integers(2, 6))
def test_block_starts_use_one_rounded_stride_for_any_size(
    impl, block_bytes, alignment, num_gpu_blocks
):
    """For any block size the starts are i * stride, with the stride the size rounded up once."""
    problem = describe_starts(
        list(impl.block_starts(num_gpu_blocks, block_bytes, alignment)),
        num_gpu_blocks,
        block_bytes,
        alignment,
    )
    assert not problem, problem


@pytest.mark.parametrize("block_bytes", [1200, 1000, 128, 129, 8_388_608])
def test_block_starts_with_the_default_alignment_on_several_sizes(impl, block_bytes):
    """1,200-byte blocks: rounding each start instead of the stride makes blocks 1 and 2 overlap."""
    problem = describe_starts(list(impl.block_starts(4, block_bytes)), 4, block_bytes, 128)
    assert not problem, problem


def fresh(num_free=8, num_threads=6, seed=0):
    """(free_stack, top, out, a copy of free_stack): distinct free block ids, out all -2."""
    stack = np.random.default_rng(seed).permutation(40)[:num_free].astype(np.int32)
    return stack, np.array([num_free], np.int32), np.full(num_threads, -2, np.int32), stack.copy()


def stepped(impl, schedule, num_threads, stack, top, out):
    """pop_kernel run by the stepper; returns its log of memory accesses."""
    names = ["free_stack", "top", "out"]
    return Stepper(schedule).run(impl.pop_kernel, num_threads, stack, top, out, names=names)


def race_cause(log) -> str:
    """The bug class the trace shows, in words ('' when it shows none of the known ones)."""
    atomics = {}  # thread -> index in log of its first atomic on top
    for i, (t, what) in enumerate(log):
        if what.startswith("write top"):
            return say(
                f"thread {t} wrote top with a plain store ({what}): reading top and writing "
                "top - 1 are separate steps, so another thread read the same top in between. "
                "Make the update one atomic (old = cuda.atomic.sub(top, 0, 1))",
                f"线程 {t} 用普通写入改了 top（{what}）：读 top 和写 top - 1 是分开的两步，另一个"
                "线程在中间读到了同一个 top。把更新改成一个原子操作"
                "（old = cuda.atomic.sub(top, 0, 1)）",
            )
        if what.startswith("atomic") and " top[" in what:
            atomics.setdefault(t, i)
    for i, (t, what) in enumerate(log):
        if what.startswith("atomic cas top"):
            expected = what.split("expecting ", 1)[1].split(",", 1)[0]
            returned = str(_returned(what))
            retried = any(u == t and w.startswith("atomic cas top") for u, w in log[i + 1 :])
            if expected != returned and not retried:
                return say(
                    f"thread {t}'s compare-and-swap on top failed ({what}: top was {returned}, "
                    f"not the {expected} it read) and the thread never tried again (a CAS without "
                    "retry): loop, re-reading top, until the CAS returns the value you expected",
                    f"线程 {t} 对 top 的比较并交换失败了（{what}：top 是 {returned}，不是它读到的 "
                    f"{expected}），而它没有重试（CAS 没有重试）：循环重读 top，"
                    "直到 CAS 返回你期望的值",
                )
    for t, first in atomics.items():
        later = [w for u, w in log[first + 1 :] if u == t and w.startswith("read top")]
        others = [u for u, w in log[first + 1 :] if u != t and w.startswith("atomic")]
        if later and others:
            return say(
                f"thread {t} did its atomic on top, then read top again ({later[0]}) after other "
                "threads had changed it: the block it takes comes from that second read (a re-read "
                "of top after the atomic). Use the value the atomic returns: old = "
                "cuda.atomic.sub(top, 0, 1), then free_stack[old - 1]",
                f"线程 {t} 对 top 做了原子操作之后又读了一次 top（{later[0]}），而其他线程已经改过"
                "它：它拿的块来自第二次读取（原子操作之后重读 top）。要用原子操作的返回值：old = "
                "cuda.atomic.sub(top, 0, 1)，再取 free_stack[old - 1]",
            )

    # threads whose atomic found the stack empty first (the harm shows at <= 0)
    for t, first in sorted(atomics.items(), key=lambda kv: _returned(log[kv[1]][1]) > 0):
        before = [i for i, (u, w) in enumerate(log[:first]) if u == t and w.startswith("read top")]
        if before and any(u != t and w.startswith("atomic") for u, w in log[before[-1] : first]):
            return say(
                f"thread {t} read top to test it ({log[before[-1]][1]}), then did its atomic; "
                "another thread's atomic came in between, so the test was stale (check-then-act). "
                "Decide from the value the atomic itself returns (old > 0), not from an earlier "
                "read",
                f"线程 {t} 先读 top 做判断（{log[before[-1]][1]}），再做原子操作；中间插进了另一个"
                "线程的原子操作，判断已经过时（先检查后执行）。要根据原子操作本身的返回值判断"
                "（old > 0），而不是之前读到的值",
            )
    for t, first in atomics.items():
        old = _returned(log[first][1])
        took = [w for u, w in log[first + 1 :] if u == t and w.startswith("read free_stack")]
        if old <= 0 and took:
            return say(
                f"thread {t}'s atomic returned top = {old} (the stack was already empty), yet it "
                f"still took a block ({took[0]}): the atomic returns the old top, and the stack "
                "was empty when that old value is 0 or less (test old > 0, not old >= 0)",
                f"线程 {t} 的原子操作返回 top = {old}（栈已经空了），它却还是拿了一个块"
                f"（{took[0]}）：原子操作返回旧的 top，旧值 <= 0 表示栈已空（判断 old > 0，"
                "而不是 old >= 0）",
            )
    return ""


def _returned(what: str) -> int:
    """What an atomic's log line says it returned (1 when it says nothing)."""
    return int(what.rsplit("returned ", 1)[1].split(",", 1)[0]) if "returned " in what else 1


def check_pop(stack, top, out, original, log=None):
    """No block handed out twice or lost; empty-stack threads wrote -1. With the stepper's `log`, a
    failure names the bug class the interleaving shows and prints it."""
    try:
        _check_pop(stack, top, out, original, log)
    except AssertionError as e:
        if not log:
            raise
        cause = race_cause(log)
        message = (cause or str(e).splitlines()[0]) if cause or str(e) else ""
        threads = sorted({t for t, _ in log})[:6]
        err = AssertionError(message)
        title = "the interleaving (each line one memory access, in order):"
        err.calls = table(log, threads, 18, title)  # the runner prints it under the message
        raise err from None


def _check_pop(stack, top, out, original, log=None):
    handed = [int(b) for b in out if b >= 0]
    if -2 in out.tolist():
        i = out.tolist().index(-2)
        raise AssertionError(
            say(
                f"thread {i} never wrote out[{i}] (out is {out.tolist()}, -2 where nobody wrote): "
                "every thread with i < out.shape[0] must pop (or write -1); guard with "
                "out.shape[0], not another array's size",
                f"线程 {i} 没有写 out[{i}]（out 为 {out.tolist()}，-2 表示没人写）："
                "每个 i < out.shape[0] 的线程都必须弹出（或写 -1）；"
                "条件要用 out.shape[0]，而不是别的数组的大小",
            )
        )
    twice = sorted({b for b in handed if handed.count(b) > 1})
    if twice and log is not None and not any(what.startswith("write top") for _, what in log):
        raise AssertionError(
            say(
                f"two threads handed out block {twice[0]} although every update of top was one "
                "atomic step: follow the interleaving below to the second thread's read of it",
                f"每次更新 top 都是一个原子操作，但仍有两个线程拿到了块 {twice[0]}：沿着下面的交错"
                "顺序找到第二个线程读它的地方",
            )
        )
    assert not twice, say(
        f"two threads popped the same block {twice[0]}: reading top and writing top - 1 are "
        f"separate "
        "steps, so another thread read the same top in between; make it one cuda.atomic operation",
        f"两个线程弹出了同一个块 {twice[0]}：读 top 和写 top - 1 是分开的两步，另一个线程在中间读到"
        "了同一个 top；改成一个 cuda.atomic 操作",
    )
    assert set(handed) <= set(original.tolist()), say(
        f"handed out {handed}, not all from the free stack", f"分出的块 {handed} 不全来自空闲栈"
    )
    want = min(len(original), len(out))
    if -1 in out.tolist() and len(original) >= len(out):
        i = out.tolist().index(-1)
        raise AssertionError(
            say(
                f"thread {i} wrote -1 (stack empty), but {len(original)} blocks were free for "
                f"{len(out)} threads (out: {out.tolist()}): the atomic returns the OLD top, so "
                "a thread finds the stack empty only when old <= 0, and its block is "
                "free_stack[old - 1]",
                f"线程 {i} 写了 -1（栈空），但 {len(out)} 个线程面对 {len(original)} 个空闲块"
                f"（out：{out.tolist()}）：原子操作返回的是旧的 top，只有 old <= 0 时栈才算空，"
                "弹出的块是 free_stack[old - 1]",
            )
        )
    top_block = int(original[-1]) if len(original) else None
    assert not (want and top_block not in handed), say(
        f"{len(out)} threads asked and {len(original)} blocks were free, but the block on top, "
        f"free_stack[{len(original) - 1}] = {top_block}, was never handed out (handed out: "
        f"{handed}): the atomic returns the OLD top, so the popped block is free_stack[old - 1], "
        "not free_stack[old]",
        f"{len(out)} 个线程申请、{len(original)} 个块空闲，但栈顶的块 "
        f"free_stack[{len(original) - 1}] = {top_block} 从未分出（分出的是 {handed}）：原子操作返回"
        "的是旧的 top，所以弹出的块是 free_stack[old - 1]，而不是 free_stack[old]",
    )
    assert len(handed) == want, say(
        f"{len(out)} threads asked and {len(original)} blocks were free, but {len(handed)} were "
        f"handed out",
        f"{len(out)} 个线程申请、{len(original)} 个块空闲，却分出了 {len(handed)} 个",
    )
    left = original[: max(int(top[0]), 0)].tolist()
    assert sorted(left + handed) == sorted(original.tolist()), say(
        f"a block was lost: handed out {sorted(handed)}, still free {sorted(left)}, "
        f"but the stack held {sorted(original.tolist())}",
        f"丢了一个块：分出 {sorted(handed)}，仍空闲 {sorted(left)}，但栈里原有 "
        f"{sorted(original.tolist())}",
    )


def test_the_pop_hands_out_distinct_blocks_when_threads_interleave_step_by_step(impl):
    """Round robin over memory accesses (the lost-update order): 6 threads, 8 free blocks."""
    stack, top, out, original = fresh()
    log = stepped(impl, "round_robin", len(out), stack, top, out)
    check_pop(stack, top, out, original, log)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_pop_is_correct_under_random_interleavings(impl, seed):
    """Seeded random orders of memory accesses: 5 threads, 4 free blocks (one thread finds none)."""
    stack, top, out, original = fresh(num_free=4, num_threads=5, seed=seed)
    log = stepped(impl, seed, len(out), stack, top, out)
    check_pop(stack, top, out, original, log)
    assert (out == -1).sum() == 1, say(
        f"with 4 free blocks and 5 threads exactly one should get -1: {out.tolist()}",
        f"4 个空闲块、5 个线程时应恰好有一个线程得到 -1：{out.tolist()}",
    )


def test_a_thread_that_finds_the_stack_empty_writes_minus_one(impl):
    """top = 0: the stack is empty (free_stack still holds an old id); the thread must write -1."""
    stack, top, out = np.array([7, 9], np.int32), np.array([0], np.int32), np.full(1, -2, np.int32)
    stepped(impl, "round_robin", 1, stack, top, out)
    stale = out[0] in (7, 9)
    assert out[0] == -1, say(
        f"with top = 0 (no free block) the thread wrote {out[0]} instead of -1"
        + (
            f": it handed out block {out[0]}, read at free_stack[-1]. The atomic returned the old "
            "top, 0; an old top of 0 or less means empty (test old > 0, not old >= 0)"
            if stale
            else ""
        ),
        f"top = 0（没有空闲块）时线程写了 {out[0]}，而不是 -1"
        + (
            f"：它分出了在 free_stack[-1] 读到的块 {out[0]}。原子操作返回旧的 top，即 0；"
            "旧 top <= 0 表示栈已空（判断 old > 0，而不是 old >= 0）"
            if stale
            else ""
        ),
    )
    assert top[0] <= 0, say(
        f"popping from an empty stack left top at {top[0]}", f"从空栈弹出后 top 停在 {top[0]}"
    )


def test_threads_beyond_the_output_do_nothing(impl):
    """A launch rounds threads up to a block size: 6 threads for 4 requests; threads 4 and 5 must
    not pop."""
    stack, top, out, original = fresh(num_free=8, num_threads=4)
    try:
        stepped(impl, "round_robin", 6, stack, top, out)
    except IndexError as e:
        raise AssertionError(
            say(
                f"with 6 threads and 4 outputs a thread wrote past out ({e}): "
                "guard with i < out.shape[0] (not <=)",
                f"6 个线程、4 个输出时有线程写到了 out 之外（{e}）："
                "用 i < out.shape[0]（不是 <=）做保护",
            )
        ) from None
    assert top[0] == 4, say(
        f"6 threads for 4 outputs left top at {top[0]}, expected 8 - 4 = 4: threads with i >= "
        "out.shape[0] must not pop a block",
        f"6 个线程、4 个输出后 top 停在 {top[0]}，应为 8 - 4 = 4：i >= out.shape[0] 的线程不能弹"
        f"出块",
    )
    check_pop(stack, top, out, original)


@pytest.mark.kernels
def test_the_pop_kernel_launches_and_hands_out_each_block_once(impl, kernels):
    """A real launch (GPU, or the simulator): 24 threads, 16 free blocks."""
    stack, top, out, original = fresh(num_free=16, num_threads=24, seed=9)
    out, after = impl.pop_blocks(stack, 24)
    check_pop(stack, np.array([after]), out, original)


def test_alignment_returns_ints_and_a_pool_of_no_blocks_has_no_starts(impl):
    """align_up returns an int; block_starts returns a list of ints, and [] for 0 blocks."""
    got = impl.align_up(1200)
    assert isinstance(got, (int, np.integer)) and not isinstance(got, bool) and got == 1280, say(
        f"align_up(1200) returned {got!r} of type {type(got).__name__}, expected the int 1280: "
        "use integer arithmetic (no math.ceil of a float division)",
        f"align_up(1200) 返回了类型为 {type(got).__name__} 的 {got!r}，应为整数 1280：用整数运算"
        f"（不要对浮点除法取 math.ceil）",
    )
    starts = impl.block_starts(3, 1200)
    assert list(starts) == [0, 1280, 2560] and all(
        isinstance(s, (int, np.integer)) for s in starts
    ), say(
        f"block_starts(3, 1200) gave {starts!r}, expected the ints [0, 1280, 2560]",
        f"block_starts(3, 1200) 得到 {starts!r}，应为整数 [0, 1280, 2560]",
    )
    empty = impl.block_starts(0, 1200)
    assert list(empty) == [], say(
        f"block_starts(0, 1200) gave {empty!r}; a pool of no blocks has no starts: []",
        f"block_starts(0, 1200) 得到 {empty!r}；没有块的池没有起点：[]",
    )
