"""A KV event stream as vLLM 0.34 (v1) really sends it, and as a hostile sender could: every
input is read, or refused with one ValueError line, or skipped with a counted, shown reason.

What vLLM 0.34's own code sends and pagedsim once got wrong (each seen from vLLM's
KVCacheManager; the oracle tier re-checks them with vLLM as the producer):
- a hybrid model caches every block hash once per KV cache group (full + sliding window),
  and removes it per group: a removal in group 1 must leave group 0's block cached;
- groups have different block sizes (a full group of 8, a window group of 4), so one
  stream carries several block_size values;
- extra_keys hold a multimodal item as an (identifier, offset) pair and a prompt-embeds
  digest as bytes;
- BlockStored gained locality, ownership, session_id and lookahead_token_ids.
"""

import io
import json
import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import kv_events as ke
from pagedsim import kv_stream as ks

msgspec = pytest.importorskip("msgspec", reason="the events extra: pip install -e .[events]")


def stored(hashes, group=0, medium="GPU", bs=1, parent=None, **extra):
    return ke.BlockStored(
        list(hashes),
        parent,
        [7] * (bs * len(hashes)),
        bs,
        medium=medium,
        group_idx=group,
        **extra,
    )


def payload(events, ts=1.0, rank=None) -> bytes:
    return msgspec.msgpack.encode([ts, [ke.event_to_json(e) for e in events], rank])


# ---- what vLLM 0.34 sends ----------------------------------------------------------------


def test_a_hash_cached_in_two_groups_stays_cached_in_the_one_it_was_not_removed_from():
    """Before: the second group's BlockStored counted as "already cached" and its removal took
    the one record away, so the page showed group 0's block evicted while vLLM still had it."""
    t = ke.timeline(
        [stored([5], group=0), stored([5], group=1), ke.BlockRemoved([5], "GPU", group_idx=1)]
    )
    assert [(r.event.group_idx, r.removed) for r in t.records] == [(0, None), (1, 3)]
    assert t.steps[1].added == [1] and t.steps[1].unknown == 0
    assert list(t.cached_at(3)) == [ke.BlockKey(0, "GPU", 5)]


def test_a_block_stored_twice_is_two_copies_and_one_removal_leaves_the_other():
    """vLLM 0.34 caches one hash under several blocks (BlockHashToBlockMap's _dup_ids: two
    requests computed the same block) and publishes a BlockStored for each and a BlockRemoved
    as each is evicted. Before, the second store was "already cached" and the first removal
    emptied the page while vLLM still held the other copy (found by the oracle's hybrid run:
    364 of 820 batches differed from vLLM's pool)."""
    t = ke.timeline([stored([5]), stored([5]), ke.BlockRemoved([5], "GPU", 0)])
    assert len(t.steps[1].added) == 1 and t.steps[1].copies == 1
    assert [r.removed for r in t.records] == [3, None]  # the earliest copy goes first
    assert list(t.cached_at(3)) == [ke.BlockKey(0, "GPU", 5)]
    assert ke.timeline([stored([5]), stored([5]), ke.BlockRemoved([5, 5], "GPU", 0)]).live == {}


def test_the_same_hash_on_the_gpu_and_on_the_cpu_tier_are_two_blocks():
    t = ke.timeline([stored([5]), stored([5], medium="CPU"), ke.BlockRemoved([5], "CPU", 0)])
    assert list(t.cached_at(3)) == [ke.BlockKey(0, "GPU", 5)]


def test_a_removal_without_group_idx_matches_a_store_in_group_0():
    """Older vLLM streams carry no group_idx: None is group 0, the only group."""
    t = ke.timeline([stored([5], group=None), ke.BlockRemoved([5], "GPU", group_idx=0)])
    assert t.cached_at(2) == {} and t.steps[1].unknown == 0


