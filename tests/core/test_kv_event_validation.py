"""KV cache events are checked field by field, a stream may change its block size, parsing
has no recursion limit, and a huge stream is printed whole, one line per event (only its figures
are summarised)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import kv_events as ke
from pagedsim.app import play
from pagedsim.story import caption

TOKEN = st.integers(0, ke.MAX_ID)
HASH = st.one_of(
    st.integers(-(1 << 63), (1 << 64) - 1), st.text("0123456789abcdef", min_size=1, max_size=64)
)


@st.composite
def stored_events(draw, block_size=None):
    bs = draw(st.integers(1, 8)) if block_size is None else block_size
    n = draw(st.integers(1, 4))
    kind = draw(st.sampled_from([None, *ke.SPEC_KINDS]))
    return ke.BlockStored(
        block_hashes=draw(st.lists(HASH, min_size=n, max_size=n)),
        parent_block_hash=draw(st.one_of(st.none(), HASH)),
        token_ids=draw(st.lists(TOKEN, min_size=n * bs, max_size=n * bs)),
        block_size=bs,
        lora_id=draw(st.one_of(st.none(), st.integers(1, ke.MAX_ID))),
        medium=draw(st.sampled_from([None, "GPU", "CPU"])),
        lora_name=draw(st.one_of(st.none(), st.text(max_size=8))),
        extra_keys=draw(
            st.one_of(
                st.none(),
                st.lists(
                    st.one_of(
                        st.none(),
                        st.lists(st.one_of(st.text(max_size=4), st.integers()), max_size=2),
                    ),
                    min_size=n,
                    max_size=n,
                ),
            )
        ),
        group_idx=draw(st.one_of(st.none(), st.integers(0, 3))),
        kv_cache_spec_kind=kind,
        kv_cache_spec_sliding_window=draw(st.integers(1, 4096))
        if kind == "sliding_window"
        else None,
    )


@st.composite
def removed_events(draw):
    return ke.BlockRemoved(
        draw(st.lists(HASH, min_size=1, max_size=4)),
        draw(st.sampled_from([None, "GPU", "CPU"])),
        draw(st.one_of(st.none(), st.integers(0, 3))),
    )


def streams(block_size):
    return st.lists(
        st.one_of(stored_events(block_size), removed_events(), st.just(ke.AllBlocksCleared())),
        max_size=12,
    )


@given(st.integers(1, 8).flatmap(streams))
def test_every_valid_event_reads_back_as_written(events):
    lines = [json.dumps(ke.event_to_json(e)) for e in events]
    assert ke.read_stream(lines) == events


# Per field: values of the right JSON shape but a wrong type or range.
WRONG = {
    "block_hashes": st.one_of(
        st.just([]),
        st.just(5),
        st.lists(
            st.one_of(st.booleans(), st.floats(allow_nan=False), st.just(""), st.none()),
            min_size=1,
            max_size=2,
        ),
    ),
    "parent_block_hash": st.one_of(
        st.booleans(), st.floats(allow_nan=False), st.just([1]), st.just("")
    ),
    "token_ids": st.one_of(
        st.just(5),
        st.just("1234"),
        st.lists(
            st.one_of(
                st.integers(max_value=-1),
                st.integers(min_value=ke.MAX_ID + 1),
                st.booleans(),
                st.floats(allow_nan=False),
                st.text(max_size=2),
            ),
            min_size=1,
            max_size=1,
        ),
    ),
    "block_size": st.one_of(
        st.integers(max_value=0),
        st.integers(min_value=ke.MAX_BLOCK_SIZE + 1),
        st.booleans(),
        st.floats(allow_nan=False),
        st.text(max_size=2),
    ),
    "lora_id": st.one_of(
        st.integers(max_value=0),
        st.integers(min_value=ke.MAX_ID + 1),
        st.just("x"),
        st.just(1.5),
        st.just({}),
        st.booleans(),
    ),
    "medium": st.one_of(st.integers(), st.just(""), st.just([]), st.booleans()),
    "lora_name": st.one_of(st.integers(), st.just([]), st.booleans(), st.floats(allow_nan=False)),
    "extra_keys": st.one_of(st.integers(), st.just("k"), st.just([5]), st.just([[1.5]])),
    "group_idx": st.one_of(
        st.integers(max_value=-1),
        st.just("x"),
        st.just(0.0),
        st.booleans(),
        st.integers(min_value=ke.MAX_GROUP_IDX + 1),
    ),
    "kv_cache_spec_kind": st.one_of(st.just("bogus"), st.integers(), st.just("")),
    "kv_cache_spec_sliding_window": st.one_of(
        st.integers(max_value=0), st.just("8"), st.just(8.0), st.booleans()
    ),
}


@settings(max_examples=150)
@given(st.data(), st.one_of(stored_events(), removed_events()))
def test_a_field_of_the_wrong_type_or_range_is_refused_naming_the_field_and_line(data, event):
    obj = ke.event_to_json(event)
    name = data.draw(st.sampled_from(sorted(set(WRONG) & set(event.__dataclass_fields__))))
    obj[name] = data.draw(WRONG[name])
    if name == "kv_cache_spec_sliding_window":
        obj["kv_cache_spec_kind"] = "sliding_window"
    lines = ['{"type": "AllBlocksCleared"}', json.dumps(obj)]
    with pytest.raises(ValueError, match=f"^line 2: {type(event).__name__}: .*{name}"):
        ke.read_stream(lines)


@pytest.mark.parametrize(
    "field, value",
    [
        ("lora_id", "x"),
        ("lora_id", -1),
        ("lora_id", 1.5),
        ("lora_id", {}),
        ("medium", 5),
        ("lora_name", 7),
        ("group_idx", -1),
        ("group_idx", "x"),
        ("kv_cache_spec_kind", "bogus"),
        ("extra_keys", 5),
        ("token_ids", [-1, 0]),
        ("token_ids", [2**64, 0]),
    ],
)
def test_the_fields_the_fuzz_run_found_unchecked_are_refused(field, value):
    obj = {
        "type": "BlockStored",
        "block_hashes": [1],
        "parent_block_hash": None,
        "token_ids": [1, 2],
        "block_size": 2,
        field: value,
    }
    with pytest.raises(ValueError, match=field):
        ke.event_from_json(obj)


@pytest.mark.parametrize("field, value", [("medium", 5), ("group_idx", -1), ("group_idx", "x")])
def test_a_block_removed_checks_its_fields_too(field, value):
    with pytest.raises(ValueError, match=f"BlockRemoved: {field}"):
        ke.event_from_json({"type": "BlockRemoved", "block_hashes": [1], field: value})


def test_a_window_on_a_full_attention_block_and_a_short_extra_keys_list_are_refused():
    base = {
        "type": "BlockStored",
        "block_hashes": [1, 2],
        "parent_block_hash": None,
        "token_ids": [1, 2],
        "block_size": 1,
    }
    with pytest.raises(ValueError, match="only for kv_cache_spec_kind 'sliding_window'"):
        ke.event_from_json(
            {**base, "kv_cache_spec_kind": "full_attention", "kv_cache_spec_sliding_window": 4}
        )
    with pytest.raises(ValueError, match="extra_keys has 1 entries for 2 blocks"):
        ke.event_from_json({**base, "extra_keys": [None]})


@given(st.integers(1, 8), st.integers(1, 8), st.data())
def test_a_stream_may_carry_several_block_sizes_and_is_drawn_at_its_largest(first, second, data):
    """vLLM 0.34's groups differ in block size (and a partial prefix block is stored at the
    hash block size), so a change is no longer refused (test_kv_stream_hostile has vLLM's)."""
    a = data.draw(stored_events(first))
    b = data.draw(stored_events(second))
    lines = [json.dumps(ke.event_to_json(e)) for e in (a, ke.AllBlocksCleared(), b)]
    snaps = ke.replay(ke.read_stream(lines))
    assert len(snaps) == 4 and snaps[-1].block_size == max(first, second)
    assert all(0 <= f <= s.block_size for s in snaps for f in s.block_fill)


@given(st.integers(1, 8).flatmap(streams))
def test_utf8_bytes_lines_read_as_their_text(events):
    lines = [json.dumps(ke.event_to_json(e)) for e in events]
    assert ke.read_stream([line.encode() for line in lines]) == ke.read_stream(lines)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b'{"type": "AllBlocksCleared"}\xff', "line 2: not UTF-8 text"),
        (7, "line 2: expected a line of text, got int"),
        (None, "line 2: expected a line of text, got NoneType"),
    ],
)
def test_a_line_that_is_not_text_is_one_value_error(line, why):
    with pytest.raises(ValueError, match=why):
        ke.read_stream(['{"type": "AllBlocksCleared"}', line])


