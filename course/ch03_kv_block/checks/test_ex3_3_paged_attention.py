"""Checks for exercise 3.3: logical -> physical translation and paged attention (chapter 3.3).

Translation is compared with pagedsim's own BlockTable on random tables (Hypothesis);
attention with a dense float64 softmax written here, with cuda_kernels.reference, and
with the CUDA kernel (under Numba's simulator when there is no GPU) on fresh random
data, including logits large enough to overflow exp() without the max subtraction.
The testing kit's caches (pagedsim.testing.paged_caches: scattered blocks, every slot
no token owns poisoned, GQA groups, odd head dims) are the widest attention check; its
float64 reference_attention is the answer, and a failing case is shown as the one
paged_case(CaseSpec(...)) call that rebuilds it.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.i18n import say
from course.impl import child_module
from pagedsim import BlockTable
from pagedsim.testing import paged_caches, reference_attention
from pagedsim.testing.caches import POISON

EXERCISE = "3.3"
pytestmark = pytest.mark.ch3_3
CHECK = settings(max_examples=40, derandomize=True, database=None, deadline=None)


@st.composite
def tables(draw):
    """(block_size, physical ids of a table, num_tokens) with distinct ids in a pool of 64."""
    bs = draw(st.sampled_from([1, 2, 4, 16]))
    n = draw(st.integers(1, 6 * bs))
    need = -(-n // bs)
    ids = draw(st.lists(st.integers(0, 63), min_size=need, max_size=need, unique=True))
    return bs, ids, n


def why_blocks_needed(n, bs, got):
    """The off-by-one behind a wrong blocks_needed(n, bs), in words."""
    head = say(
        f"blocks_needed({n}, {bs}) gave {got}; {n} tokens need {-(-n // bs)} block(s)",
        f"blocks_needed({n}, {bs}) 得到 {got}；{n} 个 token 需要 {-(-n // bs)} 个 Block",
    )
    if n == 0:
        return head + say(": no tokens, no blocks", "：没有 token，就不需要 Block")
    if n % bs and got == n // bs:
        return head + say(
            ": the partly filled last block was dropped; round up (ceil), not down",
            "：漏掉了未填满的最后一个 Block；要向上取整，而不是向下",
        )
    if n % bs == 0 and got == n // bs + 1:
        return head + say(
            ": the tokens fill their blocks exactly, so no extra block (ceil, not floor + 1)",
            "：token 恰好填满各个 Block，不需要多加一个（向上取整，而不是向下取整再加 1）",
        )
    return head


def test_blocks_needed_rounds_a_partly_filled_block_up(impl):
    """blocks_needed is ceil(num_tokens / block_size): 17 tokens in blocks of 16 take 2."""
    for n, bs, want in [
        (17, 16, 2),
        (1, 16, 1),
        (33, 16, 3),
        (16, 16, 1),
        (32, 16, 2),
        (5, 1, 5),
        (0, 16, 0),
    ]:
        got = impl.blocks_needed(n, bs)
        assert got == want, why_blocks_needed(n, bs, got)


def why_locate(ids, bs, p, got, want):
    """The off-by-one behind a wrong locate(ids, bs, p), in words."""
    head = say(
        f"token {p} with block_size {bs} and table {ids}: locate gave {got}, expected {want}",
        f"block_size 为 {bs}、表为 {ids} 时，token {p} 的 locate 得到 {got}，应为 {want}",
    )
    logical = p // bs
    if got[1] != p % bs:
        return head + say(
            f": the offset inside the block is p % block_size = {p % bs}",
            f"：块内偏移是 p % block_size = {p % bs}",
        )
    for near in (logical - 1, logical + 1):
        if 0 <= near < len(ids) and got[0] == ids[near]:
            return head + say(
                f": it read table[{near}], but token {p} is in logical block "
                f"p // block_size = {logical} (counting from 0)",
                f"：读的是 table[{near}]，但 token {p} 在逻辑块 p // block_size = "
                f"{logical}（从 0 数起）",
            )
    if got[0] == logical:
        return head + say(
            f": {logical} is the logical block; the physical one is table[{logical}] "
            f"= {ids[logical]}",
            f"：{logical} 是逻辑块号；物理块是 table[{logical}] = {ids[logical]}",
        )
    return head


@CHECK
@given(tables())
def test_locate_and_slot_agree_with_the_block_table(impl, case):
    """Every token's (block, offset) and slot match pagedsim's BlockTable."""
    bs, ids, n = case
    ref = BlockTable(bs, ids, n)
    for p in range(n):
        got = tuple(impl.locate(ids, bs, p))
        assert got == ref.locate(p), why_locate(ids, bs, p, got, ref.locate(p))
        got_slot = impl.slot(ids, bs, p)
        near = " (off by one)" if abs(got_slot - ref.slot(p)) == 1 else ""
        (block, offset), want = ref.locate(p), ref.slot(p)
        assert got_slot == want, say(
            f"token {p} with block_size {bs} and table {ids}: slot gave {got_slot}, expected "
            f"{want}{near}: slot = physical block * block_size + offset = {block} * {bs} + "
            f"{offset}",
            f"block_size 为 {bs}、表为 {ids} 时，token {p} 的 slot 得到 {got_slot}，应为 "
            f"{want}{near}：slot = 物理块 * block_size + 偏移 = {block} * {bs} + {offset}",
        )


def dense_reference(query, keys, values, scale, *, heads=None, shift=1, norm=1, weigh_keys=False):
    """softmax(q k^T * scale) v per head, in float64, from K/V already in logical order. The
    keywords make the common slips (_slips): another KV head per query head, the softmax's
    maximum or sum over the heads axis (0) instead of the tokens (1), the keys weighed."""
    H, H_kv = query.shape[0], keys.shape[1]
    heads = np.arange(H) // (H // H_kv) if heads is None else heads
    k, v = keys.astype(np.float64)[:, heads], values.astype(np.float64)[:, heads]  # [T, H, D]
    s = np.einsum("hd,thd->ht", query.astype(np.float64), k) * scale  # [H, T]
    p = np.exp(s - s.max(axis=shift, keepdims=True))
    return np.einsum("ht,thd->hd", p / p.sum(axis=norm, keepdims=True), k if weigh_keys else v)


def _slips(query, keys, values, scale):
    """What common slips compute, by name: the mistake in the student's words -> its result."""
    H, H_kv = query.shape[0], keys.shape[1]

    def slip(scale=scale, **how):
        return dense_reference(query, keys, values, scale, **how)

    return {
        say(
            "the softmax's maximum is taken over the heads axis (axis 0) instead of the tokens "
            "(axis 1 of the [H, T] logits): each token gets its own shift, so the weights are "
            "wrong",
            "softmax 的最大值是沿头的轴（axis 0）取的，而不是沿 token（[H, T] logits 的 axis 1）："
            "每个 token 的平移不同，权重因此出错",
        ): slip(shift=0),
        say(
            "the weights are normalised over the heads axis (axis 0) instead of the tokens "
            "(axis 1 of the [H, T] logits)",
            "权重是沿头的轴（axis 0）归一化的，而不是沿 token（[H, T] logits 的 axis 1）",
        ): slip(norm=0),
        say(
            "query head h reads KV head h % H_kv; with grouped-query attention it is "
            "h // (H // H_kv)",
            "查询头 h 读的是 KV 头 h % H_kv；分组查询注意力中应是 h // (H // H_kv)",
        ): slip(heads=np.arange(H) % H_kv),
        say(
            "the logits are not scaled (the default scale is 1/sqrt(D))",
            "logits 没有缩放（默认 scale 是 1/sqrt(D)）",
        ): slip(scale=1.0),
        say(
            "the logits are scaled by 1/D instead of 1/sqrt(D)",
            "logits 乘的是 1/D，而不是 1/sqrt(D)",
        ): slip(scale=scale * scale),
        say(
            "the weights multiply the keys, not the values (index 1 of the cache's K/V axis)",
            "权重乘的是 K 而不是 V（V 在缓存 K/V 轴的下标 1）",
        ): slip(weigh_keys=True),
    }


