"""Checks for exercise 3.2: bytes per block and offsets in the whole-model pool (chapter 3.2).

Bytes are compared with pagedsim.sizing's ModelSpec and the chapter's 8 MiB example;
offsets with NumPy's own indexing of an arange-filled pool (Hypothesis picks shapes
and indices); and slot offsets with the write_kv kernel writing random K/V into a
NaN-poisoned pool through a per-layer view.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.i18n import say
from pagedsim.sizing import ModelSpec

EXERCISE = "3.2"
pytestmark = pytest.mark.ch3_2


def test_the_chapters_block_is_8_mib(impl):
    """16 tokens x 32 layers x K,V x 32 heads x 128 dims x 2 bytes = 8,388,608 bytes."""
    got = impl.bytes_per_block(16, 32, 32, 128, 2)
    assert got == 16 * 32 * 2 * 32 * 128 * 2, say(
        f"bytes_per_block for the chapter's example gave {got:,}, expected 8,388,608: "
        "count K and V, every layer and the bytes per element",
        f"本章示例的 bytes_per_block 得到 {got:,}，应为 8,388,608：要算上 K 和 V、每一层以及每个"
        f"元素的字节数",
    )
    default = impl.bytes_per_block(16, 32, 32, 128)
    assert default == got, say(
        f"bytes_per_block(16, 32, 32, 128) without dtype_bytes gave {default:,}, expected {got:,}: "
        "dtype_bytes should default to 2 (FP16), as in the chapter",
        f"不传 dtype_bytes 时 bytes_per_block(16, 32, 32, 128) 得到 {default:,}，应为 {got:,}："
        "dtype_bytes 默认应为 2（FP16），与本章一致",
    )


@settings(max_examples=30, derandomize=True, database=None, deadline=None)
@given(
    st.integers(1, 64),
    st.integers(1, 48),
    st.integers(1, 16),
    st.sampled_from([64, 80, 128]),
    st.sampled_from([1, 2, 4]),
)
def test_bytes_per_block_agrees_with_the_model_spec(impl, bs, layers, kv_heads, dim, dtype_bytes):
    """bytes_per_block matches pagedsim.sizing for any model shape and dtype."""
    want = ModelSpec("x", layers, kv_heads, dim, dtype_bytes).bytes_per_block(bs)
    got = impl.bytes_per_block(bs, layers, kv_heads, dim, dtype_bytes)
    assert got == want, say(
        f"bytes_per_block({bs}, {layers}, {kv_heads}, {dim}, {dtype_bytes}) gave {got}, expected "
        f"{want}",
        f"bytes_per_block({bs}, {layers}, {kv_heads}, {dim}, {dtype_bytes}) 得到 {got}，应为 "
        f"{want}",
    )


AXES = ("block", "layer", "kv", "head", "token", "dim")
# the chapter's pool: 5,120 blocks of 8 MiB (16 tokens, 32 layers, K and V, 32 KV heads, 128 dims,
# FP16), 40 GiB and 21,474,836,480 elements: offsets pass 2**31 (and 2**32), so int32 arithmetic
# wraps
CHAPTER_POOL = (5120, 32, 2, 32, 16, 128)


def offset_of(shape, index) -> int:
    """The flat offset in Python ints (no overflow), by C order's definition."""
    out = 0
    for size, i in zip(shape, index, strict=True):
        out = out * size + i
    return out


def c_strides(shape) -> tuple:
    """Each axis's stride in Python ints: the offset of a 1 on that axis alone."""
    return tuple(
        offset_of(shape, [0] * k + [1] + [0] * (len(shape) - k - 1)) for k in range(len(shape))
    )


