"""The two checks every kernel puzzle has, written once.

- `check_spec`: small cases under the stepper (one simulated thread at a time, every memory
  access logged), so a wrong element comes with the table of which thread touched it. It
  begins with the puzzle's `examples` (the hazards its stub warns about), then draws cases
  from a seed of the puzzle's own.
- `check_launches`: real launches (a GPU, or Numba's CUDA simulator) on cases drawn by
  Hypothesis over everything the stub's spec allows (sizes, garbage in unused entries, huge
  logits, lengths on block edges).

Each puzzle's check file describes itself in a `Puzzle`; its `build(Case(...))` is
deterministic, so a failing case reruns from one pasted line. Both checks refuse a kernel
that changes one of its inputs.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import math
import re
import sys
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle import POISON, compare, first_wrong, run_threads
from course.i18n import say

# no shrinking: the message names the case and the threads, which says more than a smaller one
_COMMON = dict(
    database=None,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=list(HealthCheck),
)
STEPPED = settings(max_examples=16, **_COMMON)  # one Python thread per access; seeded per puzzle
LAUNCHED = settings(max_examples=12, **_COMMON)  # random: a new draw on every run (not in CI)
STEP_REPLAY = 64  # a failed launch of at most this many threads is replayed under the stepper


@dataclass(frozen=True)
class Puzzle:
    """What one puzzle's check file tells the harness."""

    module: str  # the check file's module, for the paste-able rerun line
    kernel: str  # the kernel's name in the student's file
    build: Callable[..., dict]  # Case -> the arrays, in the kernel's argument order
    spec: Callable[..., dict]  # the NumPy spec: arrays -> {output name: expected}
    outputs: tuple[str, ...]  # which arrays the kernel writes
    threads: Callable[[dict], int]  # arrays -> the number of threads the case needs
    owner: Callable[[str, tuple, dict], int | None]  # (output, index, arrays) -> its thread
    numerics: str = ""  # what to say when a value overflows (exp) or a sum underflows to 0
    # what to say when an output is NaN only because the kernel read a slot the case leaves
    # unused (`build(..., fill=nan)` fills them; the probe rebuilds with fill=0.0)
    unused_read: str = ""
    bounds: str = ""  # what to add to an IndexError (which entries hold garbage)
    unwritten: str = ""  # what to add when an element the spec defines was never written
    # what each axis of each array is, for an IndexError: {"key": ("T (tokens)", "D (head_dim)")}
    axes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # known mistakes as specs of their own: (the cause in the student's terms, arrays -> the
    # outputs that mistake writes). When a kernel's outputs equal one of them, its cause leads.
    mistakes: tuple[tuple[str, Callable[..., dict]], ...] = ()
    # the cases the stepped check runs first, on every run (@example): the hazards the stub
    # warns about (overflow-sized logits, a last partial block, ...), never left to the draw
    examples: tuple[tuple, ...] = ()


def mistake(en: str, zh: str, spec: Callable[..., dict]) -> tuple[str, Callable[..., dict]]:
    """One of Puzzle.mistakes: the cause in the student's words, and the spec that mistake is."""
    return say(en, zh), spec


