"""A kernel puzzle's first message names what the kernel did wrong (issue 42), in-process.

Each test writes a small wrong kernel as a student would, runs the puzzle's stepped check on it
(no launch, no child process: fast) and reads the words the message must lead with. The same
mistakes, checked the way `pagedsim check` runs a student's file, are named attempts in
course/ch03_kv_block/mutants.toml (tests/course/test_attempts.py).
"""

import textwrap
import types

import pytest
from hypothesis import strategies as st

from course.ch03_kv_block.checks import _puzzle_checks as pc
from course.ch03_kv_block.checks import test_ex3_k2_gather_k as k2
from course.ch03_kv_block.checks import test_ex3_k3_paged_decode as k3
from course.ch03_kv_block.checks import test_ex3_k4_lse_merge as k4
from course.ch03_kv_block.checks import test_ex3_k5_copy_blocks as k5
from course.ch03_kv_block.checks import test_ex3_k6_window_drops as k6

GATHER = """
def gather_k_kernel(k_cache, block_table, out):
    i = cuda.threadIdx.x
    B, D = {B}, k_cache.shape[2]
    p, d = i // D, i % D
    if {guard}:
        out[p, d] = k_cache[{block}, p % B, d]
"""


def attempt(tmp_path, monkeypatch, exercise: str, source: str):
    """The attempt as a module, and its file where the checks look for it (they read its text
    for a hard-coded size). The stepper gives the kernel its `cuda`."""
    path = tmp_path / "attempt.py"
    path.write_text(textwrap.dedent(source))
    monkeypatch.setenv("PAGEDSIM_IMPL", str(path))
    monkeypatch.setenv("PAGEDSIM_EXERCISE", exercise)
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # the test's own source
    return types.SimpleNamespace(**namespace)


def first_message(module, impl, cases=None) -> str:
    with pytest.raises(AssertionError) as caught:
        pc.check_spec(module.PUZZLE, impl, module.params(full=False) if cases is None else cases)
    text = str(caught.value)
    assert "thread(s) []" not in text and "thread None" not in text, text
    return text


def gather(tmp_path, monkeypatch, cases=None, **parts):
    fill = {"B": "k_cache.shape[1]", "guard": "p < out.shape[0]", "block": "block_table[p // B]"}
    source = GATHER.format(**{**fill, **parts})
    return first_message(k2, attempt(tmp_path, monkeypatch, "3.k2", source), cases)


def test_a_hard_coded_block_size_is_named_with_its_line(tmp_path, monkeypatch):
    said = gather(tmp_path, monkeypatch, B="16")
    assert said.startswith("your kernel hard-codes the size 16 (line 4: `B, D = 16,"), said


def test_an_unguarded_extra_thread_is_named_with_the_array_and_axis_it_overran(
    tmp_path, monkeypatch
):
    said = gather(tmp_path, monkeypatch, guard="True")
    assert "indexed past the end (IndexError)" in said, said
    assert "is an extra thread (this case needs" in said, said


def test_a_guard_from_the_wrong_size_names_the_output_axis(tmp_path, monkeypatch):
    # L = 3 in two blocks of 2 and no garbage entries: thread 3 reads a real slot, writes out[3]
    case = k2.Case(B=2, D=1, L=3, spare_blocks=0, spare_entries=0, seed=0)
    said = gather(tmp_path, monkeypatch, st.just(case), guard="p < block_table.shape[0] * B")
    assert "axis 0 of out (L, the sequence length)" in said, said


def test_the_logical_block_read_as_the_physical_one_is_named(tmp_path, monkeypatch):
    said = gather(tmp_path, monkeypatch, block="p // B")
    assert said.startswith("Position p was read from block p // B itself"), said


