"""One classifier, one table per language: every story is told in every language, the
tables agree on their keys, snapshots hold no sentences, and own words are explicit."""

import re
from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedsim import story as sy
from pagedsim import trace as tr
from pagedsim.errors import OutOfBlocks, SequenceError
from pagedsim.io import trace_json
from pagedsim.io.trace_json import snapshots_from_dict
from pagedsim.manager import KVCacheManager
from pagedsim.policies.sliding_window import SlidingWindowManager
from pagedsim.text import captions

# one example of every story kind: a new kind without an example here fails the first test
EXAMPLES = [
    sy.PoolCreated(12, 4),
    sy.Quiet(),
    sy.Custom("`alloc A 6`: my words"),
    sy.Refusal("C", "append_tokens(1)", 1, 0),
    sy.Refusal("C", "append_tokens(2)", 2, 1),
    sy.Arrival("A", 6, (), (0, 1)),
    sy.Arrival("B", 5, (2, 3), (7,)),
    sy.Arrival("E", 0, (), ()),
    sy.Fork("B", "B2", ((2, 2), (3, 2))),
    sy.Fork("B", "B3", ((2, 3), (3, 2))),
    sy.Fork("X", "Y", ()),
    sy.Finish("A", (1, 0), ()),
    sy.Finish("A", (1,), ((4, 1),)),
    sy.Finish("A", (), ((4, 1), (5, 2))),
    sy.DecodeStep(3, ((3, 7),), (8,)),
    sy.DecodeStep(2, (), ()),
    sy.Append("A", 6, (6,), (), (), ()),
    sy.Append("B", 5, (9, 10), ((3, 2, "B", 4),), (5,), ()),
    sy.Append("W", 7, (11,), (), (2,), (0, 1)),
    sy.Append("W", 9, (13,), (), (), (1,)),
    sy.Unnamed(("block_allocated", "block_shared")),
]


def test_every_story_kind_has_an_example_and_is_told_in_every_language():
    kinds = {type(s) for s in EXAMPLES}
    assert kinds == set(sy.Story.__subclasses__()), "add an example of the new story kind"
    for lang in captions.TABLES:
        for s in EXAMPLES:
            text = s.words(captions.book(lang))
            assert text and "{" not in text, (lang, s, text)


def test_every_table_has_the_keys_of_the_english_one_and_only_optional_variants_more():
    optional = (".one", ".alone", ".sep")
    needed = {k for k in captions.EN if not k.endswith(optional)}
    for lang, table in captions.TABLES.items():
        assert needed <= set(table), (lang, needed - set(table))
        extra = {k for k in set(table) - needed if k.rsplit(".", 1)[0] not in needed}
        assert extra == set(), (lang, extra)


@pytest.mark.parametrize(
    "story, en, zh",
    [
        (
            sy.Refusal("C", "append_tokens(1)", 1, 1),
            "seq C append_tokens(1) needs 1 free block(s) but only 1 is free: OutOfBlocks, "
            "nothing changed",
            "序列 C 的 append_tokens(1) 需要 1 个空闲块，但只有 1 个：OutOfBlocks，没有任何改动",
        ),
        (
            sy.Finish("A", (), ((4, 1), (5, 2))),
            "seq A finishes: block 4 stays (count 1), block 5 stays (count 2)",
            "序列 A 结束；块 4 保留（计数 1），块 5 保留（计数 2）",
        ),
        (
            sy.Finish("A", (1,), ((4, 1),)),
            "seq A finishes: block 1 returns to the free list; block 4 stays (count 1)",
            "序列 A 结束：块 1 回到空闲链表；块 4 保留（计数 1）",
        ),
        (
            sy.Fork("B", "B3", ((2, 3), (3, 2))),
            "seq B3 forks from seq B and shares blocks 2, 3 (counts now 2: 3, 3: 2)",
            "序列 B3 从序列 B 分叉，共享块 2、3（计数：块 2 为 3、块 3 为 2）",
        ),
        (
            sy.Append("W", 7, (11,), (), (2,), (0, 1)),
            "seq W appends token 7 (slot 11): the last block is full, so it takes block 2; "
            "blocks 0, 1 fell out of the window and are released",
            "序列 W 追加 token 7（槽位 11）；最后一块已满，取得块 2；块 0、1 滑出窗口，被释放",
        ),
        (
            sy.Append("B", 5, (9, 10), ((3, 2, "B", 4),), (5,), ()),
            "seq B appends tokens 5..6: block 3 is shared (count 2), so copy-on-write gives seq B "
            "block 4; the last block is full, so it takes block 5",
            "序列 B 追加 token 5..6：块 3 被共享（计数 2），写时复制给序列 B 块 4；"
            "最后一块已满，取得块 5",
        ),
        (
            sy.Unnamed(("block_allocated", "block_shared")),
            "block_allocated; block_shared",
            "block_allocated；block_shared",
        ),
    ],
)
def test_each_language_has_its_own_plural_lead_and_list_rules(story, en, zh):
    assert story.words(captions.book("en")) == en
    assert story.words(captions.book("zh")) == zh