def test_groups_with_different_block_sizes_share_one_stream():
    """vLLM 0.34, a full group of 8 and a window group of 4 (hash_block_size 4): before, the
    whole stream was refused ("block_size 4 differs from the stream's 8")."""
    lines = [
        json.dumps(ke.event_to_json(stored([1, 2], group=0, bs=8))),
        json.dumps(ke.event_to_json(stored([3, 4, 5, 6], group=1, bs=4))),
    ]
    events = ke.read_stream(lines)
    assert [e.block_size for e in events] == [8, 4]
    snaps = ke.replay(events)
    assert snaps[-1].block_size == 8 and sorted(snaps[-1].block_fill) == [4, 4, 4, 4, 8, 8]


def test_multimodal_and_prompt_embeds_extra_keys_are_read_and_kept_as_json():
    """vLLM publishes an image as (mm identifier, offset) and prompt embeds as a sha256 digest:
    before, the BlockStored was refused, and with it the whole capture."""
    event = ke.event_to_json(stored([1, 2]))
    event["extra_keys"] = [["lora-a", ["mm-7f3a", 0], "salt"], [b"\x01\xfe" * 16]]
    (batch,) = [ks.decode_payload(msgspec.msgpack.encode([1.0, [event], 0]))]
    keys = batch.events[0].extra_keys
    assert keys == [["lora-a", ["mm-7f3a", 0], "salt"], ["01fe" * 16]]
    line = json.dumps(ke.batch_to_json(batch))
    assert ke.read_batches([line])[0].events == batch.events


def test_the_fields_vllm_0_34_added_survive_a_save_as_json_lines():
    event = ke.event_to_json(stored([1, 2], bs=2))
    event.update(
        locality="LOCAL", ownership="tier-2", session_id="s-1", lookahead_token_ids=[[4], [5]]
    )
    removed = {"type": "BlockRemoved", "block_hashes": [1], "medium": "GPU", "locality": "REMOTE"}
    batch = ks.decode_payload(msgspec.msgpack.encode([1.0, [event, removed], 0]))
    again = ke.read_batches([json.dumps(ke.batch_to_json(batch))])[0]
    assert again.events == batch.events
    first, second = again.events
    assert (first.locality, first.ownership, first.session_id) == ("LOCAL", "tier-2", "s-1")
    assert first.lookahead_token_ids == [[4], [5]] and second.locality == "REMOTE"


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("locality", 3, "locality must be"),
        ("session_id", "x" * 5000, "session_id must be"),
        ("lookahead_token_ids", [[1]], "lookahead_token_ids has 1 entries for 2 blocks"),
        ("lookahead_token_ids", [[1], [-1]], "lookahead_token_ids must be"),
        ("extra_keys", [[[[[1]]]], None], "extra_keys must be"),
    ],
)
def test_a_bad_new_field_is_refused_naming_it(field, value, why):
    event = {**ke.event_to_json(stored([1, 2])), field: value}
    with pytest.raises(ValueError, match=why):
        ke.event_from_json(event)


# ---- hostile bytes ---------------------------------------------------------------------------


@pytest.mark.parametrize("ts", [math.nan, math.inf, -math.inf])
def test_a_timestamp_that_is_not_finite_is_refused_in_msgpack_and_json(ts):
    with pytest.raises(ValueError, match="ts must be a finite number"):
        ks.decode_payload(payload([], ts=ts))
    line = json.dumps({"ts": ts, "events": [], "data_parallel_rank": None})  # NaN / Infinity
    with pytest.raises(ValueError, match="line 1: a batch's ts must be a finite number"):
        ke.read_batches([line])


def test_a_payload_over_the_limit_is_refused_before_it_is_decoded():
    big = b"\xc6" + (ks.MAX_PAYLOAD + 1).to_bytes(4, "big") + bytes(ks.MAX_PAYLOAD + 1)
    with pytest.raises(ValueError, match=f"over {ks.MAX_PAYLOAD >> 20} MiB"):
        ks.decode_payload(big)


