"""Checks for exercise 3.4b: fork and copy-on-write on append (chapter 3.4).

Step checks read the pool's counts after each call; a Hypothesis run replays random
forks and appends against pagedsim's KVCacheManager (same pool order, so the same
slots and copies); and an end-to-end run writes K/V through the slots, copies blocks
for every (src, dst) pair, and checks that each beam's attention equals dense
attention over that beam's own tokens -- in NumPy, and with the CUDA kernels
(write_kv, copy_blocks, paged_attention) under the simulator. The testing kit's state
machine (pagedsim.testing.check_manager) drives your three functions as one block
manager and keeps a shadow KV memory: every token written to its slot, every copy
pair applied, and every live sequence must read back exactly its own tokens.
"""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.ch03_kv_block.checks._kit_zh import in_chinese
from course.i18n import say
from pagedsim import BlockPool, KVCacheManager, OutOfBlocks
from pagedsim.testing import NonConformance, check_manager, reference_attention

EXERCISE = "3.4b"
pytestmark = pytest.mark.ch3_4


def grow(impl, pool, n, bs=4):
    """A new table grown to n tokens by your slot_for_append, and the tokens' slots."""
    table, copies, slots = [], [], []
    for p in range(n):
        slots.append(impl.slot_for_append(pool, table, p, bs, copies))
        assert len(table) == p // bs + 1, say(
            f"after slot_for_append(pool, table, {p}, {bs}, copies) on a new sequence the "
            f"caller's table is {list(table)}, expected {p // bs + 1} block(s): change the table "
            "passed in (table.append(...), table[-1] = ...); `table = table + [...]` only rebinds "
            "your local name and the caller never sees the block",
            f"对新序列调用 slot_for_append(pool, table, {p}, {bs}, copies) 之后，调用者的表是 "
            f"{list(table)}，应有 {p // bs + 1} 个块：要修改传进来的表（table.append(...)、"
            "table[-1] = ...）；`table = table + [...]` 只是重新绑定了你的局部名字，调用者看不到",
        )
    assert not copies, say(
        "appending to a private sequence should never copy a block",
        "往私有序列追加时不应拷贝任何块",
    )
    return table, slots


def forked(impl, num_gpu_blocks, prompt):
    """A pool of blocks of 4 tokens, a parent table grown to `prompt` tokens, its fork."""
    pool = BlockPool(num_gpu_blocks, 4)
    parent, _ = grow(impl, pool, prompt)
    return pool, parent, impl.fork(pool, parent)


def test_fork_adds_the_child_as_an_owner_of_every_block(impl):
    """After fork every block of the parent has count 2 and the child has its own list."""
    pool, parent, child = forked(impl, 6, 6)
    assert child is not parent, say(
        "fork returned the parent's own list (the same object): the child's appends would "
        "change the parent's table; return a new list, list(parent)",
        "fork 返回了父序列自己的列表（同一个对象）：子序列的追加会改动父序列的表；"
        "应返回一个新列表 list(parent)",
    )
    assert child == parent, say(
        f"fork returned {child}, expected a new list with the parent's blocks {parent}",
        f"fork 返回 {child}，应为包含父序列各块 {parent} 的新列表",
    )
    counts = [pool.ref_count(b) for b in parent]
    assert counts == [2, 2], say(
        f"after fork the shared blocks have counts {counts}, expected [2, 2]: "
        "the fork never added the child as an owner (ref count not incremented)",
        f"fork 之后共享块的计数是 {counts}，应为 [2, 2]：fork 没有把子序列记为持有者（引用计数没"
        f"有加一）",
    )


