"""Every launcher check: a bad argument raises ValueError naming it (and the index),
before anything is launched, and leaves the cache unchanged."""

import numpy as np
import pytest

import cuda_kernels as ck

RNG = np.random.default_rng(0)
CACHE = RNG.standard_normal((4, 2, 2, 4, 8)).astype(np.float32)  # [N=4, 2, H_kv=2, B=4, D=8]
QUERY = RNG.standard_normal((2, 4, 8)).astype(np.float32)  # [S=2, H=4, D=8]
TABLES = np.array([[0, 1], [2, 3]], np.int32)
LENS = np.array([5, 8], np.int32)
KEY = RNG.standard_normal((2, 2, 8)).astype(np.float32)


def attention(**change):
    args = dict(query=QUERY, kv_cache=CACHE, block_tables=TABLES, context_lens=LENS)
    args.update(change)
    return lambda: ck.paged_attention(**args)


def write(**change):
    args = dict(kv_cache=CACHE.copy(), key=KEY, value=KEY, slot_mapping=np.array([0, 5]))
    args.update(change)
    return lambda: ck.write_kv(**args)


CASES = {
    "cache_with_four_dims": (write(kv_cache=CACHE[:, 0]), r"kv_cache must have 5 dimensions"),
    "cache_without_k_and_v_pair": (write(kv_cache=np.zeros((4, 3, 2, 4, 8), np.float32)),
                                   r"kv_cache .*dimension 1 is 3"),
    "cache_of_float64": (write(kv_cache=CACHE.astype(np.float64)), r"kv_cache must be float32/float16"),
    "cache_not_contiguous_inside": (write(kv_cache=np.zeros((4, 2, 2, 8, 8), np.float32)[:, :, :, ::2]),
                                    r"kv_cache must be C-contiguous in its inner"),
    "key_of_wrong_shape": (write(key=KEY[:, :1]), r"key must have shape \(2, 2, 8\)"),
    "value_of_other_dtype": (write(value=KEY.astype(np.float16)), r"value must be float32"),
    "slot_past_the_cache": (write(slot_mapping=np.array([0, 16])), r"slot_mapping\[1\] = 16 is out of range"),
    "slot_written_twice": (write(slot_mapping=np.array([3, 3])), r"slot_mapping names slot 3 twice"),
    "slot_mapping_of_floats": (write(slot_mapping=np.array([0.0, 1.0])), r"slot_mapping must be int32/int64"),
    "query_of_float64": (attention(query=QUERY.astype(np.float64)), r"query must be float32/float16"),
    "query_head_dim_mismatch": (attention(query=QUERY[:, :, :4].copy()), r"query head_dim 4"),
    "heads_not_a_multiple_of_kv_heads": (attention(query=QUERY[:, :3].copy()), r"not a multiple of num_kv_heads=2"),
    "tables_of_int64": (attention(block_tables=TABLES.astype(np.int64)), r"block_tables and context_lens must be int32"),
    "tables_with_too_few_rows": (attention(block_tables=TABLES[:1]), r"block_tables has 1 rows for 2"),
    "context_past_the_table": (attention(context_lens=np.array([5, 9], np.int32)), r"context_lens\[1\] = 9 is out of range"),
    "empty_context": (attention(context_lens=np.array([0, 8], np.int32)), r"context_lens\[0\] = 0"),
    "block_id_past_the_cache": (attention(block_tables=np.array([[0, 4], [2, 3]], np.int32)),
                                r"block_tables\[\(0, 1\)\] = 4 is out of range \[0, 4\)"),
    "null_block_inside_the_context": (attention(block_tables=np.array([[0, 1], [-1, 3]], np.int32)),
                                      r"block_tables\[\(1, 0\)\] = -1"),
    "window_of_zero": (attention(window=0), r"window = 0 must be >= 1"),
    "sinks_without_window": (attention(sinks=2), r"sinks needs a window"),
    "unknown_mode": (attention(mode="fast"), r"mode must be one of"),
    "partition_of_zero": (attention(mode="split", partition_size=0), r"partition_size = 0"),
    "partition_for_single_pass": (attention(mode="single", partition_size=4), r"partition_size applies only"),
    "scale_not_finite": (attention(scale=float("nan")), r"scale must be a finite number"),
    "copy_from_a_block_past_the_cache": (lambda: ck.copy_blocks(CACHE.copy(), [(0, 1), (7, 2)]),
                                         r"pairs\[1\] src = 7 is out of range"),
    "copy_to_the_same_block_twice": (lambda: ck.copy_blocks(CACHE.copy(), [(0, 2), (1, 2)]),
                                     r"pairs\[1\] writes block 2, already a dst"),
    "copy_into_a_block_being_read": (lambda: ck.copy_blocks(CACHE.copy(), [(0, 1), (1, 2)]),
                                     r"pairs\[0\] writes block 1, which another pair reads"),
    "copy_pairs_that_are_not_pairs": (lambda: ck.copy_blocks(CACHE.copy(), [(0, 1, 2)]),
                                      r"pairs must be \(src, dst\) pairs"),
    "swap_to_a_host_pool_of_other_layout": (lambda: ck.swap_out(CACHE, np.zeros((4, 2, 1, 4, 8), np.float32), [(0, 0)]),
                                            r"host_cache .* must match kv_cache"),
    "swap_to_a_block_past_the_host_pool": (lambda: ck.swap_out(CACHE, np.zeros((2,) + CACHE.shape[1:], np.float32), [(0, 2)]),
                                           r"pairs\[0\] dst = 2 is out of range"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_bad_argument_raises_a_value_error_naming_it(case):
    call, message = CASES[case]
    with pytest.raises(ValueError, match=message):
        call()


def test_a_rejected_write_leaves_the_cache_unchanged():
    cache = CACHE.copy()
    with pytest.raises(ValueError):
        ck.write_kv(cache, KEY, KEY, np.array([1, 99]))
    assert np.array_equal(cache, CACHE)


def test_table_entries_past_the_context_are_never_validated():
    tables = np.array([[0, 1, 123456], [2, 3, -5]], np.int32)
    assert np.isfinite(ck.paged_attention(QUERY, CACHE, tables, LENS)).all()
