"""Fuzz: traces (requests, synthetic workloads, CSV files of any bytes), the labs' sums and
the sizing helpers refuse bad input with TypeError or ValueError and nothing else."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import workloads
from pagedsim.labs import waste
from pagedsim.labs.contiguous import external_fragmentation
from pagedsim.sizing import ModelSpec, align_up, fit_blocks
from pagedsim.workloads import MAX_SAMPLES, MAX_SEQ_LEN, Request

from .kit import WRONG_TYPES, bad_counts, is_clean

FUZZ = settings(max_examples=40, report_multiple_bugs=False)


def refused(call, error):
    with pytest.raises(error) as info:
        call()
    assert is_clean(info.value), repr(info.value)


@FUZZ
@given(
    field=st.sampled_from(["prompt_len", "output_len", "n", "beam_width", "arrival_step"]),
    bad=st.one_of(bad_counts(MAX_SEQ_LEN), st.just((0, ValueError))),
)
def test_a_request_with_a_bad_field_is_refused(field, bad):
    value, error = bad
    low, high = {
        "n": (1, MAX_SAMPLES),
        "beam_width": (1, MAX_SAMPLES),
        "arrival_step": (0, workloads.MAX_ARRIVAL),
    }.get(field, (1, MAX_SEQ_LEN))
    if error is ValueError and low <= value <= high:
        return  # in range for this field
    refused(lambda: Request(**{"prompt_len": 3, "output_len": 4, field: value}), error)


@FUZZ
@given(bad=bad_counts(workloads.MAX_REQUESTS))
def test_synthetic_refuses_bad_counts_and_names(bad):
    value, error = bad
    refused(lambda: workloads.synthetic("alpaca", value), error)
    refused(lambda: workloads.synthetic(7, 3), TypeError)
    refused(lambda: workloads.synthetic("sharegptt", 3), ValueError)


@FUZZ
@given(body=st.binary(max_size=200), bom=st.booleans(), header=st.booleans())
def test_any_bytes_as_a_csv_give_requests_or_a_value_error(tmp_path_factory, body, bom, header):
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    path.write_bytes(
        (b"\xef\xbb\xbf" if bom else b"") + (b"prompt_len,output_len\n" if header else b"") + body
    )
    try:
        got = workloads.read_csv(path)
    except ValueError as e:
        assert is_clean(e) or str(path) in str(e)
    else:
        assert all(isinstance(r, Request) for r in got)


@FUZZ
@given(
    rows=st.lists(
        st.tuples(
            st.integers(1, MAX_SEQ_LEN), st.integers(1, MAX_SEQ_LEN), st.integers(1, MAX_SAMPLES)
        ),
        min_size=1,
        max_size=6,
    ),
    block_size=st.sampled_from([1, 16, 65536]),
)
def test_waste_fractions_of_the_largest_allowed_requests_stay_in_0_1(rows, block_size):
    reqs = [Request(p, o, n=k) for p, o, k in rows]
    frac = waste.breakdown(reqs, block_size, waste.MAX_LEN)
    for parts in frac.values():
        assert all(0.0 <= v <= 1.0 for v in parts.values()), parts
        assert abs(sum(parts.values()) - 1.0) < 1e-9


@FUZZ
@given(
    bad=bad_counts(waste.MAX_LEN), which=st.sampled_from(["block_size", "max_len", "memory_tokens"])
)
def test_waste_refuses_bad_sizes(bad, which):
    value, error = bad
    high = {
        "block_size": 65536,
        "max_len": waste.MAX_LEN,
        "memory_tokens": waste.MAX_MEMORY_TOKENS,
    }[which]
    if error is ValueError and 7 <= value <= high:
        return  # in range (and max_len fits the 7-token request)
    args = {"block_size": 16, "max_len": 64, "memory_tokens": 1000, which: value}
    refused(lambda: waste.breakdown([Request(3, 4)], **args), error)


def test_external_fragmentation_refuses_bad_columns():
    refused(lambda: external_fragmentation([1.5], [1], [0], 10), TypeError)
    refused(lambda: external_fragmentation([1, 2], [1], [0], 10), ValueError)
    refused(lambda: external_fragmentation([0], [1], [0], 10), ValueError)
    refused(lambda: external_fragmentation([1], [1], [0], 0), ValueError)
    assert external_fragmentation(np.array([], dtype=np.int64), [], [], 10) == 0


@FUZZ
@given(
    field=st.sampled_from(["num_layers", "num_kv_heads", "head_dim", "dtype_bytes"]),
    bad=bad_counts(),
    zero=st.booleans(),
)
def test_sizing_refuses_bad_shapes_and_budgets(field, bad, zero):
    value, error = (0, ValueError) if zero else bad
    refused(
        lambda: ModelSpec("m", **{"num_layers": 2, "num_kv_heads": 2, "head_dim": 8, field: value}),
        error,
    )
    refused(lambda: fit_blocks(100, 100, alignment=value), error)
    refused(lambda: ModelSpec(3, 1, 1, 1), TypeError)
    if not zero:  # a budget or a size of 0 bytes is fine
        refused(lambda: fit_blocks(value, 100), error)
        refused(lambda: align_up(value), error)


@FUZZ
@given(bad=WRONG_TYPES)
def test_prompt_tokens_and_request_lists_refuse_bad_arguments(bad):
    reqs = [Request(3, 1)]
    refused(lambda: workloads.prompt_tokens(reqs, num_prefixes=bad), TypeError)
    refused(lambda: workloads.prompt_tokens(reqs, prefix_lens=(5, 2)), ValueError)
    for call in (
        workloads.as_arrays,
        workloads.prompt_tokens,
        lambda rs: workloads.write_csv(rs, "/nonexistent/never-written.csv"),
    ):
        refused(lambda call=call: call(reqs + [bad]), TypeError)
        refused(lambda call=call: call("not requests"), TypeError)


def test_block_tables_and_blocks_needed_refuse_a_zero_block_size():
    from pagedsim import BlockTable, blocks_needed

    refused(lambda: blocks_needed(5, 0), ValueError)
    refused(lambda: blocks_needed(2.5, 4), TypeError)
    refused(lambda: BlockTable(0), ValueError)
    refused(lambda: BlockTable(4, [], -1), ValueError)