def slip_named(query, keys, values, scale, got) -> str:
    """The name of the slip whose result `got` is, or ''."""
    for mistake, result in _slips(query, keys, values, scale).items():
        if result.shape == got.shape and np.allclose(got, result, atol=1e-5):
            return mistake
    return ""


def random_case(rng, *, heads=4, kv_heads=2, bs=4, d=8, length=11, num_blocks=9, loud=1.0):
    """A cache filled with noise, one sequence scattered over random blocks, and its logical K/V."""
    # [N, 2, H_kv, B, D]
    cache = rng.standard_normal((num_blocks, 2, kv_heads, bs, d)).astype(np.float32)
    table = rng.permutation(num_blocks)[: -(-length // bs)]
    keys = rng.standard_normal((length, kv_heads, d)).astype(np.float32)  # [T, H_kv, D]
    values = rng.standard_normal((length, kv_heads, d)).astype(np.float32)
    for p in range(length):
        cache[table[p // bs], 0, :, p % bs] = keys[p]
        cache[table[p // bs], 1, :, p % bs] = values[p]
    query = (rng.standard_normal((heads, d)) * loud).astype(np.float32)  # [H, D]
    return query, cache, table, keys, values


def changed_inputs(before, after) -> str:
    """'' when every input is as it was, else which one changed and where, in words."""
    for name, old, new in zip(("query", "kv_cache", "block_table"), before, after, strict=True):
        old, new = np.asarray(old), np.asarray(new)
        if old.shape != new.shape or not np.array_equal(old, new, equal_nan=True):
            where = ""
            if old.shape == new.shape:
                i = tuple(int(x) for x in np.argwhere(~((old == new) | (old != old)))[0])
                where = f": {name}{list(i)} was {old[i]:.4g}, now {new[i]:.4g}"
            return say(
                f"paged_attention changed its argument {name} in place{where}. The caller's "
                f"arrays must come back as they went in: scale or convert a copy (q = query * "
                "scale, or query.astype(np.float64)), never query *= scale",
                f"paged_attention 就地修改了参数 {name}{where}。调用者的数组必须原样返回："
                "在副本上缩放或转换（q = query * scale，或 query.astype(np.float64)），"
                "不要写 query *= scale",
            )
    return ""


def test_paged_attention_leaves_its_inputs_alone_and_each_result_is_its_own(impl):
    """The inputs are compared before and after the call (reported first, before any result); then
    two calls' results are kept: the first must not change when the second call runs."""
    rng = np.random.default_rng(11)
    query, cache, table, keys, values = random_case(rng, length=9)
    before = (query.copy(), cache.copy(), table.copy())
    impl.paged_attention(query, cache, table, 9)
    problem = changed_inputs(before, (query, cache, table))
    assert not problem, problem
    other = random_case(np.random.default_rng(12), length=6)
    keep = child_module("course.ch03_kv_block.checks._keep")
    fn = impl.paged_attention  # the student's own function, not the checks' naming wrapper
    fn = vars(fn).get("_target") or getattr(fn, "__wrapped__", fn)
    (first, first_later), (second, _) = keep.kept_results(
        fn, [((query, cache, table, 9), {}), ((*other[:3], 6), {})]
    )
    first, first_later = np.asarray(first), np.asarray(first_later)
    assert first.shape == first_later.shape and np.array_equal(first, first_later), say(
        "the result of one paged_attention call changed when paged_attention was called again: "
        "it is a view of one buffer that every call reuses (a module-level array); return a new "
        "array from each call",
        "再次调用 paged_attention 时，上一次调用的结果被改变了：它是每次调用都复用的同一个缓冲区"
        "（模块级数组）的视图；每次调用都应返回一个新数组",
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_paged_attention_reads_each_token_through_the_table(impl, seed):
    """Attention over a scattered sequence equals dense attention over its tokens in order."""
    rng = np.random.default_rng(seed)
    length = [11, 4, 16][seed]
    query, cache, table, keys, values = random_case(rng, length=length)
    got = np.asarray(impl.paged_attention(query, cache, table, length))
    want = dense_reference(query, keys, values, 1 / np.sqrt(query.shape[1]))
    assert got.shape == want.shape, say(
        f"paged_attention returned shape {got.shape}, expected {want.shape}",
        f"paged_attention 返回的形状是 {got.shape}，应为 {want.shape}",
    )
    if not np.allclose(got, want, atol=1e-5):
        mistake = slip_named(query, keys, values, 1 / np.sqrt(query.shape[1]), got)
        assert not mistake, say(
            f"paged attention differs from dense attention (seed {seed}): {mistake}",
            f"分页注意力与稠密注意力不一致（seed {seed}）：{mistake}",
        )
    assert np.allclose(got, want, atol=1e-5), say(
        f"paged attention differs from dense attention over the same tokens by "
        f"{np.nanmax(np.abs(got - want)):.3g} (seed {seed}): check the gather, the KV head of each "
        f"query head (h // (H // H_kv)) and the default scale 1/sqrt(D)",
        f"分页注意力与同样 token 上的稠密注意力相差 {np.nanmax(np.abs(got - want)):.3g}（seed "
        f"{seed}）："
        "检查取 K/V 的下标、每个查询头对应的 KV 头（h // (H // H_kv)）以及默认 scale 1/sqrt(D)",
    )


def test_paged_attention_reads_only_the_entries_the_sequence_uses(impl):
    """A block table longer than the sequence needs (a padded batch's row) ends in garbage ids:
    only the first ceil(context_len / block_size) entries may be read."""
    rng = np.random.default_rng(7)
    query, cache, table, keys, values = random_case(rng, length=6)  # 2 blocks of 4
    n = cache.shape[0]
    padded = np.concatenate([table, [n + 5, n + 1000]]).astype(np.int64)
    why = say(
        f"block_table {padded.tolist()} is longer than the 6 tokens need (blocks of 4: 2 "
        f"entries); its last entries ({n + 5}, {n + 1000}) are garbage, as in a padded batch. "
        "Read only the first ceil(context_len / block_size) entries, through positions < "
        "context_len, never the whole table",
        f"block_table {padded.tolist()} 比 6 个 token 所需的更长（每块 4 个：2 项）；"
        f"最后几项（{n + 5}、{n + 1000}）是垃圾值，就像填充过的批次。只读前 "
        "ceil(context_len / block_size) 项，经由 < context_len 的位置读取，不要读整张表",
    )
    try:
        got = np.asarray(impl.paged_attention(query, cache, padded, 6))
    except IndexError as e:
        raise AssertionError(f"{why} (your code raised IndexError: {e})") from None
    want = dense_reference(query, keys, values, 1 / np.sqrt(query.shape[1]))
    assert got.shape == want.shape and np.allclose(got, want, atol=1e-5), why


def test_an_explicit_scale_is_used_even_when_it_is_zero(impl):
    """scale=0.0 makes every logit 0: the weights are uniform and the output is the mean of V. An
    explicit scale is used whatever its value; only None means 1/sqrt(D)."""
    query, cache, table, keys, values = random_case(np.random.default_rng(3), length=7)
    for scale in (0.0, 0.5):
        got = np.asarray(impl.paged_attention(query, cache, table, 7, scale=scale), np.float64)
        want = dense_reference(query, keys, values, scale)
        default = dense_reference(query, keys, values, 1 / np.sqrt(query.shape[1]))
        ignored = got.shape == default.shape and np.allclose(got, default, atol=1e-6)
        assert got.shape == want.shape and np.allclose(got, want, atol=1e-6), say(
            f"paged_attention(..., scale={scale}) differs from softmax(q k * {scale}) v"
            + (
                f": your result is the default scale's, so an explicit {scale} was taken as not "
                "given; test `scale is None` (not `scale or ...`, which drops 0.0)"
                if ignored
                else ""
            ),
            f"paged_attention(..., scale={scale}) 与 softmax(q k * {scale}) v 不一致"
            + (
                "：你的结果是默认 scale 的结果，显式给出的 "
                f"{scale} 被当成了没给；用 `scale is None` 判断（`scale or ...` 会丢掉 0.0）"
                if ignored
                else ""
            ),
        )


def test_paged_attention_survives_large_logits(impl):
    """Logits near 1000 must not overflow: softmax subtracts the row maximum first."""
    rng = np.random.default_rng(7)
    query, cache, table, keys, values = random_case(rng, loud=400.0)
    got = np.asarray(impl.paged_attention(query, cache, table, 11, scale=1.0), dtype=np.float64)
    want = dense_reference(query, keys, values, 1.0)
    assert np.isfinite(got).all(), say(
        "softmax overflowed on large logits (inf/nan in the output): subtract each row's "
        "maximum logit before np.exp",
        "logit 很大时 softmax 溢出了（输出里有 inf/nan）：在 np.exp 之前减去每行的最大 logit",
    )
    ignored = np.allclose(got, dense_reference(query, keys, values, 1 / np.sqrt(query.shape[1])))
    assert np.allclose(got, want, atol=1e-5), say(
        "attention on large logits is wrong"
        + (
            ": with scale=1.0 your result is the one for the default "
            "scale 1/sqrt(D), so the scale argument is ignored"
            if ignored
            else ""
        ),
        "logit 很大时注意力结果不对"
        + (
            "：传入 scale=1.0 时你的结果却是默认 scale 1/sqrt(D) 的结果，scale 参数被忽略了"
            if ignored
            else ""
        ),
    )


def test_paged_attention_matches_the_kernel_reference_and_the_cuda_kernel(impl, kernels):
    """Your NumPy paged attention agrees with cuda_kernels.reference and the CUDA kernel."""
    ck = kernels
    from cuda_kernels import reference

    rng = np.random.default_rng(11)
    query, cache, table, _, _ = random_case(
        rng, heads=2, kv_heads=1, bs=4, d=4, length=7, num_blocks=5
    )
    got = np.asarray(impl.paged_attention(query, cache, table, 7))
    tables_ = np.asarray(table, np.int32)[None]  # [1, max_blocks]
    lens = np.array([7], np.int32)
    ref = reference.paged_attention(query[None], cache, tables_, lens)[0]
    assert np.allclose(got, ref, atol=1e-5), say(
        "your paged attention disagrees with cuda_kernels.reference",
        "你的分页注意力与 cuda_kernels.reference 不一致",
    )
    out = ck.paged_attention(query[None], cache, tables_, lens)[0]
    assert np.allclose(got, out, atol=1e-4), say(
        f"your paged attention and the CUDA kernel ({ck.backend()}) disagree by "
        f"{np.abs(got - out).max():.3g}",
        f"你的分页注意力与 CUDA 内核（{ck.backend()}）相差 {np.abs(got - out).max():.3g}",
    )


def why_kit_case_differs(got, want, case, s):
    """What a wrong answer on one of the kit's caches points at, in words."""
    n, bs, table = int(case.context_lens[s]), case.kv_cache.shape[3], case.block_tables[s].tolist()
    heads, kv_heads = case.query.shape[1], case.kv_cache.shape[2]
    where = say(
        f"sequence {s} of {len(case.context_lens)} (context_len {n}, block_size {bs}, "
        f"table {table}, {heads} query heads on {kv_heads} KV head(s))",
        f"第 {s} 个序列（共 {len(case.context_lens)} 个；context_len {n}，block_size {bs}，"
        f"表 {table}，{heads} 个查询头对应 {kv_heads} 个 KV 头）",
    )
    if np.abs(got).max() > POISON / 10:
        return say(
            f"{where}: your output holds the poison value {POISON:g}, so it read a slot no token "
            "owns: a position >= context_len, the empty tail of the last block, or a block the "
            "table does not name",
            f"{where}：输出里出现了毒值 {POISON:g}，说明读到了不属于任何 token 的 slot："
            "位置 >= context_len、最后一个 Block 的空尾，或表里没有的 Block",
        )
    query, cache, tables, lens = case.args[:4]
    default = reference_attention(query, cache, tables, lens)[s]  # scale left at 1/sqrt(D)
    if (
        case.scale is not None
        and np.allclose(got, default, atol=1e-6)
        and not np.allclose(default, want)
    ):
        return say(
            f"{where}: your answer is what the default scale 1/sqrt(D) gives, but the call "
            f"passed scale={case.scale:g}: use the scale argument when it is given",
            f"{where}：你的结果是默认 scale 1/sqrt(D) 的结果，但调用传入了 scale={case.scale:g}："
            "给了 scale 参数就要用它",
        )
    return say(
        f"{where}: your attention differs from the float64 reference by "
        f"{np.abs(got - want).max():.3g}: check the gather through the table and the KV head of "
        "each query head (h // (H // H_kv))",
        f"{where}：你的注意力与 float64 参考结果相差 {np.abs(got - want).max():.3g}："
        "检查按表取 K/V 的下标，以及每个查询头对应的 KV 头（h // (H // H_kv)）",
    )


@CHECK
@given(case=paged_caches(max_seqs=2, max_context=14, dtypes=("float32",)))
def test_paged_attention_matches_the_reference_on_the_testing_kits_poisoned_caches(impl, case):
    """On scattered caches whose unowned slots are poisoned, every sequence matches the
    reference."""
    want = reference_attention(*case.args)  # [S, H, D] float64
    for s, n in enumerate(case.context_lens):
        got = np.asarray(
            impl.paged_attention(
                case.query[s], case.kv_cache, case.block_tables[s], int(n), scale=case.scale
            ),
            dtype=np.float64,
        )
        assert got.shape == want[s].shape, say(
            f"paged_attention returned shape {got.shape}, expected [H, D] = {want[s].shape}",
            f"paged_attention 返回的形状是 {got.shape}，应为 [H, D] = {want[s].shape}",
        )
        assert np.allclose(got, want[s], atol=case.tolerance, rtol=case.tolerance), (
            why_kit_case_differs(got, want[s], case, s)
        )


def test_the_translation_functions_return_plain_integers(impl):
    """blocks_needed and slot return ints, and locate a pair of ints, even for a NumPy table."""
    table = np.array([7, 3, 5], np.int64)
    got = {
        "blocks_needed(17, 16)": impl.blocks_needed(17, 16),
        "slot(table, 4, 9)": impl.slot(table, 4, 9),
    }
    pair = impl.locate(table, 4, 9)
    got.update({"locate(table, 4, 9)[0]": pair[0], "locate(table, 4, 9)[1]": pair[1]})
    for call, value in got.items():
        assert isinstance(value, (int, np.integer)) and not isinstance(value, bool), say(
            f"{call} returned {value!r} of type {type(value).__name__}; it should be an int",
            f"{call} 返回了类型为 {type(value).__name__} 的 {value!r}；应返回 int",
        )
    assert len(pair) == 2 and (int(pair[0]), int(pair[1])) == (5, 1), say(
        f"locate([7, 3, 5], 4, 9) gave {pair}, expected (5, 1)",
        f"locate([7, 3, 5], 4, 9) 得到 {pair}，应为 (5, 1)",
    )


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_paged_attention_returns_float64_and_leaves_its_inputs_alone(impl, dtype):
    """The docstring promises a float64 [H, D] array, whatever the cache's dtype; the inputs are not
    changed."""
    rng = np.random.default_rng(5)
    query, cache, table, keys, values = random_case(rng, length=9)
    query, cache = query.astype(dtype), cache.astype(dtype)
    before = (query.copy(), cache.copy(), table.copy())
    got = impl.paged_attention(query, cache, list(table), 9)
    assert isinstance(got, np.ndarray), say(
        f"paged_attention returned a {type(got).__name__}; it should return a NumPy array",
        f"paged_attention 返回了 {type(got).__name__}；应返回 NumPy 数组",
    )
    assert got.dtype == np.float64, say(
        f"with a {dtype} cache, paged_attention returned {got.dtype}; its docstring promises "
        "float64: compute (and return) in float64 so that it matches a float64 reference to 1e-9, "
        "not just to the input's precision",
        f"cache 为 {dtype} 时 paged_attention 返回了 {got.dtype}；文档承诺 float64："
        "用 float64 计算并返回，结果才能与 float64 参考值在 1e-9 内一致，而不只是输入的精度",
    )
    want = dense_reference(
        query, keys.astype(dtype), values.astype(dtype), 1 / np.sqrt(query.shape[1])
    )
    assert got.shape == want.shape and np.allclose(got, want, atol=1e-9, rtol=1e-9), say(
        f"with a {dtype} cache and a list as the table, paged_attention differs from a float64 "
        f"dense softmax by {np.abs(got - want).max() if got.shape == want.shape else got.shape}: "
        "convert K, V and the query to float64 before the dot products",
        f"cache 为 {dtype}、表为 list 时，paged_attention 与 float64 稠密 softmax 相差 "
        f"{np.abs(got - want).max() if got.shape == want.shape else got.shape}：先把 K、V 和 "
        f"query 转成 float64 再算点积",
    )
    problem = changed_inputs(before, (query, cache, table))
    assert not problem, problem
