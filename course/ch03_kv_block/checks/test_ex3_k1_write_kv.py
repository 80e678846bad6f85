"""Checks for puzzle 3.k1: write_kv's slot scatter, against its NumPy spec."""

import numpy as np
import pytest
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle import POISON
from course.ch03_kv_block.checks._puzzle_checks import check_launch, check_spec

EXERCISE = "3.k1"
pytestmark = pytest.mark.ch3_7


def spec(key, slot_mapping, k_cache):
    for t, slot in enumerate(slot_mapping):
        if slot >= 0:
            k_cache[slot] = key[t]
    return {"k_cache": k_cache}


def case(draw):
    T = draw(st.integers(1, 4))
    D, slots = draw(st.integers(1, 3)), draw(st.integers(T, 8))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    mapping = rng.permutation(slots)[:T].astype(np.int64)
    if T > 1 and draw(st.booleans()):
        mapping[-1] = -1  # a padded token
    arrays = {
        "key": rng.standard_normal((T, D)),
        "slot_mapping": mapping,
        "k_cache": np.full((slots, D), POISON),
    }
    return arrays, T * D, f"T={T} tokens, D={D}, slots {mapping.tolist()}"


def owner(out_name, index, arrays):
    slot, d = index
    hits = [t for t, s in enumerate(arrays["slot_mapping"]) if s == slot]
    return hits[0] * arrays["key"].shape[1] + d if hits else None


def test_write_kv_scatters_each_number_to_its_slot_and_skips_padding(impl):
    """Every (t, d) goes to k_cache[slot_mapping[t], d]; padded tokens (-1) and extra threads
    write nothing."""
    check_spec(impl, "write_kv_kernel", case, spec, outputs=["k_cache"], owner=owner)


def test_write_kv_launches_under_the_cuda_simulator(impl):
    """One real launch (GPU, or Numba's CUDA simulator), with 3 extra threads."""
    arrays = {
        "key": np.arange(6.0).reshape(3, 2),
        "slot_mapping": np.array([4, -1, 0]),
        "k_cache": np.full((6, 2), POISON),
    }
    check_launch(impl, "write_kv_kernel", arrays, 9, spec, ["k_cache"])
