"""Checks for puzzle 3.k3: a naive paged decode, one thread per head."""

from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle import POISON
from course.ch03_kv_block.checks._puzzle_checks import (
    Puzzle,
    check_launches,
    check_spec,
    logits_near,
    mistake,
    on_block_edge,
    paged_table,
)
from course.i18n import say

EXERCISE = "3.k3"
pytestmark = pytest.mark.ch3_7


def spec(q, k_cache, v_cache, block_table, context_len, out):
    B, D, L = k_cache.shape[1], q.shape[1], int(context_len[0])
    pos = np.arange(L)
    k = k_cache[block_table[pos // B], pos % B]  # [L, H, D]
    v = v_cache[block_table[pos // B], pos % B]
    s = np.einsum("hd,lhd->hl", q, k) / np.sqrt(D)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    out[:] = np.einsum("hl,lhd->hd", w / w.sum(axis=1, keepdims=True), v)
    return {"out": out}


class Case(NamedTuple):  # `build(case)` makes its arrays, the same ones every time
    H: int  # heads
    B: int  # block_size
    D: int  # head_dim
    L: int  # the sequence's length (context_len)
    spare_blocks: int  # cache blocks it does not use
    spare_entries: int  # garbage table entries past its last block
    base: float  # the scaled logits lie between base and base + spread
    spread: float
    seed: int


def build(case: Case, fill=np.nan) -> dict:
    """q [H, D] whose scaled logits are about `base`, spread evenly over `spread` from the first
    token to the last (or from the last to the first); a cache with `spare_blocks` unused blocks;
    a table `spare_entries` longer than L needs. Every slot the sequence does not use is `fill`,
    and every table entry past its last block is garbage (an id past the cache's end)."""
    H, B, D, L, spare_blocks, spare_entries, base, spread, seed = case
    rng = np.random.default_rng(seed)
    N, table = paged_table(rng, L, B, spare_blocks, spare_entries)
    k_cache = np.full((N, B, H, D), fill)
    v_cache = np.full((N, B, H, D), fill)
    q = rng.standard_normal((H, D))
    pos = np.arange(L)
    k = rng.standard_normal((L, H, D))
    logits_near(base, spread, rng, q, k)
    k_cache[table[pos // B], pos % B] = k
    v_cache[table[pos // B], pos % B] = rng.standard_normal((L, H, D))
    return {
        "q": q,
        "k_cache": k_cache,
        "v_cache": v_cache,
        "block_table": table,
        "context_len": np.array([L]),
        "out": np.full((H, D), POISON),
    }


@st.composite
def params(draw, *, full: bool):
    B = draw(st.integers(1, 32) if full else st.integers(1, 3))
    L = on_block_edge(draw, draw(st.integers(1, 6 * B) if full else st.integers(1, 6)), B)
    return Case(
        H=draw(st.integers(1, 4) if full else st.integers(1, 3)),
        B=B,
        D=draw(st.sampled_from([1, 2, 3, 16, 64, 128]) if full else st.integers(1, 3)),
        L=L,
        spare_blocks=draw(st.integers(0, 2)),
        spare_entries=draw(st.integers(0, 2)),
        base=draw(st.sampled_from([0.0, 300.0, -300.0, 2000.0, -2000.0])),
        spread=draw(st.sampled_from([2000.0, 3.0, 0.0])),  # the overflowing spread first
        seed=draw(st.integers(0, 2**16)),
    )


NUMERICS = say(
    "The scaled logits on this case lie between base and base + spread (see the case): before "
    "exp, subtract the largest SCALED logit of the head, over all its tokens (start the running "
    "max at -inf, or at the first logit, not at 0; shifting by the first logit, or by any other "
    "one, overflows).",
    "该用例的缩放后 logit 位于 base 与 base + spread 之间（见用例）：在 exp 之前减去该头所有 token "
    "中最大的缩放后 logit（运行最大值从 -inf 或第一个 logit 开始，而不是 0；用第一个或其他某个 "
    "logit 平移都会溢出）。",
)
AXES = {
    "q": ("H, heads", "D, head_dim"),
    "k_cache": ("num_blocks", "B, block_size", "H, heads", "D, head_dim"),
    "v_cache": ("num_blocks", "B, block_size", "H, heads", "D, head_dim"),
    "block_table": ("the table's length M",),
    "context_len": ("1",),
    "out": ("H, heads", "D, head_dim"),
}


def _variant(q, k_cache, v_cache, block_table, context_len, out, *, scale, change=""):
    """The spec with the scale changed, and maybe one more thing (`change`): "k_head0" (head 0's
    keys and values for every head), "v=k", or "raw" (a sum of exps left unshifted under shifted
    numerators)."""
    k_head0, raw, v = change == "k_head0", change == "raw", "k" if change == "v=k" else None
    B, L = k_cache.shape[1], int(context_len[0])
    pos = np.arange(L)
    k = k_cache[block_table[pos // B], pos % B]
    val = (k if v == "k" else v_cache[block_table[pos // B], pos % B]).copy()
    if k_head0:  # keys and values of head 0 for every head
        k = np.broadcast_to(k[:, :1], k.shape)
        val = np.broadcast_to(val[:, :1], val.shape)
    s = np.einsum("hd,lhd->hl", q, k) * scale
    w = np.exp(s - s.max(axis=1, keepdims=True))
    total = np.exp(s).sum(axis=1, keepdims=True) if raw else w.sum(axis=1, keepdims=True)
    out[:] = np.einsum("hl,lhd->hd", w / total, val)
    return {"out": out}


def _root(q):
    return 1 / np.sqrt(q.shape[1])


MISTAKES = (
    mistake(
        "The logits were not scaled: multiply q[h] . k_p by scale = 1 / sqrt(D).",
        "logit 没有缩放：q[h] . k_p 要乘以 scale = 1 / sqrt(D)。",
        lambda **a: _variant(**a, scale=1.0),
    ),
    mistake(
        "The logits were scaled by 1 / D: the spec's scale is 1 / sqrt(D).",
        "logit 按 1 / D 缩放了：规范的 scale 是 1 / sqrt(D)。",
        lambda **a: _variant(**a, scale=1.0 / a["q"].shape[1]),
    ),
    mistake(
        "Every head used head 0's keys and values: read k_cache[block, offset, h, :] and "
        "v_cache[block, offset, h, :] with the thread's own head h.",
        "每个头都用了头 0 的 key 和 value：要用线程自己的头 h 读取 "
        "k_cache[block, offset, h, :] 和 v_cache[block, offset, h, :]。",
        lambda **a: _variant(**a, scale=_root(a["q"]), change="k_head0"),
    ),
    mistake(
        "The weighted sum read k_cache where it needs the values: out[h, :] = sum_p w_p * "
        "v_cache[...], from v_cache.",
        "加权和读的是 k_cache，而它需要的是 value：out[h, :] = sum_p w_p * v_cache[...]。",
        lambda **a: _variant(**a, scale=_root(a["q"]), change="v=k"),
    ),
    mistake(
        "The weights were divided by the sum of UNSHIFTED exps: shift the sum by the same "
        "maximum as each weight, total = sum_p exp(s_p - max).",
        "权重除以的是未平移的 exp 之和：和也要减去同一个最大值，total = sum_p exp(s_p - max)。",
        lambda **a: _variant(**a, scale=_root(a["q"]), change="raw"),
    ),
)

# run first on every stepped run, all with 2 heads, a last partial block, a table that moves
# every block and a garbage entry past the last one:
EXAMPLES = (
    # small logits: the arithmetic alone
    Case(H=2, B=2, D=3, L=5, spare_blocks=1, spare_entries=1, base=0.0, spread=3.0, seed=0),
    # logits from about 300 up to 2300, the first the smallest, the largest past the first
    # block: only a shift by the true maximum keeps every exp finite
    Case(H=2, B=2, D=2, L=5, spare_blocks=1, spare_entries=1, base=300.0, spread=2000.0, seed=0),
    # logits all near -2000: a running max that starts at 0 underflows every exp to 0
    Case(H=2, B=2, D=2, L=3, spare_blocks=0, spare_entries=1, base=-2000.0, spread=3.0, seed=3),
)

PUZZLE = Puzzle(
    module=__name__,
    kernel="paged_decode_kernel",
    build=build,
    spec=spec,
    outputs=("out",),
    threads=lambda arrays: arrays["q"].shape[0],
    owner=lambda out, index, arrays: index[0],
    numerics=NUMERICS,
    axes=AXES,
    mistakes=MISTAKES,
    examples=EXAMPLES,
    unused_read=say(
        "That value came from a slot the sequence does not use (those hold NaN here): read "
        "positions p < context_len[0] only, each through block_table[p // B].",
        "这个值来自序列没有用到的槽（这里那些槽是 NaN）：只读 p < context_len[0] 的位置，"
        "并经 block_table[p // B] 读取。",
    ),
    bounds=say(
        "block_table may be longer than the sequence needs, and its entries past the last "
        "block are garbage: find the last block from context_len, not from the table's length.",
        "block_table 可能比序列所需的更长，最后一个块之后的条目是垃圾值："
        "要从 context_len 算出最后一个块，而不是从表的长度。",
    ),
)


def test_paged_decode_matches_the_softmax_spec(impl):
    """out[h] = softmax(q[h] . K / sqrt(D)) V through the table, for logits small and large."""
    check_spec(PUZZLE, impl, params(full=False))


def test_paged_decode_launches_on_every_case_the_spec_allows(impl):
    """Real launches: head_dim up to 128, blocks up to 32, logits in the thousands of either sign,
    tables longer than needed with garbage past the last block."""
    check_launches(PUZZLE, impl, params(full=True))