def paged_table(rng: np.random.Generator, L: int, B: int, spare_blocks: int, spare_entries: int):
    """(num_blocks, block table) for L tokens in blocks of B: the blocks in random order, then
    `spare_entries` garbage entries (ids past the cache's end), as in a padded batch's row."""
    used = -(-L // B)
    N = used + spare_blocks
    blocks = rng.permutation(N)[:used]
    garbage = N + 1000 + rng.integers(0, 10**6, spare_entries)
    return N, np.concatenate([blocks, garbage]).astype(np.int64)


def on_block_edge(draw, L: int, B: int) -> int:
    """L, or a length on the block edge below it, +-1: where an off-by-one shows."""
    edge = [x for x in (L - L % B, L - L % B + 1, L - L % B - 1) if 1 <= x <= L]
    return draw(st.sampled_from([L, *edge]))


def rerun(p: Puzzle, case: tuple) -> str:
    """The line that rebuilds `case` (a puzzle's Case NamedTuple, whose repr names every field)."""
    return f"from {p.module} import {type(case).__name__}, build; arrays = build({case!r})"


def _inputs_unchanged(p: Puzzle, before: dict, arrays: dict, where: str) -> None:
    for name, old in before.items():
        if name in p.outputs:
            continue
        new = np.asarray(arrays[name])
        same = old == new
        if old.dtype.kind == "f":
            same |= np.isnan(old) & np.isnan(new)
        if not np.all(same):
            at = tuple(int(i) for i in np.argwhere(~same)[0])
            raise AssertionError(
                say(
                    f"{where}: your kernel modified its input {name}: {name}{list(at)} was "
                    f"{old[at]:.6g} and is now {new[at]:.6g}. Inputs are read-only; keep "
                    "intermediate values in local variables",
                    f"{where}：你的 kernel 修改了输入 {name}：{name}{list(at)} 原为 {old[at]:.6g}，"
                    f"现为 {new[at]:.6g}。输入是只读的；中间值请放在局部变量里",
                )
            )


def _exception_cause(p: Puzzle, e: BaseException, needed: int = 0) -> str | None:
    """The student-terms cause of an exception a launch raised, or None to let it through."""
    thread = re.match(r"tid=\[(\d+)", str(e))
    who = (
        say(f"thread {thread.group(1)}", f"线程 {thread.group(1)}")
        if thread
        else say("a thread", "某个线程")
    )
    text = re.sub(r"^tid=\[[^\]]*\] ctaid=\[[^\]]*\]: ", "", str(e))
    if isinstance(e, OverflowError):
        return say(
            f"the value overflowed: {who} called math.exp on an argument above 709 (on a GPU "
            f"the result is inf, then NaN). {p.numerics}",
            f"数值溢出：{who} 对大于 709 的参数调用了 math.exp（在 GPU 上结果是 inf，随后是 NaN）。"
            f"{p.numerics}",
        )
    if isinstance(e, ZeroDivisionError):
        return say(
            f"{who} divided by zero: a sum of exps was 0 because every exp underflowed (on a GPU: "
            f"NaN). {p.numerics}",
            f"{who} 除以零：所有 exp 都下溢，指数和为 0（在 GPU 上是 NaN）。{p.numerics}",
        )
    if isinstance(e, IndexError) and (named := _past_the_end(p, str(e), needed)):
        return named
    if isinstance(e, IndexError):
        return say(
            f"{who} indexed past the end of an array (IndexError: {text}): an extra thread is "
            f"not stopped by a guard, or an index is computed from the wrong size. {p.bounds}",
            f"{who} 越界访问了数组（IndexError：{text}）：多余的线程没有被条件挡住，"
            f"或下标用错了尺寸。{p.bounds}",
        )
    return None


_PAST = re.compile(
    r"thread (\d+) (read|wrote) (\w+)\[([^\]]*)\]: index (-?\d+) is out of bounds for axis "
    r"(\d+) with size (\d+)"
)


def _past_the_end(p: Puzzle, text: str, needed: int = 0) -> str | None:
    """'thread 3 read k_cache[5, 0, 1] past the end: axis 0 of k_cache (num_blocks) has size 4'
    from the stepper's IndexError, or None when the text is not one of its."""
    m = _PAST.search(text)
    if not m:
        return None
    tid, verb, name, where, index, axis, size = m.groups()
    labels = p.axes.get(name, ())
    label = f" ({labels[int(axis)]})" if int(axis) < len(labels) else ""
    verb_zh = "读" if verb == "read" else "写"
    # the table's garbage entries land on axis 0 of an input (a block id past the cache's end)
    extra = needed and int(tid) >= needed
    bounds = p.bounds if axis == "0" and name not in p.outputs and not extra else ""
    why = (
        say(
            f"Thread {tid} is an extra thread (this case needs {needed}): nothing stopped it. "
            "Guard with the size of the array the thread writes, not another size.",
            f"线程 {tid} 是多余的线程（这个用例只需要 {needed} 个）：没有条件挡住它。"
            "要用线程所写数组的大小作条件，而不是别的尺寸。",
        )
        if extra
        else say(
            "That index is computed from the wrong size or the wrong axis, or an extra thread "
            "is not stopped by a guard.",
            "这个下标用错了尺寸或维度，或者多余的线程没有被条件挡住。",
        )
    )
    return say(
        f"thread {tid} {verb} {name}[{where}] and indexed past the end (IndexError): axis {axis} "
        f"of {name}{label} has size {size}, so index {index} is out of range. {why} {bounds}",
        f"线程 {tid} {verb_zh}了 {name}[{where}]，越界（IndexError）：{name} 的第 {axis} 维"
        f"{label}大小为 {size}，下标 {index} 超出范围。{why}{bounds}",
    )


_SIZES = {2**k for k in range(2, 13)}  # 4 ... 4096: what a hard-coded block or head size is


def _hard_coded(p: Puzzle) -> str:
    """'your kernel hard-codes 64 (line 12: `D = 64`)...' when the kernel's source holds a
    power-of-two int literal from 4 to 4096, else ''. The file is read as text, never run."""
    from course.impl import impl_path

    try:
        path = impl_path(sys.modules[p.module].EXERCISE)
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (AttributeError, KeyError, OSError, SyntaxError, ValueError):
        return ""
    lines = text.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == p.kernel:
            for c in ast.walk(node):
                if isinstance(c, ast.Constant) and type(c.value) is int and c.value in _SIZES:
                    line = lines[c.lineno - 1].strip()
                    return say(
                        f"your kernel hard-codes the size {c.value} (line {c.lineno}: `{line}`), "
                        "but the cases use many sizes: read every size from an array's shape "
                        "(x.shape[0], x.shape[1], ...).",
                        f"你的 kernel 把尺寸写死为 {c.value}（第 {c.lineno} 行：`{line}`），"
                        "但用例的尺寸各不相同：每个尺寸都要从数组的 shape 读取"
                        "（x.shape[0]、x.shape[1] ……）。",
                    )
    return ""


def _known_mistake(p: Puzzle, case: tuple, arrays: dict) -> str:
    """The cause of the first of p.mistakes whose outputs the kernel wrote, or ''."""
    for cause, mistake in p.mistakes:
        fresh = p.build(case)
        want = p.spec(**{k: np.array(v, copy=True) for k, v in fresh.items()})
        try:
            with np.errstate(all="ignore"):  # a mistake's own overflow is its business
                alt = mistake(**{k: np.array(v, copy=True) for k, v in fresh.items()})
        except (IndexError, ValueError, FloatingPointError, ZeroDivisionError):
            continue  # that mistake cannot even run on this case: not the one made
        if all(
            np.allclose(
                np.asarray(arrays[o], np.float64),
                np.asarray(alt.get(o, want[o]), np.float64),
                atol=1e-5,
                rtol=1e-5,
                equal_nan=True,
            )
            for o in p.outputs
        ):
            return cause
    return ""


def _accumulated_onto_garbage(got: np.ndarray, want: np.ndarray) -> str:
    """Every wrong element is the spec's value plus the buffer's initial POISON: a += onto an
    output that was never set to 0."""
    bad = ~np.isclose(got, want, atol=1e-6, rtol=1e-6, equal_nan=True)
    added = bad & (got != POISON)  # (an element still equal to POISON was never written)
    if added.any() and np.allclose(got[bad] - want[bad], POISON, rtol=1e-6, atol=1e-3):
        return say(
            f"the output is the spec's value plus {POISON:g}, what the buffer held before your "
            "kernel ran (garbage on a GPU): set each output element to 0 before adding to it "
            "with +=.",
            f"输出等于规范值加上 {POISON:g}，即内核运行前缓冲区里的内容（在 GPU 上是垃圾值）："
            "用 += 累加之前先把每个输出元素置为 0。",
        )
    return ""


def _lead(err: AssertionError, cause: str) -> AssertionError:
    """Put `cause` (what the code did wrong) first in the message, once."""
    if cause and not str(err).startswith(cause):
        err.args = (f"{cause} {err}",)
    return err


def _nonfinite_cause(p: Puzzle, impl, case: tuple, got: np.ndarray, want: np.ndarray) -> str:
    """Why an output is NaN or inf where the spec is finite: the kernel read a slot the case
    leaves unused (it is finite once those hold 0.0), or a value overflowed."""
    if not (~np.isfinite(got) & np.isfinite(want)).any():
        return ""
    if p.unused_read:
        arrays = p.build(case, fill=0.0)
        try:
            getattr(impl, p.kernel)[1, p.threads(arrays)](*arrays.values())
            if all(np.isfinite(np.asarray(arrays[o], np.float64)).all() for o in p.outputs):
                return " " + p.unused_read
        except Exception:  # the probe itself failed: fall back to the numerics
            pass
    return " " + p.numerics if p.numerics else ""


def _with_hints(
    p: Puzzle, impl, case: tuple, err: AssertionError, got, want, arrays: dict | None = None
) -> AssertionError:
    text = str(err)
    if p.unwritten and ("nobody wrote it" in text or "never written" in text):
        text += " " + p.unwritten
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    text += _nonfinite_cause(p, impl, case, got, want)
    err.args = (text,)
    cause = (
        _hard_coded(p)
        or (_known_mistake(p, case, arrays) if arrays is not None else "")
        or _accumulated_onto_garbage(got, want)
    )
    return _lead(err, cause)


def _prepared(p: Puzzle, case: tuple) -> tuple[dict, dict, dict]:
    """The case's arrays, a copy of them as they were, and what the spec says the outputs are."""
    arrays = p.build(case)
    before = {k: np.array(v, copy=True) for k, v in arrays.items()}
    return arrays, before, p.spec(**{k: np.array(v, copy=True) for k, v in before.items()})


def _raised(p: Puzzle, e: Exception, where: str, needed: int = 0) -> AssertionError:
    cause = _exception_cause(p, e, needed)
    if cause is None:
        raise e
    err = AssertionError(f"{cause} ({where})")
    return _lead(err, _hard_coded(p)) if isinstance(e, IndexError) else err


def puzzle_seed(p: Puzzle) -> int:
    """The seed of p's stepped cases, from its kernel's name. derandomize=True would seed them
    from the test function's source, and `run` below is every puzzle's test function: any edit
    to it would swap every puzzle's cases. (Hypothesis's @seed overrides derandomize.)"""
    return int.from_bytes(hashlib.sha256(p.kernel.encode()).digest()[:8], "big")


def check_spec(p: Puzzle, impl, params: st.SearchStrategy[dict], extra: int = 2) -> None:
    """Small cases, stepped: p.examples, then cases drawn from params with p's own seed; compare
    every output, with the thread table on a mismatch."""

    @seed(puzzle_seed(p))
    @STEPPED
    @given(params)
    def run(case: tuple) -> None:
        arrays, before, want = _prepared(p, case)
        threads = p.threads(arrays)
        where = say(
            f"{p.kernel} stepped with {threads} thread{'s' * (threads != 1)} (+{extra} extra) on "
            f"{rerun(p, case)}",
            f"{p.kernel} 以 {threads} 个线程（另加 {extra} 个）单步运行于 {rerun(p, case)}",
        )
        try:
            log = run_threads(getattr(impl, p.kernel), threads + extra, arrays)
        except Exception as e:  # the student's kernel raised: say on which case, and why
            raise _raised(p, e, where, threads) from e
        _inputs_unchanged(p, before, arrays, where)
        for out in p.outputs:
            _compare_stepped(p, impl, case, log, arrays, want, out, where)

    for case in reversed(p.examples):  # the last @example applied runs first: p.examples in order
        run = example(case)(run)
    run()


def _compare_stepped(p: Puzzle, impl, case, log, arrays, want, out: str, where: str) -> None:
    """compare() one output of a stepped run, its failure led by the hints' cause."""
    try:
        owner = functools.partial(p.owner, out, arrays=arrays)
        compare(log, arrays[out], want[out], out_name=out, owner=owner, what=where)
    except AssertionError as err:
        raise _with_hints(p, impl, case, err, arrays[out], want[out], arrays) from None


def check_launches(p: Puzzle, impl, params: st.SearchStrategy[dict], extra: int = 3) -> None:
    """Real launches (1 block) on cases from the whole space the spec allows."""

    @LAUNCHED
    @given(params)
    def run(case: tuple) -> None:
        launch(p, impl, case, extra)

    if LAUNCHED.derandomize:  # CI's profile: p's own cases, as check_spec's (see puzzle_seed)
        run = seed(puzzle_seed(p))(run)
    run()


def launch(p: Puzzle, impl, case: tuple, extra: int = 3) -> None:
    """One real launch of `case`; an AssertionError names the first wrong element and its cause."""
    arrays, before, want = _prepared(p, case)
    threads = p.threads(arrays) + extra
    where = say(
        f"{p.kernel} launched as 1 block of {threads} threads on Numba's CUDA simulator (or a "
        f"GPU); rerun the case with `{rerun(p, case)}`",
        f"{p.kernel} 以 1 个块、{threads} 个线程在 Numba 的 CUDA 模拟器（或 GPU）上启动；"
        f"用 `{rerun(p, case)}` 重现该用例",
    )
    try:
        getattr(impl, p.kernel)[1, threads](*arrays.values())
    except Exception as e:
        if isinstance(e, IndexError) and threads <= STEP_REPLAY:  # stepped, it names the array
            try:
                run_threads(getattr(impl, p.kernel), threads, p.build(case))
            except IndexError as stepped:
                raise _raised(p, stepped, where, threads - extra) from e
            except Exception:  # the replay itself failed otherwise: the launch's error stands
                pass
        raise _raised(p, e, where) from e
    _inputs_unchanged(p, before, arrays, where)
    for out in p.outputs:
        got, exp = np.asarray(arrays[out], np.float64), np.asarray(want[out], np.float64)
        wrong = first_wrong(got, exp, out, 1e-5, 1e-5)
        if wrong is None:
            continue
        index, at, value, num_bad = wrong
        owner = p.owner(out, index, arrays)
        who = (
            say(f"; thread {owner} owns it", f"；它归线程 {owner}")
            if owner is not None
            else say("; no thread should have written it", "；不应有线程写它")
        )
        err = AssertionError(
            say(
                f"{at} is {value}, the spec says {exp[index]:.6g} ({num_bad} element(s) "
                f"wrong){who}.",
                f"{at} 是 {value}，规范给出 {exp[index]:.6g}（{num_bad} 个元素不对）{who}。",
            )
        )
        err = _with_hints(p, impl, case, err, got, exp, arrays)
        if threads <= STEP_REPLAY:  # the same case stepped: which thread wrote what, in order
            replayed, _, _ = _prepared(p, case)
            try:
                log = run_threads(getattr(impl, p.kernel), threads, replayed)
            except Exception:  # the replay itself failed: the launch's own message stands
                log = None
            if log is not None:
                _compare_stepped(p, impl, case, log, replayed, want, out, where)
        raise AssertionError(f"{err} ({where})")


def logits_near(
    base: float, spread: float, rng: np.random.Generator, q: np.ndarray, k: np.ndarray
) -> None:
    """Make every scaled logit q[h] . k[p, h, :] / sqrt(D) about base + offset[p], in place:
    coordinate 0 of q is sqrt(D) and coordinate 0 of key p is base + offset[p]. The offsets
    climb (or fall: a coin decides) evenly from 0 to `spread` along the sequence, so the first
    logit is the smallest (or the largest) and only a shift by the true maximum is safe."""
    L, D = k.shape[0], q.shape[-1]
    offset = spread * np.arange(L) / max(1, L - 1)
    if rng.random() < 0.5:
        offset = offset[::-1]
    q[:, 0] = math.sqrt(D)
    k[..., 0] = (base + offset).reshape((L,) + (1,) * (k.ndim - 2)) + rng.standard_normal(
        k.shape[:-1]
    ) / math.sqrt(D)