def test_the_classifier_reads_the_step_from_its_first_event():
    events = [
        tr.SequenceFreed(3, "A", 8),
        tr.BlockReleased(3, "A", 1, 0),
        tr.BlockReleased(3, "A", 0, 1),
    ]
    assert sy.tell(events) == sy.Finish("A", (1,), ((0, 1),))
    assert sy.tell([]) == sy.Quiet()
    assert sy.tell([tr.BlockAllocated(1, "A", 4, 0)]) == sy.Unnamed(("block_allocated",))


OPS = st.lists(
    st.tuples(st.sampled_from("aaafpdx"), st.integers(0, 9), st.integers(0, 6)), max_size=14
)


def run(ops, sliding_window=None):
    m = (
        KVCacheManager(6, 2)
        if sliding_window is None
        else SlidingWindowManager(6, 2, sliding_window=sliding_window)
    )
    live = []
    for i, (op, pick, n) in enumerate(ops):
        who = live[pick % len(live)] if live else None
        try:
            if op == "a" or who is None:
                m.add_sequence(f"S{i}", n)
                live.append(f"S{i}")
            elif op == "f" and sliding_window is None:
                m.fork(who, f"S{i}")
                live.append(f"S{i}")
            elif op == "p":
                m.append_tokens(who, n + 1)
            elif op == "d":
                m.decode_step(live[: pick % len(live) + 1])
            else:
                m.free_sequence(who)
                live.remove(who)
        except (OutOfBlocks, SequenceError):
            pass  # a refusal is a recorded step too
        m.drain_copies()
    return m.trace.snapshots


@given(OPS, st.sampled_from([None, 3, 5]))
def test_captions_are_told_on_demand_and_agree_across_languages(ops, window):
    for snap in run(ops, window):
        assert snap.custom_caption is None  # the manager stores no sentence
        assert not [f.name for f in fields(snap) if isinstance(getattr(snap, f.name), str)]
        en, zh = captions.caption(snap, "en"), captions.caption(snap, "zh")
        assert en == sy.caption(snap) == (sy.describe(snap.events) if snap.step else en)
        assert sorted(re.findall(r"\d+", en)) == sorted(re.findall(r"\d+", zh)), (en, zh)


def test_own_words_are_marked_told_verbatim_in_every_language_and_kept_through_json():
    snaps = run([("a", 0, 3), ("p", 0, 2)])
    mine = snaps[1].with_caption("`alloc S0 3`: hello")
    assert snaps[1].custom_caption is None and mine.custom_caption == "`alloc S0 3`: hello"
    assert [captions.caption(mine, lang) for lang in captions.TABLES] == ["`alloc S0 3`: hello"] * 2
    three = (snaps[0], mine, snaps[2])
    back = snapshots_from_dict({"snapshots": [trace_json.snapshot_to_dict(s) for s in three]})
    assert back == list(three)
    assert [sy.caption(s) for s in back] == [sy.caption(s) for s in three]


def test_a_trace_without_custom_captions_is_told_from_its_events():
    snaps = run([("a", 0, 3), ("p", 0, 2)])
    d = {"snapshots": [trace_json.snapshot_to_dict(s) for s in snaps]}
    assert all("custom_caption" not in s for s in d["snapshots"])
    assert d["snapshots"][0]["caption"] == "a pool of 6 blocks x 2 tokens, all free"
    assert [captions.caption(s, "zh") for s in snapshots_from_dict(d)] == [
        captions.caption(s, "zh") for s in snaps
    ]


def test_a_caption_that_is_not_text_is_refused_and_the_snapshot_is_unchanged():
    snap = run([("a", 0, 3)])[1]
    with pytest.raises(TypeError, match="text must be a str"):
        snap.with_caption(42)
    assert snap.custom_caption is None
    assert sy.caption(snap) == "seq S0 arrives with 3 tokens and takes blocks 0, 1"
    with pytest.raises(ValueError, match="lang must be one of"):
        captions.caption(snap, "fr")