def test_a_json_line_over_the_limit_is_refused_naming_it():
    line = "[" + "0," * (ke.MAX_LINE // 2) + "0]"
    with pytest.raises(ValueError, match=f"line 2: over {ke.MAX_LINE >> 20} MiB"):
        ke.read_batches(['{"type": "AllBlocksCleared"}', line])


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x91" * 200_000 + b"\xc0", "not msgpack"),  # deep nesting
        (b"\xdd\xff\xff\xff\xff", "not msgpack"),  # an array claiming 4 billion items
        (b"\x93\xcb\x3f\xf0" + bytes(6) + b"\x91\xd4\x05\x00\xc0", "msgpack ext type 5"),
        (b"\x93\xcb\x3f\xf0" + bytes(6) + b"\x90\xd6\xff" + bytes(4), "msgpack ext type -1"),
        (b"\x81\x01\x02", "a map key must be text"),
        (b"\x93\xcb\x3f\xf0" + bytes(6) + b"\x91\xa2\xff\xfe\xc0", "not msgpack"),  # bad UTF-8
    ],
)
def test_hostile_msgpack_is_one_value_error(data, why):
    with pytest.raises(ValueError, match=why):
        ks.decode_payload(data)


def test_a_hash_int_outside_64_bits_is_refused():
    with pytest.raises(ValueError, match="block_hashes must be"):
        ke.event_from_json({**ke.event_to_json(stored([1])), "block_hashes": [1 << 64]})
    assert ke.event_from_json(ke.event_to_json(stored([(1 << 64) - 1, -(1 << 63)]))).block_hashes


MSGPACK_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(1 << 63), (1 << 64) - 1),
        st.floats(),
        st.text(max_size=6),
        st.binary(max_size=6),
        st.builds(lambda c, d: msgspec.msgpack.Ext(c, d), st.integers(-128, 127), st.binary()),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(["type", "events", "block_hashes", "token_ids", "block_size"])
            | st.sampled_from(sorted(ke.FIELD_RULES))
            | st.sampled_from(["ts", "seq", "topic", "replayed", "refused", "unread"]),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=24,
)


@settings(max_examples=300)
@given(MSGPACK_VALUES)
def test_any_msgpack_value_is_a_batch_or_one_value_error(value):
    try:
        data = msgspec.msgpack.encode(value)
    except (TypeError, msgspec.EncodeError):  # the timestamp ext code is the encoder's own
        return
    _one_error_or_a_batch(data)


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_any_bytes_are_a_batch_or_one_value_error(data):
    _one_error_or_a_batch(data)


@given(st.lists(st.one_of(st.builds(lambda h: stored([h]), st.integers(0, 5))), max_size=4))
def test_every_cut_of_a_real_payload_is_refused(events):
    data = payload(events, rank=0)
    assert ks.decode_payload(data).events == events
    for cut in range(len(data)):
        with pytest.raises(ValueError):
            ks.decode_payload(data[:cut])


def _one_error_or_a_batch(data: bytes) -> None:
    try:
        batch = ks.decode_payload(data)
    except ValueError as e:
        assert "\n" not in str(e) and len(str(e)) < 300
        return
    json.dumps(ke.batch_to_json(batch), allow_nan=False)  # it is plain, finite JSON data
    assert all(type(e) in ke.EVENT_TYPES.values() for e in batch.events)


@settings(max_examples=200)
@given(st.binary(max_size=120))
def test_any_capture_body_is_read_or_one_value_error(body):
    try:
        ks.batches_of_capture(ks.MAGIC + body)
    except ValueError as e:
        assert "\n" not in str(e)


# ---- what arrives is what is applied -----------------------------------------------------

KEYS = st.tuples(st.sampled_from([0, 1]), st.sampled_from(["GPU", "CPU"]), st.integers(0, 6))
STREAM = st.lists(
    st.one_of(
        st.lists(KEYS, min_size=1, max_size=3).map(lambda ks_: ("store", ks_)),
        st.lists(KEYS, min_size=1, max_size=3).map(lambda ks_: ("remove", ks_)),
        st.just(("clear", [])),
    ),
    max_size=30,
)