def swapped(shape, index, got, *, sizes_too: bool):
    """The two axes the student swapped, when `got` is the offset with both their indices and
    their sizes swapped (sizes_too: the axes in the wrong order), or their indices alone (each
    index times the other's stride)."""
    for a in range(len(shape)):
        for b in range(a + 1, len(shape)):
            order = list(range(len(shape)))
            order[a], order[b] = b, a
            sizes = [shape[k] for k in order] if sizes_too else shape
            moved = sizes_too or index[a] != index[b]
            if moved and offset_of(sizes, [index[k] for k in order]) == got:
                return AXES[a], AXES[b]
    return None


def test_flat_offset_follows_the_axis_order_of_the_pool(impl):
    """[num_blocks, num_layers, 2, H_kv, B, D], in that order: sizes all different, so a swapped
    pair of axes is named."""
    shape, index = (3, 5, 2, 7, 4, 6), (2, 3, 1, 5, 2, 4)
    got, want = impl.flat_offset(shape, *index), offset_of(shape, index)
    if got != want:
        swap = swapped(shape, index, got, sizes_too=True)
        assert swap is None, say(
            f"flat_offset{(shape, *index)} gave {got}, expected {want}: it treats the {swap[0]} "
            f"and {swap[1]} axes in swapped order. The pool is [num_blocks, num_layers, 2 (K/V), "
            "num_kv_heads, block_size, head_dim]: kv comes before head, token before dim",
            f"flat_offset{(shape, *index)} 得到 {got}，应为 {want}：它把 {swap[0]} 轴和 "
            f"{swap[1]} 轴的顺序弄反了。池是 [num_blocks, num_layers, 2 (K/V), num_kv_heads, "
            "block_size, head_dim]：kv 在 head 之前，token 在 dim 之前",
        )
        slip = swapped(shape, index, got, sizes_too=False)
        assert slip is None, say(
            f"flat_offset{(shape, *index)} gave {got}, expected {want}: the {slip[0]} and "
            f"{slip[1]} indices are swapped (the {slip[0]} index is multiplied by the {slip[1]} "
            "axis's stride, and the other way round)",
            f"flat_offset{(shape, *index)} 得到 {got}，应为 {want}：{slip[0]} 与 {slip[1]} 的下标"
            f"互换了（{slip[0]} 的下标乘了 {slip[1]} 轴的步长，反之亦然）",
        )
        raise AssertionError(
            say(
                f"flat_offset{(shape, *index)} gave {got}, expected {want}: each index times its "
                f"dimension's stride (here {c_strides(shape)})",
                f"flat_offset{(shape, *index)} 得到 {got}，应为 {want}：每个下标乘以它那一维的步长",
            )
        )


@st.composite
def pool_index(draw):
    """A small pool shape (N, L, 2, H, B, D) and one valid index into it."""
    shape = (
        draw(st.integers(1, 4)),
        draw(st.integers(1, 3)),
        2,
        draw(st.integers(1, 3)),
        draw(st.integers(1, 4)),
        draw(st.integers(1, 5)),
    )
    return shape, tuple(draw(st.integers(0, n - 1)) for n in shape)