def test_an_output_added_to_without_being_zeroed_is_named(tmp_path, monkeypatch):
    source = """
    import math

    def paged_decode_kernel(q, k_cache, v_cache, block_table, context_len, out):
        h = cuda.threadIdx.x
        if h < q.shape[0]:
            B, D, L = k_cache.shape[1], q.shape[1], context_len[0]
            s = [0.0] * L
            for p in range(L):
                for d in range(D):
                    s[p] += q[h, d] * k_cache[block_table[p // B], p % B, h, d]
                s[p] /= math.sqrt(D)
            top = max(s)
            total = sum(math.exp(x - top) for x in s)
            for p in range(L):
                for d in range(D):
                    w = math.exp(s[p] - top) / total
                    out[h, d] += w * v_cache[block_table[p // B], p % B, h, d]
    """
    said = first_message(k3, attempt(tmp_path, monkeypatch, "3.k3", source))
    assert said.startswith("the output is the spec's value plus -7777"), said
    assert "set each output element to 0" in said, said


def test_swapped_merge_weights_are_named(tmp_path, monkeypatch):
    source = """
    import math

    def merge_kernel(o1, lse1, o2, lse2, out, lse_out):
        i = cuda.threadIdx.x
        D = o1.shape[1]
        h, d = i // D, i % D
        if h < o1.shape[0]:
            m = max(lse1[h], lse2[h])
            w1, w2 = math.exp(lse1[h] - m), math.exp(lse2[h] - m)
            out[h, d] = (w2 * o1[h, d] + w1 * o2[h, d]) / (w1 + w2)
            if d == 0:
                lse_out[h] = m + math.log(w1 + w2)
    """
    said = first_message(k4, attempt(tmp_path, monkeypatch, "3.k4", source))
    assert said.startswith("o1 was weighed by w2 and o2 by w1"), said


def test_a_window_rule_with_a_strict_comparison_is_named(tmp_path, monkeypatch):
    source = """
    def dropped_kernel(params, dropped):
        j = cuda.threadIdx.x
        if j < dropped.shape[0]:
            n, w, B = params[0], params[1], params[2]
            dropped[j] = 1 if (j + 1) * B < n - w else 0
    """
    said = first_message(k6, attempt(tmp_path, monkeypatch, "3.k6", source))
    assert "(<=, not <)" in said.split(" dropped_kernel stepped")[0], said


def test_a_thread_that_wrote_the_wrong_element_is_told_which(tmp_path, monkeypatch):
    source = """
    import math

    def merge_kernel(o1, lse1, o2, lse2, out, lse_out):
        i = cuda.threadIdx.x
        H = o1.shape[0]
        h, d = i // H, i % H
        if h < H and d < o1.shape[1]:
            m = max(lse1[h], lse2[h])
            w1, w2 = math.exp(lse1[h] - m), math.exp(lse2[h] - m)
            out[h, d] = (w1 * o1[h, d] + w2 * o2[h, d]) / (w1 + w2)
            if d == 0:
                lse_out[h] = m + math.log(w1 + w2)
    """
    said = first_message(k4, attempt(tmp_path, monkeypatch, "3.k4", source))
    assert "nobody wrote it" in said and ("wrote nothing to out" in said or "instead" in said)


def test_a_thread_that_only_read_the_wrong_element_is_not_said_to_have_written_it(
    tmp_path, monkeypatch
):
    # 3.k5's cache is read and written: copying dst to src reads each destination, writes none
    source = """
    def copy_blocks_kernel(cache, pairs):
        i = cuda.threadIdx.x
        D = cache.shape[2]
        per_pair = cache.shape[1] * D
        if i < pairs.shape[0] * per_pair:
            src, dst = pairs[i // per_pair, 0], pairs[i // per_pair, 1]
            cache[src, (i % per_pair) // D, i % D] = cache[dst, (i % per_pair) // D, i % D]
    """
    # 3 pairs over 8 blocks: block 0 is only a destination, which this kernel reads
    case = k5.Case(N=8, B=2, D=2, P=3, seed=0)
    said = first_message(k5, attempt(tmp_path, monkeypatch, "3.k5", source), st.just(case))
    assert "cache[0, 0, 0]" in said, said
    assert "as it should" not in said, said
    assert "nobody wrote it" in said, said
