"""Every interleaving of a concurrent pop from a free stack of block ids, enumerated.

Chapter 3.7 says the pool needs atomics when many GPU threads take blocks at once. This
shows why without a GPU: each thread's pop is split into its memory steps, and every order
in which they can interleave is walked.

- ``racy``: ``t = top``; ``b = stack[t-1]``; ``top = t-1``.
- ``cas``: ``t = top``; loop ``b = stack[t-1]``; ``old = CAS(top, t, t-1)``; done if
  ``old == t``, else ``t = old`` (the loop in `cuda_kernels.alloc.kernels`).
- ``atomic_add``: ``t = atomic_add(top, -1)`` (the old value); ``b = stack[t-1]``.

A schedule is bad when two threads return the same block, or ``top`` does not end
``threads`` lower than it started. Only pops run: with concurrent pushes an index-based CAS
stack has the ABA problem, which is why `cuda_kernels.alloc` frees in a separate launch.
Reference: Herlihy & Shavit, "The Art of Multiprocessor Programming", ch. 5.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import choice_arg, count_arg

IMPLS = ("racy", "cas", "atomic_add")
STEPS_PER_POP = {"racy": 3, "atomic_add": 2}  # fixed-length pops only; CAS can retry
DONE = -1  # program counter of a finished thread


@dataclass(frozen=True)
class Step:
    """One memory step of one thread, as it happened in a schedule."""

    thread: int  # which thread moved
    op: str  # "read", "write", "cas ok", "cas fail" or "atomic_add"
    addr: str  # "top" or "stack[i]"
    value: int  # the value read, or the value written
    note: str = ""  # the register it set, e.g. "t=3" or "b=12"


@dataclass(frozen=True)
class Outcome:
    """One complete schedule and what it produced."""

    steps: tuple[Step, ...]  # every step, in execution order
    blocks: tuple[int, ...]  # the block each thread returned, by thread
    final_top: int  # top after every thread finished
    start_top: int  # top before any thread moved

    @property
    def duplicates(self) -> tuple[int, ...]:
        """Blocks returned to more than one thread."""
        return tuple(sorted({b for b in self.blocks if self.blocks.count(b) > 1}))

    @property
    def top_drift(self) -> int:
        """How far top is from start_top - threads (0 when the pool is consistent)."""
        return self.final_top - (self.start_top - len(self.blocks))

    @property
    def bad(self) -> bool:
        return bool(self.duplicates) or self.top_drift != 0


def _advance(
    impl: str, pc: int, regs: tuple[int, int], top: int, stack: tuple[int, ...], tid: int
) -> tuple[int, tuple[int, int], int, Step]:
    """Run one step of thread `tid`; return (pc, regs, top, Step)."""
    t, b = regs
    if pc == 0 and impl == "atomic_add":
        return 1, (top, b), top - 1, Step(tid, "atomic_add", "top", top - 1, f"t={top}")
    if pc == 0:
        return 1, (top, b), top, Step(tid, "read", "top", top, f"t={top}")
    if pc == 1:
        b = stack[t - 1]
        nxt = DONE if impl == "atomic_add" else 2
        return nxt, (t, b), top, Step(tid, "read", f"stack[{t - 1}]", b, f"b={b}")
    if impl == "racy":
        return DONE, (t, b), t - 1, Step(tid, "write", "top", t - 1)
    if top == t:  # CAS(top, t, t-1) succeeds
        return DONE, (t, b), t - 1, Step(tid, "cas ok", "top", t - 1, f"expected {t}")
    return 1, (top, b), top, Step(tid, "cas fail", "top", top, f"expected {t}, t={top}")


def explore(impl: str, threads: int, stack: tuple[int, ...] | None = None) -> Iterator[Outcome]:
    """Yield an Outcome for every interleaving of `threads` concurrent pops from `stack`
    (free block ids, bottom first; at least `threads` of them)."""
    choice_arg("impl", impl, IMPLS)
    threads = count_arg("threads (the walk grows factorially)", threads, 1, 4)
    stack = (
        tuple(range(10, 10 + threads + 1))
        if stack is None
        else tuple(count_arg("stack entry", b, None) for b in stack)
    )
    if len(stack) < threads:
        raise ValueError(f"stack needs at least {threads} ids, got {len(stack)}")

    def walk(
        pcs: tuple[int, ...], regs: tuple[tuple[int, int], ...], top: int, steps: list[Step]
    ) -> Iterator[Outcome]:
        live = [i for i, pc in enumerate(pcs) if pc != DONE]
        if not live:
            yield Outcome(tuple(steps), tuple(r[1] for r in regs), top, len(stack))
            return
        for i in live:
            pc, r, new_top, step = _advance(impl, pcs[i], regs[i], top, stack, i)
            steps.append(step)
            yield from walk(
                pcs[:i] + (pc,) + pcs[i + 1 :], regs[:i] + (r,) + regs[i + 1 :], new_top, steps
            )
            steps.pop()

    yield from walk((0,) * threads, ((0, -1),) * threads, len(stack), [])


def multinomial(threads: int, steps: int) -> int:
    """Interleavings of `threads` straight-line programs of `steps` steps each."""
    per_thread: int = math.factorial(steps) ** threads  # int ** int is typed Any
    return math.factorial(threads * steps) // per_thread


@dataclass(frozen=True)
class Summary:
    impl: str
    threads: int
    total: int  # schedules walked
    bad: int  # schedules that hand out a block twice or leave top inconsistent
    duplicated: int  # schedules that hand one block to two threads
    first_bad: Outcome | None  # the first bad schedule found, in walk order


def summarize(impl: str, threads: int, stack: tuple[int, ...] | None = None) -> Summary:
    total = bad = duplicated = 0
    first = None
    for out in explore(impl, threads, stack):
        total += 1
        if out.bad:
            bad += 1
            duplicated += bool(out.duplicates)
            first = first or out
    return Summary(impl, threads, total, bad, duplicated, first)


def format_schedule(out: Outcome) -> str:
    """A table: one row per step, one column per thread."""
    n = len(out.blocks)
    width = 26
    head = " #  | " + " | ".join(f"thread {i}".ljust(width) for i in range(n)) + " | top after"
    lines = [head, "-" * len(head)]
    top = out.start_top
    for k, s in enumerate(out.steps):
        if s.addr == "top" and s.op != "read" and s.op != "cas fail":
            top = s.value
        text = f"{s.op} {s.addr}={s.value}" + (f" ({s.note})" if s.note else "")
        cells = [text.ljust(width) if i == s.thread else " " * width for i in range(n)]
        lines.append(f"{k:>3} | " + " | ".join(cells) + f" | {top}")
    got = ", ".join(f"thread {i} got block {b}" for i, b in enumerate(out.blocks))
    lines.append(
        f"result: {got}; top {out.start_top} -> {out.final_top} (expected {out.start_top - n})"
    )
    if out.duplicates:
        lines.append(f"BAD: block(s) {list(out.duplicates)} handed to more than one thread")
    elif out.top_drift:
        lines.append(f"BAD: top is off by {out.top_drift}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from ..io.args import ArgParser, int_in

    p = ArgParser(prog="pagedsim race", description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, choices=(2, 3), default=2)
    p.add_argument("--impl", choices=IMPLS, default="racy")
    p.add_argument(
        "--show", type=int_in(0, 10**6), default=1, help="print this many bad schedules (default 1)"
    )
    args = p.parse_args(argv)
    s = summarize(args.impl, args.threads)
    print(
        f"{args.impl} pop, {args.threads} threads, "
        f"free stack {list(range(10, 11 + args.threads))} (top at the end)"
    )
    line = f"interleavings walked: {s.total}"
    if args.impl in STEPS_PER_POP:
        k = STEPS_PER_POP[args.impl]
        line += (
            f" (= ({args.threads}*{k})! / ({k}!)^{args.threads} = {multinomial(args.threads, k)})"
        )
    print(line)
    print(f"bad: {s.bad} ({s.duplicated} hand one block to two threads)")
    if s.bad == 0:
        print("every interleaving hands each thread a distinct block and top ends consistent.")
    for out in [out for out in explore(args.impl, args.threads) if out.bad][: args.show]:
        print()
        print(format_schedule(out))
    return 0