@pytest.mark.parametrize("prompt", [6, 2, 10])
def test_appending_into_a_shared_partly_filled_block_copies_it(impl, prompt):
    """The writer of a shared, partly filled last block gets a private copy and a (src, dst)
    pair."""
    pool = BlockPool(8, 4)
    parent, _ = grow(impl, pool, prompt)  # 6 tokens: blocks [0, 1], block 1 holds 2 of 4 tokens
    before = list(parent)
    child = impl.fork(pool, parent)
    copies = []
    slot = impl.slot_for_append(pool, child, prompt, 4, copies)
    copied = child[-1] != before[-1]  # the writer's table now names a private block
    assert copies or not copied, say(
        f"slot_for_append made the private copy (the writer's last block is now {child[-1]}, "
        f"was {before[-1]}), but the caller's copies list is still empty: the (src, dst) pair "
        "was lost, so nobody copies the block's tokens. Append to the list passed in "
        "(copies.append((src, dst))); `copies = copies + [...]` rebinds a local name",
        f"slot_for_append 做了私有拷贝（写入者的最后一块现在是 {child[-1]}，原来是 {before[-1]}），"
        "但调用者的 copies 列表仍是空的：(src, dst) 对丢了，没人会拷贝这个块的 token。要追加到传进"
        "来的列表（copies.append((src, dst))）；`copies = copies + [...]` 只是重新绑定了局部名字",
    )
    assert len(copies) == 1, say(
        "appending into a shared, partly filled block wrote into it without copy-on-write: "
        "the other sequence's next token would overwrite this one",
        "往共享且未填满的块追加时没有写时复制就直接写入：另一个序列的下一个 token 会覆盖它",
    )
    src, dst = copies[0]
    assert child[-1] != before[-1], say(
        f"slot_for_append recorded the copy {copies[0]}, but the table passed in still ends "
        f"with the shared block {before[-1]}: change the caller's table in place "
        "(table[-1] = dst); `table = table[:-1] + [dst]` only rebinds a local name",
        f"slot_for_append 记录了复制 {copies[0]}，但传进来的表最后一块仍是共享块 {before[-1]}：要原"
        "地修改调用者的表（table[-1] = dst）；`table = table[:-1] + [dst]` 只是重新绑定了局部名字",
    )
    assert src == parent[-1] and dst == child[-1] and dst != src, say(
        f"after a {prompt}-token prompt (table {before}) the copy pair is {copies[0]}; it should "
        f"be (the shared last block {parent[-1]}, the writer's new block {child[-1]})",
        f"{prompt} 个 token 的 prompt（表 {before}）之后，复制对是 {copies[0]}；应为"
        f"（共享的最后一块 {parent[-1]}，写入者的新块 {child[-1]}）",
    )
    assert slot == dst * 4 + prompt % 4, say(
        f"the appended token's slot is {slot}, expected {dst * 4 + prompt % 4}",
        f"追加的 token 的 slot 是 {slot}，应为 {dst * 4 + prompt % 4}",
    )
    assert pool.ref_count(src) == 1, say(
        f"after copy-on-write the shared block still has count {pool.ref_count(src)}: "
        "the writer must let go of it (pool.free), or it leaks",
        f"写时复制之后共享块的计数仍是 {pool.ref_count(src)}：写入者必须放开它（pool.free），否"
        f"则会泄漏",
    )
    assert parent == before and child[:-1] == before[:-1], say(
        f"copy-on-write changed the wrong table entry: parent {parent}, child {child}; only the "
        "child's last entry may change",
        f"写时复制改错了表项：父序列 {parent}，子序列 {child}；只有子序列的最后一项可以改变",
    )


def test_a_full_shared_block_stays_shared_and_is_never_copied(impl):
    """Forking at a block boundary: the next token takes a fresh block, no copy is made."""
    pool, parent, child = forked(impl, 6, 8)
    copies = []
    impl.slot_for_append(pool, child, 8, 4, copies)
    assert copies == [], say(
        f"a full shared block was copied ({copies}); full blocks are never written again",
        f"拷贝了一个已写满的共享块（{copies}）；写满的块不会再被写",
    )
    assert [pool.ref_count(b) for b in parent] == [2, 2], say(
        "full shared blocks should stay shared (count 2)", "写满的共享块应保持共享（计数 2）"
    )


