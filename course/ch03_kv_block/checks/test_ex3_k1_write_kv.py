"""Checks for puzzle 3.k1: write_kv's slot scatter, against its NumPy spec."""

from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle import POISON
from course.ch03_kv_block.checks._puzzle_checks import Puzzle, check_launches, check_spec, mistake

EXERCISE = "3.k1"
pytestmark = pytest.mark.ch3_7


def spec(key, slot_mapping, k_cache):
    for t, slot in enumerate(slot_mapping):
        if slot >= 0:
            k_cache[slot] = key[t]
    return {"k_cache": k_cache}


class Case(NamedTuple):  # `build(case)` makes its arrays, the same ones every time
    T: int  # tokens
    D: int  # head_dim
    spare_slots: int  # cache slots no token maps to
    padded: int  # the last `padded` tokens have slot -1
    seed: int


def build(case: Case) -> dict:
    """T tokens into a cache of T + spare_slots slots; the last `padded` tokens have slot -1."""
    T, D, spare_slots, padded, seed = case
    rng = np.random.default_rng(seed)
    mapping = rng.permutation(T + spare_slots)[:T].astype(np.int64)
    mapping[T - padded :] = -1
    return {
        "key": rng.standard_normal((T, D)),
        "slot_mapping": mapping,
        "k_cache": np.full((T + spare_slots, D), POISON),
    }


@st.composite
def params(draw, *, full: bool):
    """One thread per key number: at most 256 of them (a small grid for the simulator)."""
    D = draw(st.sampled_from([1, 2, 8, 64, 128]) if full else st.integers(1, 3))
    T = draw(st.integers(1, max(1, 256 // D)) if full else st.integers(1, 4))
    return Case(
        T=T,
        D=D,
        spare_slots=draw(st.integers(0, 16) if full else st.integers(0, 4)),
        padded=draw(st.integers(0, T - 1)),
        seed=draw(st.integers(0, 2**16)),
    )


def owner(out, index, arrays):
    slot, d = index
    hits = [t for t, s in enumerate(arrays["slot_mapping"]) if s == slot]
    return hits[0] * arrays["key"].shape[1] + d if hits else None


AXES = {
    "key": ("T, the token count", "D, head_dim"),
    "slot_mapping": ("T, the token count",),
    "k_cache": ("num_slots", "D, head_dim"),
}


def _padding_written(key, slot_mapping, k_cache):
    for t, slot in enumerate(slot_mapping):
        k_cache[slot] = key[t]
    return {"k_cache": k_cache}


def _slot_zero_skipped(key, slot_mapping, k_cache):
    for t, slot in enumerate(slot_mapping):
        if slot > 0:
            k_cache[slot] = key[t]
    return {"k_cache": k_cache}


MISTAKES = (
    mistake(
        "A padded token (slot_mapping[t] == -1) was written: k_cache[-1] is the cache's last "
        "slot, so skip every token whose slot is -1.",
        "写入了填充 token（slot_mapping[t] == -1）：k_cache[-1] 是缓存的最后一个槽，"
        "所以槽为 -1 的 token 都要跳过。",
        _padding_written,
    ),
    mistake(
        "The token whose slot is 0 was skipped: only -1 marks padding (test slot >= 0, not "
        "slot > 0).",
        "槽为 0 的 token 被跳过了：只有 -1 表示填充（判断 slot >= 0，而不是 slot > 0）。",
        _slot_zero_skipped,
    ),
)

# run first on every stepped run: 3 tokens of 4 numbers (T < D, so a split by T misses some)
# into 5 slots, the last token padded (-1) and a real one in slot 0, then 2 extra threads
EXAMPLES = (Case(T=3, D=4, spare_slots=2, padded=1, seed=1),)

PUZZLE = Puzzle(
    module=__name__,
    kernel="write_kv_kernel",
    build=build,
    spec=spec,
    outputs=("k_cache",),
    threads=lambda arrays: arrays["key"].size,
    owner=owner,
    axes=AXES,
    mistakes=MISTAKES,
    examples=EXAMPLES,
)


def test_write_kv_scatters_each_number_to_its_slot_and_skips_padding(impl):
    """Every (t, d) goes to k_cache[slot_mapping[t], d]; padded tokens (-1) and extra threads
    write nothing."""
    check_spec(PUZZLE, impl, params(full=False))


def test_write_kv_launches_on_every_case_the_spec_allows(impl):
    """Real launches: head_dim up to 128, caches with many more slots than tokens, padding."""
    check_launches(PUZZLE, impl, params(full=True))