@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(pool_index())
def test_flat_offset_agrees_with_numpy_indexing(impl, case):
    """flat_offset(shape, *index) is the number NumPy finds at kv_pool[index] in an arange pool."""
    shape, index = case
    # [N, L, 2, H_kv, B, D]: each element holds its offset
    pool = np.arange(np.prod(shape)).reshape(shape)
    got = impl.flat_offset(shape, *index)
    numpy_strides = tuple(s // pool.itemsize for s in pool.strides)
    assert got == pool[index], say(
        f"flat_offset{index} in a pool of shape {shape} gave {got}, NumPy says {pool[index]}: "
        f"check each dimension's stride (NumPy's are {numpy_strides})",
        f"形状为 {shape} 的池中 flat_offset{index} 得到 {got}，NumPy 给出 {pool[index]}："
        f"检查每一维的步长（NumPy 的是 {numpy_strides}）",
    )
    assert tuple(impl.strides(shape)) == numpy_strides, say(
        f"strides({shape}) disagree with NumPy's {numpy_strides}",
        f"strides({shape}) 与 NumPy 的 {numpy_strides} 不一致",
    )


def test_slot_offset_uses_block_size_to_split_the_slot(impl):
    """Slot 7 with blocks of 4 tokens is token 3 of block 1, whatever head_dim is."""
    shape = (3, 2, 2, 2, 4, 5)  # [N, L, 2, H_kv, B, D]: B (4) differs from D (5)
    pool = np.arange(np.prod(shape)).reshape(shape)
    got = impl.slot_offset(shape, 7, 1, 1, 0, 2)
    assert got == pool[1, 1, 1, 0, 3, 2], say(
        f"slot_offset(slot 7) gave {got}, expected {pool[1, 1, 1, 0, 3, 2]}: "
        "slot // block_size is the block and slot % block_size the token",
        f"slot_offset(slot 7) 得到 {got}，应为 {pool[1, 1, 1, 0, 3, 2]}："
        "slot // block_size 是 Block，slot % block_size 是 token",
    )


def test_offsets_at_the_chapters_scale_pass_2_to_the_31_without_wrapping(impl):
    """The chapter's pool (5,120 blocks x 8 MiB = 40 GiB) has 21,474,836,480 elements: its last
    offset, strides and bytes are exact Python-int values; int32 arithmetic wraps negative."""
    shape = CHAPTER_POOL
    last = tuple(n - 1 for n in shape)
    checks = [
        (
            f"flat_offset({shape}, *{last})",
            lambda: impl.flat_offset(shape, *last),
            offset_of(shape, last),
        ),
        (
            f"flat_offset({shape}, 256, 0, 0, 0, 0, 0)",
            lambda: impl.flat_offset(shape, 256, 0, 0, 0, 0, 0),
            offset_of(shape, (256,) + (0,) * 5),
        ),
        (
            f"slot_offset({shape}, slot={5120 * 16 - 1}, layer=31, kv=1, head=31, dim=127)",
            lambda: impl.slot_offset(shape, 5120 * 16 - 1, 31, 1, 31, 127),
            offset_of(shape, last),
        ),
        (
            f"strides((3,) + {shape})",
            lambda: tuple(impl.strides((3,) + shape)),
            c_strides((3,) + shape),
        ),
        (
            "bytes_per_block(16, 32, 32, 128, 2) * 5120 blocks",
            lambda: impl.bytes_per_block(16, 32, 32, 128, 2) * 5120,
            5120 * 8 * 2**20,
        ),
    ]
    for call, run, want in checks:
        got = run()
        got = tuple(int(g) for g in got) if isinstance(got, tuple) else got
        if got == want:
            continue
        wrapped = isinstance(got, (int, np.integer)) and (int(got) - want) % 2**32 == 0
        wrapped |= isinstance(got, tuple) and all(
            (g - w) % 2**32 == 0 for g, w in zip(got, want, strict=False)
        )
        assert not wrapped, say(
            f"{call} gave {got}, expected {want}: past 2**31 = 2,147,483,648 a 32-bit integer "
            "wraps (int32 strides or an int32 array); compute in Python ints or int64",
            f"{call} 得到 {got}，应为 {want}：超过 2**31 = 2,147,483,648 时 32 位整数会回绕"
            "（int32 的步长或 int32 数组）；用 Python int 或 int64 计算",
        )
        raise AssertionError(
            say(
                f"{call} gave {got}, expected {want}. That is not a 32-bit wrap (they do not "
                "differ by a multiple of 2**32): an index or a size is taken from the wrong "
                "axis. shape is (num_blocks, num_layers, 2, num_kv_heads, block_size, head_dim)",
                f"{call} 得到 {got}，应为 {want}。这不是 32 位回绕（两者之差不是 2**32 的倍数）："
                "某个下标或尺寸取错了轴。shape 是 (num_blocks, num_layers, 2, num_kv_heads, "
                "block_size, head_dim)",
            )
        )


@pytest.mark.kernels
def test_slot_offsets_find_what_write_kv_wrote(impl, kernels):
    """write_kv into kv_pool[:, layer]; every number is found again at its slot_offset."""
    rng = np.random.default_rng(5)
    shape = (5, 3, 2, 2, 4, 3)  # [N, L, 2, H_kv, B, D]
    pool = np.full(shape, np.nan, np.float32)
    layer = 1
    slots = rng.choice(shape[0] * shape[4], size=6, replace=False).astype(np.int64)
    key = rng.standard_normal((6, shape[3], shape[5])).astype(np.float32)  # [T, H_kv, D]
    value = rng.standard_normal((6, shape[3], shape[5])).astype(np.float32)
    kernels.write_kv(pool[:, layer], key, value, slots)
    flat = pool.reshape(-1)
    for t, s in enumerate(slots):
        for h in range(shape[3]):
            for d in range(shape[5]):
                for kv, src in ((0, key), (1, value)):
                    got = flat[impl.slot_offset(shape, int(s), layer, kv, h, d)]
                    assert got == src[t, h, d], say(
                        f"write_kv put {'KV'[kv]} of token {t} (slot {s}, head {h}, dim {d}) "
                        f"somewhere else than slot_offset says (found {got} there)",
                        f"write_kv 把 token {t}（slot {s}，head {h}，dim {d}）的 {'KV'[kv]} 写到了 "
                        f"slot_offset 所说之外的地方（那里是 {got}）",
                    )
    assert np.isnan(pool[:, [0, 2]]).all(), say(
        "write_kv into layer 1 touched other layers", "向第 1 层 write_kv 时改动了其他层"
    )


def test_the_results_are_integers_and_strides_a_tuple_even_with_repeated_sizes(impl):
    """bytes_per_block and offsets are ints; strides of [4, 4, 4] (a list, sizes repeated) is the
    tuple (16, 4, 1)."""
    got = impl.bytes_per_block(16, 32, 32, 128, 2)
    assert isinstance(got, (int, np.integer)) and not isinstance(got, bool), say(
        f"bytes_per_block(16, 32, 32, 128, 2) returned {got!r} of type {type(got).__name__}: a "
        "number of bytes is an int; multiply integers only (no / and no float factors)",
        f"bytes_per_block(16, 32, 32, 128, 2) 返回了类型为 {type(got).__name__} 的 {got!r}：字节数"
        "是 int；只用整数相乘（不要用 /，也不要有浮点因子）",
    )
    for shape, want in [
        ([4, 4, 4], (16, 4, 1)),
        ((2, 3, 2, 3), (18, 6, 3, 1)),
        ((5,), (1,)),
        ((), ()),
    ]:
        got = impl.strides(shape)
        assert isinstance(got, tuple) and got == want, say(
            f"strides({shape!r}) gave {got!r}, expected the tuple {want}: each stride is the "
            "product of the sizes to its right (by position, so repeated sizes do not matter)",
            f"strides({shape!r}) 得到 {got!r}，应为元组 {want}：每个步长是它右边各维大小的乘积（"
            f"按位置算，大小重复不影响）",
        )
    shape = (3, 2, 2, 2, 4, 4)
    offset = impl.flat_offset(shape, 2, 1, 1, 1, 3, 2)
    assert isinstance(offset, (int, np.integer)) and offset == np.ravel_multi_index(
        (2, 1, 1, 1, 3, 2), shape
    ), say(
        f"flat_offset({shape}, 2, 1, 1, 1, 3, 2) gave {offset!r}, expected the int "
        f"{np.ravel_multi_index((2, 1, 1, 1, 3, 2), shape)}",
        f"flat_offset({shape}, 2, 1, 1, 1, 3, 2) 得到 {offset!r}，应为整数 "
        f"{np.ravel_multi_index((2, 1, 1, 1, 3, 2), shape)}",
    )
