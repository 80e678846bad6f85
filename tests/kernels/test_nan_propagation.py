"""NaN propagates through paged_attention in every mode, as IEEE arithmetic (and the
float64 reference) has it: a NaN in a query head poisons that head's output, a NaN in
an attended key every head of its group (a value: that element of them); a NaN the
context never reaches (another block, a token outside the window) changes nothing."""

import numpy as np
import pytest
from conftest import random_cache, random_query, rel_err

import cuda_kernels as ck
from cuda_kernels import reference
from cuda_kernels.mask import CAUSAL

# "auto" is left out: on these short contexts it runs the single-pass grid "single" runs
# (one partition; LAST_PLAN differs only in partition_size, 256 against the context).
MODES = [("single", None), ("split", 3)]


def case(seed, lens=(9, 6), kv_heads=2, group=2, head_dim=8, block_size=4):
    """Two sequences in disjoint blocks, a spare block (the last) that no table names."""
    rng = np.random.default_rng(seed)
    blocks = [-(-n // block_size) for n in lens]
    tables = np.full((len(lens), max(blocks)), -1, np.int32)
    ids = rng.permutation(sum(blocks) + 1)
    spare, ids = ids[-1], ids[:-1]
    at = 0
    for s, n in enumerate(blocks):
        tables[s, :n] = ids[at : at + n]
        at += n
    cache = random_cache(rng, sum(blocks) + 1, kv_heads, block_size, head_dim)
    query = random_query(rng, len(lens), kv_heads * group, head_dim)
    return query, cache, tables, np.asarray(lens, np.int32), int(spare)


def run(query, cache, tables, lens, mode, part, mask=CAUSAL):
    return ck.paged_attention(query, cache, tables, lens, mask, mode=mode, partition_size=part)


def assert_nan_exactly_where_the_reference_has_it(got, want):
    assert np.isnan(want).any(), "the case must put a NaN in the reference's output"
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    assert np.abs(got[finite] - want[finite]).max() < 1e-5 * np.abs(want[finite]).max()


@pytest.mark.parametrize("mode,part", MODES)
def test_a_nan_in_one_query_head_makes_that_heads_output_nan_and_no_other(mode, part):
    query, cache, tables, lens, _ = case(1)
    query[1, 2, 5] = np.nan
    want = reference.paged_attention(query, cache, tables, lens)
    got = run(query, cache, tables, lens, mode, part)
    assert np.isnan(got[1, 2]).all()
    assert_nan_exactly_where_the_reference_has_it(got, want)


@pytest.mark.parametrize("mode,part", MODES)
@pytest.mark.parametrize("kv", [0, 1])
def test_a_nan_in_an_attended_key_or_value_makes_its_groups_heads_nan(mode, part, kv):
    query, cache, tables, lens, _ = case(2)
    cache[tables[0, 1], kv, 1, 2, 3] = np.nan  # sequence 0, token 6, KV head 1
    want = reference.paged_attention(query, cache, tables, lens)
    got = run(query, cache, tables, lens, mode, part)
    hit = got[0, 2:4] if kv == 0 else got[0, 2:4, 3]  # a NaN value poisons only its element
    assert np.isnan(hit).all() and not np.isnan(got[0, 0:2]).any()
    assert_nan_exactly_where_the_reference_has_it(got, want)


@pytest.mark.parametrize("mode,part", MODES)
def test_a_nan_in_the_first_key_a_row_reads_still_propagates(mode, part):
    """The row's running max is still -inf when the NaN score arrives."""
    query, cache, tables, lens, _ = case(3)
    cache[tables[1, 0], 0, 0, 0, 0] = np.nan  # sequence 1, token 0, KV head 0
    want = reference.paged_attention(query, cache, tables, lens)
    assert_nan_exactly_where_the_reference_has_it(run(query, cache, tables, lens, mode, part), want)


@pytest.mark.parametrize("mode,part", MODES)
def test_nan_the_context_never_reaches_changes_nothing(mode, part):
    query, cache, tables, lens, spare = case(4)
    cache[spare] = np.nan  # a block no table names
    cache[tables[1, 1], :, :, 2:] = np.nan  # sequence 1 has 6 tokens: offsets 2, 3 are past it
    window = ck.ScoreMask(sliding_window=3, sinks=1)
    cache[tables[0, 0], :, :, 2] = np.nan  # token 2 of sequence 0: outside the window
    got = run(query, cache, tables, lens, mode, part, window)
    assert rel_err(got, reference.paged_attention(query, cache, tables, lens, window)) < 1e-5