def test_freeing_the_parent_keeps_the_childs_blocks(impl):
    """After fork, the parent finishing must not free blocks the child still reads."""
    pool, parent, child = forked(impl, 6, 6)
    impl.free_table(pool, parent)
    assert parent == [], say("free_table should empty the table", "free_table 应清空表")
    freed = [b for b in child if pool.is_free(b)]
    assert not freed, say(
        f"block(s) {freed} went back to the free list while the child still uses them",
        f"块 {freed} 回到了空闲链表，而子序列还在用它们",
    )
    impl.free_table(pool, child)
    held = [b for b in range(6) if not pool.is_free(b)]
    assert pool.num_free_blocks == 6, say(
        f"after free_table of both sequences (no copy-on-write happened) block(s) {held} are "
        "still held: free_table must pool.free every block of its table once",
        f"两个序列都 free_table 之后（没有发生写时复制），块 {held} 仍被持有：free_table 必须对"
        "表中每个块各调用一次 pool.free",
    )


def test_free_table_releases_the_last_block_first(impl):
    """A finished sequence's blocks go back last first, so its first block is the next one
    reused."""
    pool = BlockPool(6, 4)
    table, _ = grow(impl, pool, 10)  # blocks [0, 1, 2]
    impl.free_table(pool, table)
    order = pool.free_list()
    forward = order[:3] == [2, 1, 0]
    assert order[:3] == [0, 1, 2], say(
        f"after free_table of blocks [0, 1, 2] the free list starts {order[:3]}, expected [0, 1, "
        f"2]: "
        + (
            "the blocks were freed first to last; free the last block first (reversed), as vLLM "
            "does"
            if forward
            else "free every block of the table exactly once, last block first"
        ),
        f"对块 [0, 1, 2] 调用 free_table 之后，空闲链表以 {order[:3]} 开头，应为 [0, 1, 2]："
        + (
            "块是从前往后释放的；要从最后一块开始释放（reversed），与 vLLM 一致"
            if forward
            else "表中每个块恰好释放一次，从最后一块开始"
        ),
    )


def why_free_lists_differ(seq, got, want, pool, sources=(), finished=()):
    """A leak, a block freed while still in use, or only the order: which one, in words.
    `sources`: the blocks your copy-on-writes copied from; `finished`: the table just freed."""
    leaked, early = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    counts = [pool.ref_count(b) for b in leaked]
    if leaked and not set(leaked) & set(sources) and set(leaked) & set(finished):
        return say(
            f"after free_table(pool, t{seq}) of table {list(finished)}, block(s) {leaked} of it "
            f"still have count(s) {counts}: free_table let go of some blocks but not all; call "
            "pool.free once for every block of the table",
            f"free_table(pool, t{seq}) 释放表 {list(finished)} 之后，其中的块 {leaked} 计数仍是 "
            f"{counts}：free_table 只放开了部分块；表中每个块都要调用一次 pool.free",
        )
    if leaked and set(leaked) & set(sources):
        return say(
            f"after seq {seq} finished, block(s) {leaked} should be free but still have "
            f"count(s) {counts}: they are blocks your copy-on-write copied from; the writer "
            "must pool.free the shared block after copying it, or it leaks",
            f"序列 {seq} 结束后，块 {leaked} 应该空闲，但计数仍是 {counts}：它们是你的写时复制"
            "拷贝过的源块；写入者拷贝之后必须对共享块调用 pool.free，否则会泄漏",
        )
    if leaked:
        return say(
            f"after seq {seq} finished, block(s) {leaked} should be free but still have count(s) "
            f"{counts}: a leak; some owner never let go of them (after a copy-on-write the writer "
            "must pool.free the shared block it copied from)",
            f"序列 {seq} 结束后，块 {leaked} 应该空闲，但计数仍是 {counts}：泄漏了；有持有者没有释"
            "放它们（copy-on-write 之后，写入方必须对被复制的共享块调用 pool.free）",
        )
    if early:
        return say(
            f"after seq {seq} finished, block(s) {early} are free although another sequence still "
            "holds them: a block was freed too often",
            f"序列 {seq} 结束后，块 {early} 已空闲，但另一个序列仍持有它们：某个块被多释放了",
        )
    return say(
        f"after seq {seq} finished the free list is {got}, but the manager's is {want}: "
        "free_table should release the table's blocks last first",
        f"序列 {seq} 结束后空闲链表是 {got}，而管理器的是 {want}：free_table 应从最后一块开始释放",
    )