def _events(ops) -> list:
    """Streams that repeat, remove before storing, remove twice and clear mid-way; one event
    names blocks of one group and medium, as vLLM's does."""
    out: list = []
    for kind, keys in ops:
        if kind == "clear":
            out.append(ke.AllBlocksCleared())
            continue
        group, medium = keys[0][:2]
        hashes = [h for _, _, h in keys]
        if kind == "store":
            out.append(stored(hashes, group=group, medium=medium))
        else:
            out.append(ke.BlockRemoved(hashes, medium, group))
    return out


@given(STREAM)
def test_every_event_is_applied_or_its_skipped_blocks_are_counted(ops):
    """A model of the cache (how many copies of each (group, medium, hash)) after every event;
    every block a removal names was either applied or counted in `unknown`, never dropped."""
    events = _events(ops)
    t = ke.timeline(events)
    assert len(t.steps) == len(events)
    model: Counter = Counter()
    for k, (e, step) in enumerate(zip(events, t.steps, strict=True), 1):
        if isinstance(e, ke.AllBlocksCleared):
            assert len(step.removed) == model.total()
            model.clear()
        elif isinstance(e, ke.BlockStored):
            keys = [ke.BlockKey(e.group_idx or 0, e.medium, h) for h in e.block_hashes]
            assert len(step.added) == len(keys) and step.unknown == 0
            assert step.copies == sum(1 for i, x in enumerate(keys) if model[x] or x in keys[:i])
            model.update(keys)
        else:
            gone = 0
            for h in e.block_hashes:
                x = ke.BlockKey(e.group_idx or 0, e.medium, h)
                if model[x]:
                    model[x] -= 1
                    gone += 1
            assert len(step.removed) == gone and gone + step.unknown == len(e.block_hashes)
        assert Counter(_keys_at(t, k)) == +model


def _keys_at(t: ke.Timeline, k: int) -> list:
    """Every cached copy after event k, by key (`cached_at` keeps one record per key)."""
    return [
        ke.BlockKey(r.event.group_idx or 0, r.event.medium, r.hash)
        for r in t.records
        if r.stored <= k and (r.removed is None or r.removed > k)
    ]


# ---- the live subscriber -----------------------------------------------------------------


@pytest.fixture
def subscriber():
    pytest.importorskip("zmq", reason="the events extra: pip install -e .[events]")
    from pagedsim.kv_subscriber import Subscriber

    sub = Subscriber("tcp://127.0.0.1:*", bind=True)  # no peer: messages are handed to take()
    yield sub
    sub.close()


def message(seq: int, events, topic: bytes = b"kv") -> list[bytes]:
    return [topic, seq.to_bytes(8, "big", signed=True), payload(events, rank=0)]


def test_a_restarted_publisher_s_batches_are_kept_and_noted(subscriber):
    """vLLM's seq starts at 0 again when the server restarts. Before, every batch of the new
    run whose seq the old run had used was dropped unseen ("a replay of a batch already
    here"): 2 of these 5 batches were lost."""
    for seq, h in [(0, 1), (1, 2), (2, 3), (0, 4), (1, 5)]:
        subscriber.take(message(seq, [stored([h])]), replayed=False)
    assert [b.events[0].block_hashes for b in subscriber.batches()] == [[1], [2], [3], [4], [5]]
    assert subscriber.num_events == 5
    notes = [n for _, ns in ks.sequence_notes(subscriber.batches()) for n in ns]
    assert notes == ["seq 0 again after 2 (a replay or a restarted publisher)"]