@pytest.mark.parametrize("line", ["[" * 100_000, '{"a": ' * 50_000, "[" * 33 + "]" * 33])
def test_deep_nesting_is_a_clean_value_error_not_a_recursion_error(line):
    with pytest.raises(ValueError, match="line 1: nested deeper than"):
        ke.read_stream([line])


def test_brackets_inside_strings_do_not_count_as_nesting():
    text = "[" * 100 + '\\"{'
    line = json.dumps(
        {
            "type": "BlockStored",
            "block_hashes": [1],
            "parent_block_hash": None,
            "token_ids": [1],
            "block_size": 1,
            "lora_name": text,
        }
    )
    (event,) = ke.read_stream([line])
    assert event.lora_name == text


@settings(max_examples=100)
@given(
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=4), st.floats()),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(
                st.sampled_from(
                    [
                        "type",
                        "events",
                        "block_hashes",
                        "token_ids",
                        "block_size",
                        "medium",
                        "group_idx",
                    ]
                ),
                inner,
                max_size=4,
            ),
        ),
        max_leaves=20,
    )
)
def test_any_json_value_reads_or_is_refused_with_a_line_number(value):
    try:
        events = ke.read_stream([json.dumps(value)])
    except ValueError as e:
        assert str(e).startswith("line 1: ")
    else:
        assert all(type(e) in ke.EVENT_TYPES.values() for e in events)


