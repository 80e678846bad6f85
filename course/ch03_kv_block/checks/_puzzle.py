"""The kernel puzzles' harness (exercises 3.k1 ... 3.k6, GPU-Puzzles' form).

A puzzle kernel runs as one block of simulated threads under the interleaver's Stepper
(round robin over memory accesses), so every read and write is logged by thread; its output
is compared with the NumPy spec. On a mismatch the message names the first wrong element and
prints a table of what the threads that wrote it (and the thread that should have) read and
wrote, in order. The real launch under Numba's CUDA simulator is a separate check.
"""

from __future__ import annotations

import re

import numpy as np

from course.ch03_kv_block.interleaver import Stepper
from course.i18n import say

POISON = -7777.0  # what the output holds before the kernel runs: a slot nobody wrote shows it


def run_threads(kernel, num_threads, arrays: dict):
    """Run `kernel(*arrays.values())` as `num_threads` threads of one block; returns the log."""
    names = list(arrays)
    return Stepper("round_robin").run(kernel, num_threads, *arrays.values(), names=names)


def writers(log, name, index, shape) -> list[int]:
    """Threads that wrote `name[index]`, by a write or an atomic (a negative index counts from the
    end, as NumPy's does: k_cache[-1, 0] is k_cache[num_slots - 1, 0]). A thread that only read
    it is not one: 3.k5's cache is read and written."""
    pattern = re.compile(rf"\b{re.escape(name)}\[(-?\d+(?:, -?\d+)*)\]")
    found = set()
    for t, what in log:
        if what.startswith("read "):
            continue
        for m in pattern.finditer(what):
            at = tuple(int(x) for x in m.group(1).split(", "))
            if len(at) != len(shape):
                continue
            if tuple(a % n for a, n in zip(at, shape, strict=True)) == index:
                found.add(t)
    return sorted(found)


def table(log, threads, limit=14, title="which thread read or wrote which slot, in order:") -> str:
    """What each of `threads` did, in order, one memory access a line."""
    lines = [f"        thread {t}: {what}" for t, what in log if t in threads]
    if len(lines) > limit:
        lines = lines[:limit] + [f"        ... ({len(lines) - limit} more)"]
    return "\n".join([title, *lines])


def _instead(log, thread, name: str) -> str:
    """What `thread` wrote to `name` instead of its element, or that it wrote none of it."""
    if thread is None:
        return ""
    writes = [w.split(" = ")[0][len("write ") :] for t, w in log if t == thread]
    writes = [w for w in writes if w.startswith(f"{name}[")]
    if writes:
        return say(
            f"Thread {thread} wrote {', '.join(writes[:3])} instead: its index is computed "
            "from the wrong size or the wrong split of cuda.threadIdx.x.",
            f"线程 {thread} 写的是 {', '.join(writes[:3])}：它的下标用错了尺寸，"
            "或者 cuda.threadIdx.x 拆分错了。",
        )
    return say(
        f"Thread {thread} wrote nothing to {name}: its guard stopped it, or its index split of "
        "cuda.threadIdx.x gave it an element out of range.",
        f"线程 {thread} 没有写 {name}：它被条件挡住了，或者它对 cuda.threadIdx.x 的拆分"
        "得到了越界的元素。",
    )


def first_wrong(got, want, name: str, atol: float, rtol: float):
    """(index, "name[i, j]", its value as shown, how many are wrong) for the first element of
    `got` that differs from `want`, or None when none does."""
    bad = ~np.isclose(got, want, atol=atol, rtol=rtol, equal_nan=True)
    if not bad.any():
        return None
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    shown = f"{got[index]:.6g}" if got[index] != POISON else say("never written", "从未被写")
    return index, f"{name}[{', '.join(map(str, index))}]", shown, int(bad.sum())


def compare(log, got, want, *, out_name: str, owner, what: str, atol=1e-6):
    """Raise an AssertionError naming the first wrong element of `got` and the threads around it.

    owner(index) -> the thread that should write `index` (the puzzle's thread layout)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    wrong = first_wrong(got, want, out_name, atol, 1e-6)
    if wrong is None:
        return
    index, at, shown, num_bad = wrong
    wrote = writers(log, out_name, index, got.shape)
    should = owner(index)
    never = not wrote  # (not `got == POISON`: an output the spec leaves alone is not poisoned)
    if never:
        why = say(
            f"nobody wrote it (thread {should} should have). {_instead(log, should, out_name)}",
            f"没有线程写它（应由线程 {should} 写）。{_instead(log, should, out_name)}",
        )
    elif wrote == [should]:
        why = say(
            f"thread {should} wrote it, as it should, but with the wrong value.",
            f"线程 {should} 按要求写了它，但值不对。",
        )
    else:
        who = ", ".join(map(str, wrote))
        why = say(
            f"thread{'s' if len(wrote) > 1 else ''} {who} wrote it; "
            + (f"thread {should} should have." if should is not None else "no thread should have."),
            f"线程 {who} 写了它；"
            + (f"应由线程 {should} 写。" if should is not None else "不应有线程写它。"),
        )
    err = AssertionError(
        say(
            f"{what}: {at} is {shown}, the spec says {want[index]:.6g} "
            f"({num_bad} element(s) wrong): {why}",
            f"{what}：{at} 是 {shown}，规范给出 {want[index]:.6g}（{num_bad} 个元素不对）：{why}",
        )
    )
    err.calls = table(log, sorted(set(wrote) | ({should} if should is not None else set())))
    raise err