def test_a_replayed_batch_already_here_is_dropped_but_a_missing_one_goes_in_its_place(subscriber):
    for seq in (0, 2):
        subscriber.take(message(seq, [stored([seq])]), replayed=False)
    for seq in (0, 1, 2):
        subscriber.take(message(seq, [stored([seq])]), replayed=True)
    assert [b.seq for b in subscriber.batches()] == [0, 1, 2]
    assert [b.replayed for b in subscriber.batches()] == [False, True, False]


def test_a_refused_message_is_counted_and_shown_where_it_arrived(subscriber, capsys):
    """Before, a bad message was one stderr line and then looked like a seq gap on the page
    ("never arrived"), which it did not."""
    subscriber.take(message(0, [stored([1])]), replayed=False)
    subscriber.take([b"kv", (1).to_bytes(8, "big"), b"\xc1"], replayed=False)
    subscriber.take([b"kv", b"\x00"], replayed=False)  # no seq to place it by
    subscriber.take(message(2, [stored([2])]), replayed=False)
    assert subscriber.refused == 2 and subscriber.num_events == 2
    assert capsys.readouterr().err.count("a KV event message refused") == 2
    notes = [n for _, ns in ks.sequence_notes(subscriber.batches()) for n in ns]
    assert len(notes) == 1 and notes[0].startswith("seq 1 refused: not msgpack (")
    saved = [json.dumps(ke.batch_to_json(b)) for b in subscriber.batches()]
    why = notes[0].removeprefix("seq 1 refused: ")
    assert [b.refused for b in ke.read_batches(saved)] == [None, why, None]


def test_the_subscriber_caps_what_zmq_may_buffer_for_it(subscriber):
    zmq = pytest.importorskip("zmq")
    assert subscriber._sub.getsockopt(zmq.MAXMSGSIZE) == ks.MAX_FRAME
    assert subscriber._sub.getsockopt(zmq.RCVHWM) == 0  # ZMQ drops nothing for a slow page


# ---- files -----------------------------------------------------------------------------------


def test_a_stream_whose_first_line_is_cut_is_named_as_a_stream_with_its_line(tmp_path):
    """Before: `view` said "not JSON (Expecting ',' delimiter at line 3)" and `play --events`
    called the file "a JSON trace, not an event stream (use --trace)"."""
    path = tmp_path / "e.jsonl"
    good = json.dumps(ke.event_to_json(stored([1])))
    path.write_text('{"ts": 1.5, "events": [\n' + good + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="^line 1: "):
        ks.read_any(path, 1 << 20)


def test_an_int_too_long_to_read_is_one_plain_line():
    line = '{"type": "BlockRemoved", "block_hashes": [' + "9" * 5000 + '], "medium": "GPU"}'
    with pytest.raises(ValueError, match="^line 1: an integer of over 4,300 digits$"):
        ke.read_batches([line])


def test_a_gap_that_opens_while_a_replay_is_answered_is_asked_for_after_it(tmp_path):
    """vLLM's replay socket answers one request with the batches it buffers from a seq on,
    then seq -1. Before, a second gap opening meanwhile was never asked for: its batches
    stayed "never arrived" although vLLM still buffered them."""
    zmq = pytest.importorskip("zmq", reason="the events extra: pip install -e .[events]")
    from pagedsim.kv_subscriber import Subscriber

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    sub = Subscriber("tcp://127.0.0.1:*", bind=True, replay_endpoint=f"tcp://127.0.0.1:{port}")
    try:
        sub.take(message(0, [stored([0])]), replayed=False)
        sub.take(message(2, [stored([2])]), replayed=False)  # 1 missing: asked from 1
        sub.take(message(4, [stored([4])]), replayed=False)  # 3 missing: a replay is under way
        sub.take(message(1, [stored([1])]), replayed=True)
        sub.take([b"", (-1).to_bytes(8, "big", signed=True), b""], replayed=True)  # its end
        asked = []
        while router.poll(2000) and len(asked) < 2:
            asked.append(int.from_bytes(router.recv_multipart()[-1], "big"))
        assert asked == [1, 3]
        sub.take(message(3, [stored([3])]), replayed=True)
        sub.take([b"", (-1).to_bytes(8, "big", signed=True), b""], replayed=True)
        assert [b.seq for b in sub.batches()] == [0, 1, 2, 3, 4]
        assert not router.poll(300)  # nothing missing: nothing asked again
    finally:
        sub.close()
        ctx.destroy(linger=0)