@st.composite
def scripts(draw):
    """A prompt length and a list of ("append", seq) / ("fork", parent) / ("finish", seq)
    operations."""
    ops = draw(
        st.lists(
            st.tuples(st.sampled_from(["append", "append", "fork", "finish"]), st.integers(0, 3)),
            max_size=14,
        )
    )
    return draw(st.integers(1, 9)), ops


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(scripts())
def test_forks_and_appends_match_the_kv_cache_manager(impl, script):
    """Random forks and appends give the same slots, copies and counts as pagedsim's manager."""
    done = []  # the calls made so far, as the student writes them
    try:
        replay_against_the_manager(impl, script, done)
    except AssertionError as e:
        e.calls = "; ".join(done)
        raise


def replay_against_the_manager(impl, script, done):
    """Run the script through your functions and KVCacheManager side by side; `done` records your
    calls."""
    prompt, ops = script
    done += [
        "pool = BlockPool(24, 4)",
        "t0, copies = [], []",
        "slot_for_append(pool, t0, 0, 4, copies)"
        if prompt == 1
        else f"for p in range({prompt}): slot_for_append(pool, t0, p, 4, copies)",
    ]
    model = KVCacheManager(24, 4, trace=False)
    pool = BlockPool(24, 4)
    model.add_sequence(0, prompt)
    tables, sources = {0: grow(impl, pool, prompt)[0]}, []
    for op, k in ops:
        if not tables:
            break
        seq = sorted(tables)[k % len(tables)]
        if op == "finish":
            model.free_sequence(seq)
            done.append(f"free_table(pool, t{seq})")
            finished = list(tables[seq])
            impl.free_table(pool, tables.pop(seq))
            assert pool.free_list() == model.pool.free_list(), why_free_lists_differ(
                seq, pool.free_list(), model.pool.free_list(), pool, sources, finished
            )
            continue
        if op == "fork":
            new = max(tables) + 1
            model.fork(seq, new)
            done.append(f"t{new} = fork(pool, t{seq})")
            tables[new] = impl.fork(pool, tables[seq])
            continue
        copies = []
        want = model.append_tokens(seq, 1)[0]
        done.append(f"slot_for_append(pool, t{seq}, {model.num_tokens(seq) - 1}, 4, copies)")
        got = impl.slot_for_append(pool, tables[seq], model.num_tokens(seq) - 1, 4, copies)
        want_copies = model.drain_copies()
        sources += [src for src, _ in copies]
        assert copies == want_copies, say(
            f"appending to seq {seq} made copies {copies}, expected {want_copies}",
            f"往序列 {seq} 追加产生的复制是 {copies}，应为 {want_copies}",
        )
        assert got == want, say(
            f"appending to seq {seq} returned slot {got}, expected {want}",
            f"往序列 {seq} 追加返回 slot {got}，应为 {want}",
        )
    assert pool.ref_counts() == model.pool.ref_counts(), say(
        f"ref counts {pool.ref_counts()} differ from the manager's {model.pool.ref_counts()}",
        f"引用计数 {pool.ref_counts()} 与管理器的 {model.pool.ref_counts()} 不同",
    )