@given(st.integers(1, 4).flatmap(streams), st.data())
def test_replaying_some_frames_gives_those_frames_of_the_full_replay(events, data):
    full = ke.replay(events)
    frames = sorted(data.draw(st.sets(st.integers(0, len(events)))))
    assert ke.replay(events, frames) == [full[k] for k in frames]


@given(st.integers(1, 4).flatmap(streams), st.integers(1, 6))
def test_a_summarised_snapshot_fits_its_limits_and_only_points_inside_its_pool(events, blocks):
    for snap in ke.replay(events):
        small = ke.summarised(snap, blocks)
        assert small.num_gpu_blocks <= blocks
        assert len(small.ref_counts) == len(small.block_fill) == small.num_gpu_blocks
        assert all(b < small.num_gpu_blocks for b in small.cached_blocks)
        if small is snap:
            assert snap.num_gpu_blocks <= blocks
        else:
            assert "[summary: " in caption(small)


def test_a_huge_stream_is_printed_one_line_per_event(tmp_path, capsys):
    """Before, 8 of 1,001 events were printed (the first and last 4); now every one is."""
    path = tmp_path / "e.jsonl"
    big = {
        "type": "BlockStored",
        "block_hashes": list(range(1, 20_001)),
        "parent_block_hash": None,
        "token_ids": [1] * 20_000,
        "block_size": 1,
    }
    ones = [
        {
            "type": "BlockStored",
            "block_hashes": [-k],
            "parent_block_hash": None,
            "token_ids": [k],
            "block_size": 1,
        }
        for k in range(1, 1_001)
    ]
    path.write_text("\n".join(json.dumps(e) for e in [big, *ones]), encoding="utf-8")
    assert play.main(["--width", "100", "--events", str(path)]) == 0
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("event ")]
    assert [line.split(":")[0] for line in out] == [f"event {k}" for k in range(1, 1002)]
    assert "blocks 00000001, 00000002" in out[0]
    assert (
        out[-1]
        == f"event 1001: BlockStored: block {ke.short_hash(-1000)} cached after a prompt's start"
    )


def test_play_events_refuses_a_bad_field_in_one_line_with_exit_2(tmp_path, capsys):
    path = tmp_path / "e.jsonl"
    path.write_text(
        json.dumps({"type": "BlockRemoved", "block_hashes": [1], "medium": 5}), encoding="utf-8"
    )
    with pytest.raises(SystemExit) as stop:
        play.main(["--events", str(path)])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and "line 1: BlockRemoved: medium must be" in err
    assert len(err.splitlines()) == 1


def test_a_removal_that_names_a_block_twice_evicts_it_once():
    """Found by Hypothesis: BlockRemoved([h, h]) raised KeyError in replay."""
    stored = ke.BlockStored([5], None, [1], 1)
    snaps = ke.replay([stored, ke.BlockRemoved([5, 5]), ke.BlockStored([6], None, [2], 1)])
    assert "1 not cached here" in caption(snaps[2])
    assert snaps[2].cached_blocks == () and snaps[3].cached_blocks == (0,)