def test_extra_array_elements_are_refused_not_read_past():
    """vLLM's decoder refuses an EventBatch array longer than its 3 fields, and an event array
    longer than its struct's; pagedsim dropped the extra values unseen."""
    event = ["BlockRemoved", [1], "GPU"]
    with pytest.raises(ValueError, match="a batch array has 2 or 3 elements, got 4"):
        ks.decode_payload(msgspec.msgpack.encode([1.0, [], 0, "more"]))
    assert ke.event_from_json(event) == ke.BlockRemoved([1], "GPU")
    with pytest.raises(ValueError, match="BlockRemoved: 3 values after the tag, at most 2"):
        ke.event_from_json([*event, 0])


def test_a_stream_that_mixes_data_parallel_ranks_is_refused_naming_where(subscriber):
    """Each data-parallel rank of vLLM has its own pool and its own publisher (port + rank):
    the same hash on two ranks is two blocks, and one rank's AllBlocksCleared leaves the
    other's. A replay of one mixed stream merged them unseen; now it is refused."""
    event = ke.event_to_json(stored([1]))
    lines = [
        json.dumps({"ts": 1.0, "events": [event], "data_parallel_rank": r}) for r in (0, None, 1)
    ]
    with pytest.raises(ValueError, match="^line 3: data_parallel_rank 1 in a stream of rank 0"):
        ke.read_batches(lines)
    capture = io.BytesIO()
    capture.write(ks.MAGIC)
    for seq, rank in enumerate((0, 1)):
        ks.write_message(capture, [b"kv", seq.to_bytes(8, "big"), payload([], rank=rank)])
    with pytest.raises(ValueError, match="^message 2: data_parallel_rank 1 in a stream of rank 0"):
        ks.batches_of_capture(capture.getvalue())
    subscriber.take(message(0, [stored([1])]), replayed=False)
    subscriber.take([b"kv", (1).to_bytes(8, "big"), payload([stored([2])], rank=3)], False)
    assert subscriber.refused == 1 and subscriber.num_events == 1
    why = subscriber.batches()[1].refused
    assert why is not None and why.startswith("data_parallel_rank 3 in a stream of rank 0")


def test_a_field_pagedsim_does_not_know_is_named_on_the_page_not_dropped_unseen():
    """A newer vLLM may add a field (0.34 added four). It is read past, as msgspec's own
    decoder does, but the batch names it, and the page shows it."""
    event = {**ke.event_to_json(stored([1])), "tenant": "a", "priority": 3}
    batch = ks.decode_payload(msgspec.msgpack.encode([1.0, [event, {"type": "AllBlocksCleared"}]]))
    assert batch.unread == ["BlockStored.priority", "BlockStored.tenant"]
    notes = [n for _, ns in ks.sequence_notes([batch]) for n in ns]
    assert notes == [
        "read past fields pagedsim does not know: BlockStored.priority, BlockStored.tenant"
    ]
    again = ke.read_batches([json.dumps(ke.batch_to_json(batch))])[0]
    assert again.unread == batch.unread


@pytest.mark.parametrize("unread", [5, "x", [1], ["x" * 300], None])
def test_a_bad_unread_list_is_one_value_error_from_msgpack_and_json(unread):
    with pytest.raises(ValueError, match="unread must be"):
        ks.decode_payload(msgspec.msgpack.encode({"ts": 1.0, "events": [], "unread": unread}))
    with pytest.raises(ValueError, match="line 1: unread must be"):
        ke.read_batches([json.dumps({"ts": 1.0, "events": [], "unread": unread})])
