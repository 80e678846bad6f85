"""Fuzz rows for the entry points added with vLLM v1's mechanisms, and for issue 21's core
inputs: every bad argument is a clear TypeError/ValueError and changes nothing."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import KVCacheManager
from pagedsim.kv_events import read_stream
from pagedsim.policies import PrefixCachingManager, SlidingWindowPrefixCachingManager
from pagedsim.policies.hybrid import HybridManager
from pagedsim.scheduler import make_scheduler
from pagedsim.workloads import Request
from tests.fuzz.kit import WRONG_TYPES
from tests.helpers import manager_state

ANY = st.one_of(
    WRONG_TYPES, st.integers(-5, 5), st.text(max_size=3), st.lists(st.integers(-2, 3), max_size=3)
)


def busy_cache():
    m = PrefixCachingManager(8, 2, enable_kv_cache_events=True)
    m.allocate_slots("a", 5, new_token_ids=[1, 2, 3, 4, 5])
    m.take_events()
    return m


@pytest.mark.parametrize("hash_fn", [5, "x", None, 1.5, [hash]])
def test_a_hash_function_that_is_not_callable_is_refused_at_construction(hash_fn):
    with pytest.raises(TypeError, match="hash_fn must be callable"):
        PrefixCachingManager(8, 4, hash_fn=hash_fn)


@pytest.mark.parametrize("requests", [[(4, 3)], [Request(4, 3), "r"], "abc", 5, [None]])
def test_requests_that_are_not_requests_are_a_type_error(requests):
    for mode in ("v0", "v1"):
        m = KVCacheManager(16, 4)
        with pytest.raises(TypeError, match="Request"):
            make_scheduler(requests, m, mode=mode)
        assert m.reclaimer is None and m.step == 0


@pytest.mark.parametrize("manager", [None, 5, "m", object()])
def test_a_missing_manager_is_a_type_error_in_both_modes(manager):
    for mode in ("v0", "v1"):
        with pytest.raises(TypeError, match="manager must be a KVCacheManager"):
            make_scheduler([Request(4, 3)], manager, mode=mode)


@pytest.mark.parametrize("record", ["yes", 1, None, 0.0])
def test_record_must_be_a_bool(record):
    for mode in ("v0", "v1"):
        m = KVCacheManager(16, 4)
        with pytest.raises(TypeError, match="record must be a bool"):
            make_scheduler([Request(4, 3)], m, mode=mode, record=record)
        assert m.reclaimer is None


@settings(max_examples=60)
@given(
    st.sampled_from(
        ["policy", "long_prefill_token_threshold", "max_model_len", "arrival_times", "priorities"]
    ),
    ANY,
)
def test_bad_v1_scheduler_options_are_refused_and_the_manager_is_untouched(name, value):
    good = {
        "policy": "fcfs",
        "long_prefill_token_threshold": 0,
        "max_model_len": 100,
        "arrival_times": [0.0],
        "priorities": [0],
    }
    # None is the default of every option here but policy (whose default is "fcfs")
    if (
        value == good[name]
        or (value is None and name != "policy")
        or (
            name == "max_model_len"
            and isinstance(value, int)
            and not isinstance(value, bool)
            and value >= 7
        )
        or (name == "long_prefill_token_threshold" and type(value) is int and value >= 0)
        or (
            name == "arrival_times"
            and isinstance(value, (list, tuple))
            and len(value) == 1
            and type(value[0]) is int
            and value[0] >= 0
        )
        or (
            name == "priorities"
            and isinstance(value, (list, tuple))
            and len(value) == 1
            and type(value[0]) is int
        )
        or (name in ("arrival_times", "priorities") and value is None)
        or (name == "policy" and value == "priority")
    ):
        return  # a valid value (None: the column not given; max_model_len has no None)
    m = PrefixCachingManager(16, 4)
    before = manager_state(m)
    with pytest.raises((TypeError, ValueError)):
        make_scheduler([Request(4, 3)], m, mode="v1", **{name: value})
    assert manager_state(m) == before and m.reclaimer is None


@pytest.mark.parametrize(
    "times, error",
    [
        ([math.nan], ValueError),
        ([math.inf], ValueError),
        ([-1.0], ValueError),
        (["1"], TypeError),
        ([True], TypeError),
        ([1.0, 2.0], ValueError),
    ],
)
def test_arrival_times_must_be_finite_non_negative_numbers_one_per_request(times, error):
    with pytest.raises(error):
        make_scheduler([Request(4, 3)], KVCacheManager(16, 4), mode="v1", arrival_times=times)


@settings(max_examples=80)
@given(
    st.sampled_from(
        [
            "get_computed_blocks",
            "allocate_slots",
            "evict_blocks",
            "blocks_to_extend",
            "get_num_common_prefix_blocks",
            "take_events",
        ]
    ),
    ANY,
    ANY,
)
def test_the_new_cache_calls_refuse_bad_arguments_with_nothing_changed(call, x, y):
    m = busy_cache()
    before = manager_state(m)
    cached = sorted(m.pool._key)
    calls = {
        "get_computed_blocks": lambda: m.get_computed_blocks(x, cache_salt=y),
        "allocate_slots": lambda: m.allocate_slots("a", x, y),
        "evict_blocks": lambda: m.pool.evict_blocks(x if not isinstance(x, list) else x + [y]),
        "blocks_to_extend": lambda: m.blocks_to_extend("a", x, y),
        "get_num_common_prefix_blocks": lambda: m.get_num_common_prefix_blocks("a", x),
        "take_events": lambda: m.take_events(),
    }
    try:
        calls[call]()
    except (TypeError, ValueError):
        assert manager_state(m) == before and sorted(m.pool._key) == cached
        assert m.take_events() == []
    m.check_invariants()


@settings(max_examples=40)
@given(ANY, ANY)
def test_hybrid_and_window_managers_refuse_bad_constructor_arguments(window, blocks):
    for make in (
        lambda: HybridManager(blocks, 2, sliding_window=window),
        lambda: SlidingWindowPrefixCachingManager(blocks, 2, sliding_window=window),
        lambda: PrefixCachingManager(blocks, 2, group_idx=window),
    ):
        try:
            m = make()
        except (TypeError, ValueError):
            continue
        m.check_invariants()


@settings(max_examples=60)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=20),
            st.just('{"type": "BlockStored"}'),
            st.just('[1, [["BlockRemoved", [1, 2], null]]]'),
            st.just('{"events": [{"type": "BlockRemoved", "block_hashes": [1.5]}]}'),
        ),
        max_size=4,
    )
)
def test_any_event_stream_reads_or_is_refused_with_a_value_error(lines):
    try:
        events = read_stream(lines)
    except ValueError as e:
        assert str(e).startswith("line ")
    else:
        assert isinstance(events, list)


@pytest.mark.parametrize("mode, error", [(5, TypeError), ("v2", ValueError), (None, TypeError)])
def test_make_scheduler_refuses_an_unknown_mode(mode, error):
    from pagedsim.scheduler import make_scheduler

    m = KVCacheManager(16, 4)
    with pytest.raises(error, match="mode"):
        make_scheduler([Request(4, 3)], m, mode=mode)
    assert m.reclaimer is None


@pytest.mark.parametrize("name, error", [("lifo", ValueError), (3, TypeError), (None, TypeError)])
def test_an_unknown_scheduling_policy_is_refused(name, error):
    from pagedsim.request_queue import make_request_queue

    with pytest.raises(error, match="policy"):
        make_request_queue(name)


@pytest.mark.parametrize(
    "num_cpu_blocks, error",
    [(-1, ValueError), (2.5, TypeError), ("8", TypeError), (1 << 30, ValueError)],
)
def test_a_host_pool_of_a_bad_size_is_refused(num_cpu_blocks, error):
    from pagedsim.policies import HostPool, make_policy

    with pytest.raises(error, match="num_cpu_blocks"):
        HostPool(num_cpu_blocks)
    with pytest.raises(error, match="num_cpu_blocks"):
        make_policy("swap", num_cpu_blocks=num_cpu_blocks)


@pytest.mark.parametrize(
    "window",
    [["--sliding-window", "0"], ["--sliding-window", "x"], ["--sliding-window", "1.5"], []],
)
def test_play_hybrid_with_a_bad_or_no_window_exits_2_with_one_line(window, capsys):
    from pagedsim.app import play

    with pytest.raises(SystemExit) as e:
        play.main(["--hybrid", *window])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err) and "sliding-window" in err[-1]
