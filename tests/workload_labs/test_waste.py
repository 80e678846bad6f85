"""The memory-waste comparison: definitions checked on cases computed by hand."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import workloads
from pagedsim.app import cli
from pagedsim.labs import waste
from pagedsim.labs.contiguous import external_fragmentation
from pagedsim.workloads import Request


def sums_of(reqs, **kw):
    return waste.sums(workloads.as_arrays(reqs), **kw)


def test_one_request_by_hand_in_static_mode():
    # P = 3, O = 2, so L = 5 and the decode steps hold l = 4, then l = 5 tokens.
    # token states = 4 + 5 = 9 for every allocator.
    s = sums_of([Request(3, 2)], block_size=4, max_len=16)
    # paged, B = 4: slots ceil(4/4)*4 = 4 and ceil(5/4)*4 = 8 -> 12; internal = 12 - 9 = 3.
    assert s["paged"] == {
        "token_states": 9,
        "reserved": 0,
        "internal_fragmentation": 3,
        "external_fragmentation": 0,
    }
    # max: reserved (5-4) + (5-5) = 1; internal (16-5) * 2 steps = 22.
    assert s["max"] == {
        "token_states": 9,
        "reserved": 1,
        "internal_fragmentation": 22,
        "external_fragmentation": 0,
    }
    # pow2: next power of two >= 5 is 8; internal (8-5) * 2 = 6.
    assert s["pow2"]["internal_fragmentation"] == 6 and s["pow2"]["reserved"] == 1
    # oracle: exactly L, so only the reservation 1 is not a token.
    assert s["oracle"] == {
        "token_states": 9,
        "reserved": 1,
        "internal_fragmentation": 0,
        "external_fragmentation": 0,
    }
    f = waste.fractions(s)
    assert f["paged"]["token_states"] == 9 / 12  # 0.75
    assert f["max"]["token_states"] == 9 / 32  # 9 + 1 + 22 = 32
    assert f["oracle"]["reserved"] == 1 / 10


def test_a_request_with_n_samples_counts_each_sequence_without_sharing():
    one = sums_of([Request(3, 2)], block_size=4, max_len=16)
    two = sums_of([Request(3, 2, n=2)], block_size=4, max_len=16)
    assert two == {a: {k: 2 * v for k, v in parts.items()} for a, parts in one.items()}


def test_continuous_mode_external_fragmentation_by_hand():
    # Memory 10 slots, oracle sizes: A (P=2, O=4) needs 6, B (P=3, O=3) needs 6.
    # Step 0: A takes [0, 6); B does not fit the hole [6, 10) of 4 slots and waits.
    # Steps 0..3 (4 steps): 4 free slots no waiting request can use -> 16 slot-steps.
    # Step 4: A is done, B takes [0, 6) and nobody waits any more -> 0.
    reqs = [Request(2, 4), Request(3, 3)]
    s = sums_of(reqs, block_size=4, max_len=8, mode="continuous", memory_tokens=10)
    # tokens: A holds 3, 4, 5, 6 = 18; B holds 4, 5, 6 = 15 -> 33.
    # reserved: A 3+2+1+0 = 6; B 2+1+0 = 3 -> 9.
    assert s["oracle"] == {
        "token_states": 33,
        "reserved": 9,
        "internal_fragmentation": 0,
        "external_fragmentation": 16,
    }
    assert s["paged"]["external_fragmentation"] == 0


def test_fcfs_counts_holes_the_head_cannot_use_and_any_only_holes_nobody_can_use():
    # Memory 8. Sizes 5, 6, 2 arriving at step 0, each live 3 steps.
    # Step 0: #0 takes [0, 5); #1 (6) is the head and does not fit in [5, 8) (3 slots).
    #   fcfs: #1 blocks the queue, so all 3 slots are unusable for 3 steps -> 9.
    #   any: #2 (2 slots) could use the hole, so it does not count -> 0.
    # Step 3: #0 leaves, #1 takes [0, 6), #2 takes [6, 8): nothing waits.
    size, out, arr = [5, 6, 2], [3, 3, 3], [0, 0, 0]
    assert external_fragmentation(size, out, arr, 8, "fcfs") == 9
    assert external_fragmentation(size, out, arr, 8, "any") == 0


def test_static_mode_has_no_external_fragmentation_and_every_row_sums_to_one():
    reqs = workloads.synthetic("sharegpt", 300, seed=5)
    for mode in ("static", "continuous"):
        frac = waste.breakdown(reqs, 16, 2048, mode)
        assert set(frac) == {"paged", "max", "pow2", "oracle"}
        for parts in frac.values():
            assert sum(parts.values()) == pytest.approx(1.0)
        if mode == "static":
            assert all(p["external_fragmentation"] == 0 for p in frac.values())
    assert frac["max"]["external_fragmentation"] > 0  # 14,648 slots hold 7 regions of 2048


def brute_force(reqs, block_size, max_len):
    """The definitions, one decode step at a time."""
    out = {a: dict.fromkeys(waste.PARTS, 0) for a in waste.ALLOCATORS}
    for r in reqs:
        L = r.total_len
        for t in range(1, r.output_len + 1):
            cur = r.prompt_len + t
            for a, held in (
                ("paged", -(-cur // block_size) * block_size),
                ("max", max_len),
                ("pow2", 1 << (L - 1).bit_length()),
                ("oracle", L),
            ):
                reserved = 0 if a == "paged" else L - cur
                out[a]["token_states"] += r.num_seqs * cur
                out[a]["reserved"] += r.num_seqs * reserved
                out[a]["internal_fragmentation"] += r.num_seqs * (held - cur - reserved)
    return out


@settings(max_examples=40)
@given(
    st.lists(st.tuples(st.integers(1, 70), st.integers(1, 60), st.integers(1, 3)), max_size=6),
    st.sampled_from([1, 2, 3, 8, 16]),
)
def test_closed_forms_equal_the_step_by_step_definitions(rows, block_size):
    reqs = [Request(p, o, n=n) for p, o, n in rows]
    assert sums_of(reqs, block_size=block_size, max_len=130) == brute_force(reqs, block_size, 130)


def naive_external(size, out, arrival, memory):
    """First-fit FCFS, one step at a time (the event-driven version must agree)."""
    live, head, step, total, n = [], 0, 0, 0, len(size)
    while head < n or live:
        live = [(s, e, end) for s, e, end in live if end > step]
        while head < n and arrival[head] <= step:
            cursor, at = 0, None
            for s, e, _ in sorted(live):
                if s - cursor >= size[head]:
                    at = cursor
                    break
                cursor = e
            if at is None and memory - cursor >= size[head]:
                at = cursor
            if at is None:
                break
            live.append((at, at + size[head], step + out[head]))
            head += 1
        if head < n and arrival[head] <= step:
            edges = sorted((s, e) for s, e, _ in live)
            cursor, holes = 0, []
            for s, e in edges:
                holes.append(s - cursor)
                cursor = e
            holes.append(memory - cursor)
            total += sum(h for h in holes if 0 < h < size[head])
        step += 1
    return total


@settings(max_examples=40)
@given(
    st.lists(
        st.tuples(st.integers(1, 10), st.integers(1, 6), st.integers(0, 8)), min_size=1, max_size=8
    )
)
def test_event_driven_first_fit_equals_a_step_by_step_replay(rows):
    rows = sorted(rows, key=lambda r: r[2])
    size, out, arr = (list(c) for c in zip(*rows, strict=True))
    assert external_fragmentation(size, out, arr, 12) == naive_external(size, out, arr, 12)


def test_requests_longer_than_max_len_are_refused_by_name():
    with pytest.raises(ValueError, match="more than --max-len 64"):
        waste.breakdown([Request(60, 10)], 16, 64)
    with pytest.raises(ValueError, match=r"block_size must be an int in \[1, "):
        waste.breakdown([Request(6, 10)], 0, 64)


def test_waste_cli_prints_json_keyed_by_allocator(tmp_path, capsys):
    path = tmp_path / "t.csv"
    workloads.write_csv([Request(3, 2)], path)
    assert waste.main(["--trace", str(path), "--block-size", "4", "--max-len", "16", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert set(got) == {"paged", "max", "pow2", "oracle"}
    assert got["paged"]["token_states"] == 0.75
    assert cli.main(["waste", "--trace", str(tmp_path / "missing.csv")]) == 2
    err = capsys.readouterr().err
    assert "No such file" in err and err.count("\n") == 1


def test_waste_cli_table_names_every_part(capsys):
    assert (
        waste.main(["--workload", "alpaca", "--num-requests", "200", "--mode", "continuous"]) == 0
    )
    out = capsys.readouterr().out
    for word in (
        "token_states",
        "reserved",
        "internal_fragmentation",
        "external_fragmentation",
        "paged",
        "oracle",
    ):
        assert word in out


def test_next_pow2_and_ceil_sum_helpers():
    np.testing.assert_array_equal(
        waste.next_pow2(np.array([1, 2, 3, 5, 8, 9, 1025])), [1, 2, 4, 8, 8, 16, 2048]
    )
    # sum_{l=1..17} ceil(l/16) = 16 * 1 + 1 * 2 = 18
    assert waste.ceil_sum(np.array([17]), 16)[0] == 18
