"""Checks for exercise 3.5: waste per block size and the choice of a block size (chapter 3.5).

Waste is compared with what pagedsim's KVCacheManager reports after admitting the same
sequences (`usage().empty_slots`); the choice is checked against its definition on
random workloads: the answer qualifies, and every larger candidate does not.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.ch03_kv_block.checks._expect import raises
from course.i18n import say
from pagedsim import KVCacheManager

EXERCISE = "3.5"
pytestmark = pytest.mark.ch3_5
CANDIDATES = (8, 16, 32, 64, 128)


def manager_waste(lengths, bs):
    """Empty slots and allocated slots, measured by admitting every sequence into a manager."""
    m = KVCacheManager(sum(-(-n // bs) for n in lengths) + 1, bs, trace=False)
    for i, n in enumerate(lengths):
        m.add_sequence(i, n)
    u = m.usage()
    return u.empty_slots, u.blocks_used * bs


def chosen(impl, *args):
    """choose_block_size(*args), or "ValueError" when it refuses."""
    try:
        return impl.choose_block_size(*args)
    except ValueError:
        return "ValueError"


def test_the_functions_only_read_their_lengths(impl):
    """lengths is read, never changed: each function works on a tuple, and a list passed in comes
    back as it went in (runs first, so a list consumed in place is named before what it breaks)."""
    lengths = [16, 17, 1, 40]
    calls = {
        "waste": lambda seqs: impl.waste(seqs, 16),
        "waste_fraction": lambda seqs: impl.waste_fraction(seqs, 16),
        "choose_block_size": lambda seqs: impl.choose_block_size(seqs, 2, 10**9, (8, 16, 32), 0.5),
    }
    for name, call in calls.items():
        try:
            call(tuple(lengths))
        except (AttributeError, TypeError) as e:
            if "tuple" not in str(e):
                raise
            raise AssertionError(
                say(
                    f"{name} modifies its lengths argument in place: given the tuple "
                    f"{tuple(lengths)} it raised {type(e).__name__}: {e}. Read the lengths (a for "
                    "loop, sum(...), sorted(...)); never pop, sort or assign into them",
                    f"{name} 就地修改了参数 lengths：传入元组 {tuple(lengths)} 时抛出了 "
                    f"{type(e).__name__}：{e}。只读取 lengths（for 循环、sum(...)、sorted(...)），"
                    "不要 pop、sort 或赋值",
                )
            ) from None
        given = list(lengths)
        call(given)
        assert given == lengths, say(
            f"{name} modified the caller's lengths list in place: {lengths} became {given}; "
            "read the lengths, never change them",
            f"{name} 就地修改了调用者的 lengths 列表：{lengths} 变成了 {given}；只读取，不要修改",
        )


def test_waste_counts_the_empty_end_of_each_last_block(impl):
    """Blocks of 16: 16 tokens waste 0, 17 waste 15, 1 wastes 15, so 30 in all."""
    got = impl.waste([16, 17, 1], 16)
    slips = {
        2: say(
            " (0 + 1 + 1: the USED part of each last block, n % 16, was counted; waste is its "
            "empty part)",
            "（0 + 1 + 1：算的是每个最后一块里已用的部分 n % 16；浪费是其中空着的部分）",
        ),
        -2: say(
            " (0 - 1 - 1: the blocks were counted with floor division, n // 16)",
            "（0 - 1 - 1：块数用了向下取整 n // 16）",
        ),
        46: say(
            " (16 + 15 + 15: the full block was counted as wasting a whole block)",
            "（16 + 15 + 15：填满的块被算成浪费了一整块）",
        ),
    }
    assert got == 30, say(
        f"waste([16, 17, 1], 16) gave {got}{slips.get(got, '')}, expected 0 + 15 + 15 = 30: a "
        "partly filled last block is still a whole block (ceil, not floor), and a full one "
        "wastes nothing",
        f"waste([16, 17, 1], 16) 得到 {got}{slips.get(got, '')}，应为 0 + 15 + 15 = 30：未填满的最"
        "后一个块也是一整块（向上取整），填满的块不浪费",
    )


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(st.lists(st.integers(0, 300), max_size=12), st.sampled_from([1, 3, 8, 16, 32]))
def test_waste_matches_the_kv_cache_manager(impl, lengths, bs):
    """For any workload, waste and its fraction match what the manager allocates."""
    empty, allocated = manager_waste(lengths, bs)
    got = impl.waste(lengths, bs)
    assert got == empty, say(
        f"waste({lengths}, {bs}) gave {got}, but the manager has {empty} empty slots",
        f"waste({lengths}, {bs}) 得到 {got}，但管理器有 {empty} 个空槽位",
    )
    want = empty / allocated if allocated else 0.0
    got = impl.waste_fraction(lengths, bs)
    tokens = sum(lengths)
    over_tokens = bool(tokens) and got == pytest.approx(empty / tokens) and empty
    each = [(-n % bs) / (n - n % -bs) for n in lengths if n]  # each sequence's own fraction
    if each and got == pytest.approx(sum(each) / len(each)) and got != pytest.approx(want):
        raise AssertionError(
            say(
                f"waste_fraction({lengths}, {bs}) gave {got}, the MEAN of each sequence's own "
                f"fraction; expected {want}, all empty slots ({empty}) over all allocated slots "
                f"({allocated})",
                f"waste_fraction({lengths}, {bs}) 得到 {got}，这是各序列自身比例的平均值；应为 "
                f"{want}，即全部空槽位（{empty}）除以全部已分配槽位（{allocated}）",
            )
        )
    why = say(
        f": that is the {empty} empty slots over the {tokens} tokens; divide by the {allocated} "
        "ALLOCATED slots (tokens + empty ones)",
        f"：这是 {empty} 个空槽位除以 {tokens} 个 token；应除以 {allocated} 个已分配槽位"
        "（token 加空槽位）",
    )
    assert got == pytest.approx(want), say(
        f"waste_fraction({lengths}, {bs}) gave {got}, expected {want}"
        + (why if over_tokens else ""),
        f"waste_fraction({lengths}, {bs}) 得到 {got}，应为 {want}" + (why if over_tokens else ""),
    )


def test_the_largest_block_size_within_budget_and_waste_is_chosen(impl):
    """100 sequences of 520 tokens: blocks of 128 waste 19%, of 64 waste 9.7%, so 64 is chosen."""
    lengths = [520] * 100
    got = impl.choose_block_size(lengths, 1, 10**6, CANDIDATES, 0.1)
    assert got == 64, say(
        f"choose_block_size gave {got}; 128 wastes 19% (> 10%), 64 wastes 9.7%, so 64",
        f"choose_block_size 得到 {got}；128 浪费 19%（> 10%），64 浪费 9.7%，所以选 64",
    )
    tight = impl.choose_block_size(lengths, 1, 52_000, CANDIDATES, 0.1)
    assert tight == 8, say(
        f"with a budget of 52,000 bytes only blocks of 8 fit (52,000 slots), got {tight}",
        f"预算 52,000 字节时只有 8 放得下（正好 52,000 个槽位），实际得到 {tight}",
    )
    what = "choose_block_size with a 51,999-byte budget (no candidate fits)"
    args = (lengths, 1, 51_999, CANDIDATES, 0.1)
    raises(ValueError, impl.choose_block_size, *args, match="budget", what=what)


def test_a_waste_or_budget_exactly_at_the_limit_qualifies(impl):
    """Both tests are <=: a waste fraction equal to max_waste, or memory equal to the budget, is
    allowed."""
    frac = impl.waste_fraction([9, 10], 10)
    assert frac == 1 / 20, say(
        f"waste_fraction([9, 10], 10) gave {frac!r}, not exactly 1/20 = 0.05: compute the "
        "fraction in Python floats (float64), not float32, which keeps only about 7 digits",
        f"waste_fraction([9, 10], 10) 得到 {frac!r}，而不是恰好 1/20 = 0.05：用 Python float"
        "（float64）计算比例，不要用只有约 7 位有效数字的 float32",
    )
    got = chosen(impl, [9, 10], 1, 20, (10,), 0.05)  # 1 empty slot of 20: exactly 5%
    assert got == 10, say(
        f"blocks of 10 for sequences of 9 and 10 tokens waste exactly 1/20 = 5% and fill the "
        f"20-byte budget exactly; with max_waste=0.05 that qualifies (<=, not <), but "
        f"choose_block_size gave {got}",
        f"9 和 10 个 token 的序列用 10 个 token 的块，恰好浪费 1/20 = 5%，也恰好用满 20 字节预算；"
        f"max_waste=0.05 时它符合条件（<=，不是 <），但 choose_block_size 给出 {got}",
    )


# a pool of 2**30 slots (1,024 blocks of 2**20 tokens): one slot is 2**-30 ~ 9.3e-10 of it, so a
# fraction one slot past the limit differs from it only in the 9th decimal; exact in float64
BIG_BLOCK, BIG_POOL = 2**20, 2**30


def just_past_cases():
    """(lengths, block size, limit, waste fraction): at the limit, then one slot past it."""
    waste = 107_374_182  # ~10% of 2**30 slots: 128 sequences of 8 blocks, each ~10% short
    share = [waste // 128 + (i < waste % 128) for i in range(128)]
    at = [8 * BIG_BLOCK - w for w in share]
    past = [at[0] - 1, *at[1:]]
    limit = waste / BIG_POOL  # exact: BIG_POOL is a power of two
    return at, past, limit


def test_a_waste_just_past_the_limit_is_refused_at_a_realistic_slot_count(impl):
    """5.3% at a 5% limit is refused (no rounding to whole percents); over 2**30 slots, a waste of
    one slot past the limit is refused and one exactly at it accepted (no float32)."""
    got = chosen(impl, [1, 18], 1, 1000, (100,), 0.05)  # 181 of 200 slots wasted
    assert got == "ValueError", say(
        "choose_block_size([1, 18], 1, 1000, (100,), 0.05) accepted blocks of 100, which waste "
        "181 of 200 slots",
        "choose_block_size([1, 18], 1, 1000, (100,), 0.05) 接受了 100 的块，它浪费了 200 个"
        "槽位中的 181 个",
    )
    lengths = [94, 95, 94, 95, 95, 95, 94, 95, 95, 95]  # 53 empty slots of 1,000: 5.3%
    got = chosen(impl, lengths, 1, 10**6, (100,), 0.05)
    assert got == "ValueError", say(
        "choose_block_size accepted blocks of 100 that waste 53 of 1,000 slots (5.3%) at "
        "max_waste=0.05: the fraction was rounded (to a whole percent?) before the comparison; "
        "compare the exact fraction with max_waste",
        "choose_block_size 在 max_waste=0.05 时接受了浪费 1,000 个槽位中 53 个（5.3%）的 100 块："
        "比较之前把比例取整了（取成整数百分比？）；请直接用精确的比例与 max_waste 比较",
    )
    at, past, limit = just_past_cases()
    frac = impl.waste_fraction(at, BIG_BLOCK)
    assert frac == limit, say(
        f"waste_fraction of 128 sequences of ~7.5M tokens in blocks of {BIG_BLOCK:,} gave "
        f"{frac!r}, the exact fraction is {limit!r} ({limit * BIG_POOL:,.0f} of {BIG_POOL:,} "
        "slots): compute in Python floats (float64), not float32, which keeps only about 7 digits",
        f"128 个约 750 万 token 的序列、块大小 {BIG_BLOCK:,} 时 waste_fraction 得到 "
        f"{frac!r}，精确值是 {limit!r}（{BIG_POOL:,} 个槽位中的 {limit * BIG_POOL:,.0f} 个）："
        "用 Python float（float64）计算，不要用只有约 7 位有效数字的 float32",
    )
    cases = ((at, BIG_BLOCK, "exactly at"), (past, "ValueError", "one slot past"))
    for lengths, want, what in cases:
        got = chosen(impl, lengths, 1, 2 * BIG_POOL, (BIG_BLOCK,), limit)
        assert got == want, say(
            f"over {BIG_POOL:,} slots, a waste {what} max_waste={limit!r} (one slot is "
            f"{1 / BIG_POOL:.2g} of the pool) should give {want}, choose_block_size gave {got}: "
            "compare the exact float64 fraction with <= (no float32, no rounding)",
            f"在 {BIG_POOL:,} 个槽位上，浪费{'恰好等于' if want != 'ValueError' else '刚好超过'} "
            f"max_waste={limit!r}（一个槽位占池的 {1 / BIG_POOL:.2g}）应得到 {want}，"
            f"choose_block_size 给出 {got}：用 <= 比较精确的 float64 比例"
            "（不要 float32，不要取整）",
        )


@pytest.mark.parametrize("bs", CANDIDATES)
def test_the_default_candidates_and_waste_limit_are_8_to_128_and_10_percent(impl, bs):
    """Called without candidates or max_waste, the choice uses (8, 16, 32, 64, 128) and 10%."""
    lengths = [3 * bs] * 4  # multiples of bs: no waste; the budget holds them in blocks of bs only
    try:
        got = impl.choose_block_size(lengths, 1, sum(lengths))
    except ValueError as e:
        raise AssertionError(
            say(
                f"choose_block_size({lengths}, 1, {sum(lengths)}) with the default candidates "
                f"raised ValueError ({e}); blocks of {bs} hold these sequences with no waste in "
                f"exactly that budget",
                f"用默认候选值时 choose_block_size({lengths}, 1, {sum(lengths)}) 抛出了 ValueError"
                f"（{e}）；{bs} 个 token 的块恰好在这个预算内无浪费地装下这些序列",
            )
        ) from None
    assert got == bs, say(
        f"with the default candidates, four sequences of {3 * bs} tokens in a {sum(lengths)}-byte "
        f"budget should choose {bs}, got {got}: the defaults must be candidates=(8, 16, 32, 64, "
        f"128), max_waste=0.1",
        f"用默认候选值时，{sum(lengths)} 字节预算里的四个 {3 * bs} token 序列应选 {bs}，实际选了 "
        f"{got}：默认值必须是 candidates=(8, 16, 32, 64, 128)、max_waste=0.1",
    )
    chosen = impl.choose_block_size([520] * 100, 1, 10**6)
    assert chosen == 64, say(
        f"with the default max_waste, 100 sequences of 520 tokens chose {chosen}: 128 wastes 19% "
        "(over the default 10%), 64 wastes 9.7%, so 64",
        f"用默认 max_waste 时，100 个 520 token 的序列选了 {chosen}：128 浪费 19%（超过默认的 "
        "10%），64 浪费 9.7%，所以应选 64",
    )


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(
    st.lists(st.integers(1, 400), min_size=1, max_size=10),
    st.integers(1, 4),
    st.integers(0, 8000),
    st.sampled_from([0.05, 0.1, 0.3]),
)
def test_the_choice_qualifies_and_no_larger_candidate_does(impl, lengths, bpt, budget, limit):
    """On random workloads the chosen size passes both tests and every larger one fails one."""

    def ok(bs):
        empty, allocated = manager_waste(lengths, bs)
        return allocated * bpt <= budget and empty / allocated <= limit

    good = [bs for bs in CANDIDATES if ok(bs)]
    if not good:
        what = f"choose_block_size({lengths}, {bpt}, {budget}, max_waste={limit})"
        args = (lengths, bpt, budget, CANDIDATES, limit)
        raises(ValueError, impl.choose_block_size, *args, what=f"{what} (no candidate qualifies)")
        return
    got = impl.choose_block_size(lengths, bpt, budget, CANDIDATES, limit)
    assert got == max(good), say(
        f"for {lengths}, {budget} bytes, waste <= {limit}: chose {got}, expected {max(good)}",
        f"对 {lengths}、预算 {budget} 字节、浪费 <= {limit}：选了 {got}，应为 {max(good)}",
    )


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(
    st.lists(st.sampled_from([4, 8, 16, 32, 64, 128]), min_size=1, max_size=7),
    st.lists(st.integers(1, 300), max_size=8),
    st.integers(0, 6000),
    st.sampled_from([0.05, 0.1, 0.5]),
)
def test_the_choice_does_not_depend_on_the_order_or_repeats_of_the_candidates(
    impl, candidates, lengths, budget, limit
):
    """Candidates in any order, repeated or not, in a list it must not change (and no sequences at
    all):
    the choice is the largest qualifying candidate."""

    def ok(bs):  # no sequences at all: nothing allocated, nothing wasted, every candidate fits
        empty, allocated = manager_waste(lengths, bs)
        return allocated <= budget and (empty / allocated if allocated else 0.0) <= limit

    given_list = list(candidates)
    call = f"choose_block_size({lengths}, 1, {budget}, candidates={given_list}, max_waste={limit})"
    good = [bs for bs in candidates if ok(bs)]
    if not good:
        args = (lengths, 1, budget, candidates, limit)
        raises(ValueError, impl.choose_block_size, *args, what=f"{call} (no candidate qualifies)")
    else:
        got = impl.choose_block_size(lengths, 1, budget, candidates, limit)
        assert got == max(good), say(
            f"{call} gave {got}, expected {max(good)}: the candidates come in any order (and may "
            "repeat), so sort them (largest first) before trying them",
            f"{call} 得到 {got}，应为 {max(good)}：候选值可以是任意顺序（也可能重复），要先从大"
            f"到小排序再逐个尝试",
        )
        assert isinstance(got, (int, np.integer)) and not isinstance(got, bool), say(
            f"{call} returned {got!r} of type {type(got).__name__}; it should return one of the "
            f"candidates, an int",
            f"{call} 返回了类型为 {type(got).__name__} 的 {got!r}；应返回候选值之一（int）",
        )
    assert candidates == given_list, say(
        f"choose_block_size reordered or changed the caller's candidates list in place: "
        f"{given_list} became {candidates}; sort a copy (sorted(...)), not the argument",
        f"choose_block_size 就地改动了调用者的 candidates 列表：{given_list} 变成了 {candidates}；"
        "请排序副本（sorted(...)），不要改参数",
    )


def test_waste_takes_any_sequence_of_lengths_and_an_empty_one_wastes_nothing(impl):
    """waste and waste_fraction accept a tuple or a NumPy array, return an int and a float, and are
    0 on []."""
    for lengths in ([], (), np.array([], dtype=np.int64)):
        got = (impl.waste(lengths, 16), impl.waste_fraction(lengths, 16))
        assert got == (0, 0.0), say(
            f"with no sequences ({lengths!r}) waste and waste_fraction gave {got}, expected (0, "
            "0.0): nothing allocated wastes nothing",
            f"没有序列（{lengths!r}）时 waste 和 waste_fraction 得到 {got}，应为 (0, 0.0)",
        )
    for lengths in ((16, 17, 1), np.array([16, 17, 1])):
        w, f = impl.waste(lengths, 16), impl.waste_fraction(lengths, 16)
        assert w == 30 and f == pytest.approx(30 / 64), say(
            f"waste and waste_fraction of {lengths!r} with blocks of 16 gave {w} and {f}, expected "
            f"30 and 30/64",
            f"{lengths!r} 在块大小 16 下的 waste 和 waste_fraction 得到 {w} 和 {f}，应为 30 和 "
            f"30/64",
        )
        assert isinstance(w, (int, np.integer)) and isinstance(f, (float, np.floating)), say(
            f"waste returned a {type(w).__name__} and waste_fraction a {type(f).__name__}; "
            f"expected int and float",
            f"waste 返回了 {type(w).__name__}，waste_fraction 返回了 {type(f).__name__}；应为 int "
            f"和 float",
        )