class YourTables:
    """Your fork / slot_for_append / free_table over one BlockPool, with the names the
    testing kit drives (pagedsim/testing/contract.py). Adding or appending n tokens calls
    slot_for_append once per token; a call the pool cannot serve is refused up front
    (OutOfBlocks) so that it changes nothing, as the kit's all-or-nothing rule asks."""

    def __init__(self, impl, num_gpu_blocks, block_size):
        self.impl, self.pool, self.bs = impl, BlockPool(num_gpu_blocks, block_size), block_size
        self.tables, self.lens, self.copies = {}, {}, []

    def _grow(self, seq, n):
        table, have = self.tables[seq], self.lens[seq]
        need = -(-(have + n) // self.bs) - -(-have // self.bs)  # new blocks
        need += bool(have % self.bs and self.pool.ref_count(table[-1]) > 1)  # + a copy-on-write
        if need > self.pool.num_free_blocks:
            raise OutOfBlocks(need, self.pool.num_free_blocks, f"{n} more tokens for seq {seq}")
        for p in range(have, have + n):
            self.impl.slot_for_append(self.pool, table, p, self.bs, self.copies)
            self.lens[seq] = p + 1

    def add_sequence(self, seq, n):
        self.tables[seq], self.lens[seq] = [], 0
        try:
            self._grow(seq, n)
        except OutOfBlocks:
            del self.tables[seq], self.lens[seq]
            raise

    def append_tokens(self, seq, n):
        self._grow(seq, n)

    def fork(self, parent, child):
        self.tables[child], self.lens[child] = (
            self.impl.fork(self.pool, self.tables[parent]),
            self.lens[parent],
        )

    def free_sequence(self, seq):
        self.impl.free_table(self.pool, self.tables.pop(seq))
        del self.lens[seq]

    def block_table(self, seq):
        return list(self.tables[seq])

    @property
    def num_free_blocks(self):
        return self.pool.num_free_blocks

    def drain_copies(self):
        out, self.copies = self.copies, []
        return out


def test_your_functions_keep_every_sequences_tokens_in_the_testing_kits_shadow_memory(impl):
    """Run as a block manager by pagedsim.testing, every sequence reads back exactly its own
    tokens."""
    try:
        check_manager(
            lambda num_gpu_blocks, block_size: YourTables(impl, num_gpu_blocks, block_size),
            examples=40,
            steps=20,
            seed=0,
        )
    except NonConformance as e:
        problem, _, script = str(e).partition("\n\nMinimal counterexample")
        missing = re.search(r"raised NotImplementedError: ?(\w*)", problem)
        if missing:  # the untouched stub: say "not implemented yet", as every other check does
            raise NotImplementedError(missing.group(1)) from None
        problem = problem.strip()
        failure = AssertionError(
            say(problem, in_chinese(problem))
            + say(
                " (add_sequence / append_tokens run your slot_for_append once per token, fork your "
                "fork, free_sequence your free_table)",
                "（add_sequence / append_tokens 对每个 token 调用一次你的 slot_for_append，fork "
                "调用你的 fork，free_sequence 调用你的 free_table）",
            )
        )
        calls = "; ".join(line.split("  # ")[0].strip() for line in script.splitlines()[1:])
        factory = r"m = factory\((\d+), (\d+)\)"
        failure.calls = re.sub(factory, r"m = YourTables(BlockPool(\1, \2))", calls)
        raise failure from None


def run_two_beams(impl, rng, write, copy, attend):
    """A 6-token prompt, a fork, then 3 different tokens per beam; returns (got, want) [2, H, D]."""
    bs, heads, kv_heads, d = 4, 2, 1, 4
    pool = BlockPool(8, bs)
    # [N, 2, H_kv, B, D] noise
    cache = rng.standard_normal((8, 2, kv_heads, bs, d)).astype(np.float32)
    new_kv = lambda: rng.standard_normal((2, kv_heads, d)).astype(np.float32)  # noqa: E731
    prompt = [new_kv() for _ in range(6)]
    tables, history = {}, {"A": list(prompt), "B": list(prompt)}
    tables["A"], slots = grow(impl, pool, 6, bs)
    write(cache, slots, prompt)
    tables["B"] = impl.fork(pool, tables["A"])
    for _ in range(3):
        copies, slots, tokens = [], [], []
        for seq in ("A", "B"):
            slots.append(impl.slot_for_append(pool, tables[seq], len(history[seq]), bs, copies))
            tokens.append(new_kv())
            history[seq].append(tokens[-1])
        if copies:
            copy(cache, copies)  # before the new tokens are written
        write(cache, slots, tokens)
    query = rng.standard_normal((2, heads, d)).astype(np.float32)  # [S, H, D]
    width = max(map(len, tables.values()))  # block_tables [S, max_blocks], padded with 0
    bt = np.array([tables[s] + [0] * (width - len(tables[s])) for s in "AB"], np.int32)
    got = attend(query, cache, bt, np.array([len(history[s]) for s in "AB"], np.int32))
    want = []
    for s, seq in enumerate("AB"):  # each beam's own tokens, in order: blocks of 1, table 0..T-1
        kv = np.asarray(history[seq])[:, :, :, None]  # [T, 2, H_kv, 1, D]
        want.append(reference_attention(query[s : s + 1], kv, [range(len(kv))], [len(kv)])[0])
    return np.asarray(got, np.float64), np.asarray(want)


def numpy_write(cache, slots, tokens):
    bs = cache.shape[3]
    for s, kv in zip(slots, tokens, strict=True):
        cache[s // bs, :, :, s % bs] = kv  # kv [2, H_kv, D]


def numpy_copy(cache, pairs):
    for src, dst in pairs:
        cache[dst] = cache[src]


def assert_beams_agree(got, want):
    for s, seq in enumerate("AB"):
        err = np.abs(got[s] - want[s]).max()
        assert np.allclose(got[s], want[s], atol=1e-4), say(
            f"after the fork, beam {seq}'s attention reads the wrong K/V: a beam wrote into a "
            f"block the other still reads, or a copy went the wrong way (error {err:.3g})",
            f"fork 之后 beam {seq} 的注意力读到了错误的 K/V：某个 beam 写进了另一个还在读的块，"
            f"或者复制方向反了（误差 {err:.3g}）",
        )


def test_two_beams_after_a_fork_each_attend_to_their_own_tokens_in_numpy(impl):
    """End to end in NumPy: write, fork, copy-on-write, then attention per beam."""
    assert_beams_agree(
        *run_two_beams(impl, np.random.default_rng(3), numpy_write, numpy_copy, reference_attention)
    )


@pytest.mark.kernels
def test_two_beams_after_a_fork_each_attend_to_their_own_tokens_with_the_kernels(impl, kernels):
    """End to end with write_kv, copy_blocks and paged_attention (GPU or simulator)."""

    def write(cache, slots, tokens):
        kv = np.asarray(tokens)  # [T, 2, H_kv, D]
        kernels.write_kv(
            cache,
            np.ascontiguousarray(kv[:, 0]),
            np.ascontiguousarray(kv[:, 1]),
            np.asarray(slots, np.int64),
        )

    rng = np.random.default_rng(4)
    got, want = run_two_beams(impl, rng, write, kernels.copy_blocks, kernels.paged_attention)
    assert_beams_agree(got, want)


def test_an_empty_table_forks_into_a_new_empty_list_and_frees_nothing(impl):
    """fork of [] is a new [] and free_table of [] changes nothing: a sequence with no tokens holds
    no block."""
    pool = BlockPool(4, 4)
    before = (pool.free_list(), pool.ref_counts())
    empty = []
    child = impl.fork(pool, empty)
    assert child == [] and child is not empty, say(
        f"fork(pool, []) returned {child!r}; it should be a new empty list (the child's own table)",
        f"fork(pool, []) 返回了 {child!r}；应返回一个新的空列表（子序列自己的表）",
    )
    impl.free_table(pool, empty)
    assert (pool.free_list(), pool.ref_counts()) == before and empty == [], say(
        "fork or free_table of an empty table changed the pool; a table with no blocks owns "
        "nothing",
        "对空表调用 fork 或 free_table 改变了池；没有块的表不拥有任何东西",
    )
