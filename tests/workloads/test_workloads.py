"""Workloads: seeded synthetic traces with the paper's mean lengths, and CSV traces."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import workloads
from pagedsim.workloads import Request


@pytest.mark.parametrize("name", ["sharegpt", "alpaca"])
def test_synthetic_means_match_the_papers_within_three_percent(name):
    (mean_in, _, cap_in), (mean_out, _, cap_out) = workloads.DATASETS[name]
    prompts, outputs = workloads.lengths(name, 20_000, seed=1)
    assert abs(prompts.mean() / mean_in - 1) < 0.03
    assert abs(outputs.mean() / mean_out - 1) < 0.03
    assert prompts.min() >= 1 and prompts.max() <= cap_in
    assert outputs.min() >= 1 and outputs.max() <= cap_out


def test_synthetic_is_seeded_and_carries_n_and_beam_width():
    a = workloads.synthetic("alpaca", 50, seed=3, n=4)
    assert a == workloads.synthetic("alpaca", 50, seed=3, n=4)
    assert a != workloads.synthetic("alpaca", 50, seed=4, n=4)
    assert {r.n for r in a} == {4} and {r.beam_width for r in a} == {1}
    assert {r.beam_width for r in workloads.synthetic("alpaca", 5, beam_width=2)} == {2}


def test_unknown_workload_and_bad_requests_are_refused():
    with pytest.raises(ValueError, match="unknown workload 'lmsys'"):
        workloads.synthetic("lmsys", 3)
    with pytest.raises(ValueError, match=r"Request.output_len must be an int in \[1, "):
        Request(3, 0)
    with pytest.raises(ValueError, match="either parallel sampling"):
        Request(3, 3, n=2, beam_width=2)


@st.composite
def request_lists(draw):
    k = draw(st.integers(0, 8))
    out = []
    for _ in range(k):
        n, beam = draw(st.sampled_from([(1, 1), (3, 1), (1, 4)]))
        out.append(
            Request(
                draw(st.integers(1, 3000)),
                draw(st.integers(1, 3000)),
                n,
                beam,
                draw(st.integers(0, 50)),
            )
        )
    return out


@settings(max_examples=30)
@given(request_lists())
def test_csv_round_trip_gives_back_the_same_requests(tmp_path_factory, reqs):
    path = tmp_path_factory.mktemp("csv") / "trace.csv"
    workloads.write_csv(reqs, path)
    assert workloads.read_csv(path) == reqs


def test_csv_with_only_the_required_columns_gets_defaults(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("prompt_len,output_len\n10,20\n\n3, 4\n")
    assert workloads.read_csv(path) == [Request(10, 20), Request(3, 4)]


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty file"),
        ("prompt_len\n3\n", "bad header"),
        ("prompt_len,output_len,colour\n1,2,3\n", "bad header"),
        ("prompt_len,output_len\n10,abc\n", ":2: output_len must be an integer, got 'abc'"),
        ("prompt_len,output_len\n10,5\n10\n", ":3: expected 2 fields, got 1"),
        ("prompt_len,output_len,n\n10,5,0\n", ":2: Request.n must be an int in [1, 256], got 0"),
        (
            "prompt_len,output_len\n3000000000,5\n",
            ":2: Request.prompt_len must be an int in [1, 16777216]",
        ),
        ("prompt_len,output_len\n\xff\xfe,5\n", "not UTF-8 text"),
    ],
)
def test_bad_csv_rows_raise_errors_naming_the_line(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match=re.escape(message)):
        workloads.read_csv(path)


def test_a_byte_order_mark_is_accepted_and_a_header_alone_is_an_empty_trace(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfprompt_len,output_len\r\n7,3\r\n")
    assert workloads.read_csv(path) == [Request(7, 3)]
    path.write_text("prompt_len,output_len\n")
    assert workloads.read_csv(path) == []


def test_prompt_tokens_share_seeded_prefixes_and_keep_a_unique_tail():
    reqs = [Request(p, 5) for p in (1, 40, 300, 600, 600)]
    toks = workloads.prompt_tokens(reqs, seed=2, num_prefixes=1, prefix_lens=(100, 100))
    assert [len(t) for t in toks] == [1, 40, 300, 600, 600]
    np.testing.assert_array_equal(toks[2][:100], toks[3][:100])  # one shared system prompt
    np.testing.assert_array_equal(toks[1][:39], toks[2][:39])
    assert not np.array_equal(toks[3][100:], toks[4][100:])  # the rest is fresh text
