"""The ladder (`cuda_kernels.ladder.RUNGS`): every rung computes paged decode attention as
the float64 reference does, through shuffled block tables, for fp16 and fp32 caches,
GQA and ragged lengths; a rung refuses a shape it cannot serve by naming the argument;
the first rung stays short enough to read in one sitting."""

import importlib
import inspect

import numpy as np
import pytest
from conftest import GARBAGE, rel_err
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuda_kernels import ScoreMask, reference
from cuda_kernels._checks import MAX_SCALE
from cuda_kernels.ladder import FILES, RUNGS
from cuda_kernels.ladder.rung1_naive import naive_decode

TOLERANCE = {"tensor_cores": 5e-3, "production": 5e-3}  # P: float16 into the second mma
FP16_ONLY = {"tensor_cores"}


def batch(rng, lens, kv_heads, group, head_dim, block_size, dtype):
    """(query, cache, tables, lens): blocks scattered over a pool with spare blocks, table
    entries past each sequence's blocks set to GARBAGE (never read)."""
    lens = np.asarray(lens, np.int32)
    tables, num_blocks = reference.scattered_block_tables(
        rng, lens, block_size, spare=2, fill=GARBAGE
    )
    cache = rng.standard_normal((num_blocks, 2, kv_heads, block_size, head_dim)).astype(dtype)
    query = rng.standard_normal((len(lens), kv_heads * group, head_dim)).astype(dtype)
    return query, cache, tables, lens


def run(rung, query, cache, tables, lens, scale=None):
    several = {"split_k", "cp_async", "tensor_cores"}  # partitions of 8 tokens: several
    options = {"partition_size": 8} if rung.name in several else {}
    return rung.decode(query, cache, tables, lens, scale, **options)


def test_the_ladder_has_at_least_seven_rungs_in_reading_order_each_with_one_idea():
    assert len(RUNGS) >= 7
    assert [r.file.stem for r in RUNGS] == list(FILES)
    assert len({r.name for r in RUNGS}) == len(RUNGS)
    for rung in RUNGS:
        assert rung.idea and "\n" not in rung.idea, rung
        assert hasattr(rung.kernel, "py_func") or hasattr(rung.kernel, "compile"), rung
    for rung in RUNGS[1:]:
        text = rung.file.read_text()
        assert "What changed" in text and "Why" in text and "What it buys" in text, rung


def test_the_first_rung_kernel_is_at_most_sixty_lines_with_its_docstring():
    lines = inspect.getsource(naive_decode.py_func).splitlines()
    assert len(lines) <= 60, len(lines)
    assert naive_decode.py_func.__doc__


@pytest.mark.parametrize("rung", RUNGS, ids=[r.name for r in RUNGS])
@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["fp16", "fp32"])
def test_each_rung_matches_the_float64_reference_with_gqa_ragged_lengths_and_shuffled_tables(
    rung, dtype
):
    rng = np.random.default_rng([7, RUNGS.index(rung), np.dtype(dtype).itemsize])
    query, cache, tables, lens = batch(  # 9 tokens: a partial third block, two partitions
        rng, [3, 9, 1], kv_heads=2, group=2, head_dim=16, block_size=4, dtype=dtype
    )
    want = reference.paged_attention(query, cache, tables, lens)
    if rung.name in FP16_ONLY and dtype == np.float32:
        with pytest.raises(ValueError, match="kv_cache"):
            run(rung, query, cache, tables, lens)
        return
    got = run(rung, query, cache, tables, lens)
    assert got.shape == want.shape and got.dtype == np.float32
    assert rel_err(got, want) < TOLERANCE.get(rung.name, 1e-5)


def test_a_rung_file_read_alone_is_called_through_its_own_decode():
    """Each rung module has `decode` (what `Rung.decode` calls), with its launch options."""
    rng = np.random.default_rng(8)
    query, cache, tables, lens = batch(rng, [5, 2], 1, 2, 16, 4, np.float16)
    want = reference.paged_attention(query, cache, tables, lens)
    for name in FILES:
        module = importlib.import_module(f"cuda_kernels.ladder.{name}")
        assert callable(module.decode), name
    split = importlib.import_module("cuda_kernels.ladder.rung8_split")
    assert rel_err(split.decode(query, cache, tables, lens, None, partition_size=4), want) < 1e-5
    naive = importlib.import_module("cuda_kernels.ladder.rung1_naive")
    assert rel_err(naive.decode(query, cache, tables, lens), want) < 1e-5


@settings(
    max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    rung=st.sampled_from(RUNGS),
    seed=st.integers(0, 2**32 - 1),
    lens=st.lists(st.integers(1, 12), min_size=1, max_size=2),
    kv_heads=st.integers(1, 2),
    group=st.sampled_from([1, 2, 4]),
    block_size=st.sampled_from([1, 2, 4, 8]),
    head_dim=st.sampled_from([16, 32]),
)
def test_any_small_shape_matches_the_reference(
    rung, seed, lens, kv_heads, group, block_size, head_dim
):
    rng = np.random.default_rng(seed)
    query, cache, tables, lens = batch(rng, lens, kv_heads, group, head_dim, block_size, np.float16)
    got = run(rung, query, cache, tables, lens, scale=0.3)
    want = reference.paged_attention(query, cache, tables, lens, ScoreMask(scale=0.3))
    assert rel_err(got, want) < TOLERANCE.get(rung.name, 1e-5)


def test_a_vector_rung_refuses_a_head_dim_its_16_byte_loads_cannot_split():
    rng = np.random.default_rng(3)
    query, cache, tables, lens = batch(rng, [3], 1, 1, head_dim=24, block_size=4, dtype=np.float16)
    for rung in RUNGS[4:10]:  # rungs 5-10: 16-byte loads, or 16-wide mma tiles
        with pytest.raises(ValueError, match="kv_cache.*head_dim"):
            run(rung, query, cache, tables, lens)


def test_the_gqa_rungs_refuse_a_group_larger_than_their_registers_hold():
    rng = np.random.default_rng(4)
    query, cache, tables, lens = batch(rng, [3], 1, 16, head_dim=16, block_size=4, dtype=np.float16)
    for rung in RUNGS[6:9]:  # rungs 7-9: G query vectors and accumulators per lane
        with pytest.raises(ValueError, match="query"):
            run(rung, query, cache, tables, lens)


@pytest.mark.parametrize("scale", [1e38, -1e38, 2 * MAX_SCALE, float("nan")])
def test_every_rung_refuses_a_scale_whose_scores_would_overflow(scale):
    rng = np.random.default_rng(5)
    query, cache, tables, lens = batch(rng, [3], 1, 1, 16, 4, np.float16)
    for rung in RUNGS:
        with pytest.raises(ValueError, match="scale"):
            rung.decode(query, cache, tables, lens, scale)


def test_a_bad_block_table_entry_is_refused_before_any_launch():
    rng = np.random.default_rng(6)
    query, cache, tables, lens = batch(rng, [5], 1, 1, 16, 4, np.float16)
    tables[0, 1] = cache.shape[0]  # read (token 4 lives in block 1) and out of range
    for rung in RUNGS:
        with pytest.raises(ValueError, match="block_tables"):
            rung.decode(query, cache, tables, lens)


KERNEL_RUNGS = [r for r in RUNGS if r.name != "production"]  # rung 11 points at fast/
INSTRUCTIONS = {  # primitives' one-instruction wrappers (inline PTX) rungs 9-10 may use
    "cp_async16",
    "cp_async_commit",
    "cp_async_wait",
    "ldmatrix_x4",
    "ldmatrix_x2_trans",
    "mma_f16",
    "pack_f16x2",
}


@pytest.mark.parametrize("rung", KERNEL_RUNGS, ids=[r.name for r in KERNEL_RUNGS])
def test_each_rung_is_one_kernel_of_at_most_120_lines(rung):
    lines = inspect.getsource(rung.kernel.py_func).splitlines()
    assert len(lines) <= 120, (rung, len(lines))


@pytest.mark.parametrize("rung", KERNEL_RUNGS, ids=[r.name for r in KERNEL_RUNGS])
def test_a_rung_imports_only_what_an_earlier_rung_showed_or_one_instruction(rung):
    """Standalone: from this package only the host checks (launch, _checks), earlier rungs,
    the simulator's stand-ins (sim/), and from primitives only one-instruction wrappers."""
    import ast

    index = FILES.index(rung.file.stem)
    tree = ast.parse(rung.file.read_text())
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        module, names = node.module or "", {a.name for a in node.names}
        if node.level == 1 and module.startswith("rung"):
            assert FILES.index(module) < index, (rung, module)
        elif node.level == 2 and module == "":  # from .. import _backend / _checks
            assert names <= {"_backend", "_checks"}, (rung, names)
        elif node.level == 2 and module == "primitives":
            assert names <= INSTRUCTIONS, (rung, names - INSTRUCTIONS)
        else:
            allowed = {(1, "launch"), (2, "_checks"), (2, "_backend"), (2, "sim.simulator")}
            assert (node.level, module) in allowed, (rung, node.level, module)


def test_the_last_rung_points_at_each_production_addition_by_its_line():
    from pathlib import Path

    import cuda_kernels
    from cuda_kernels.ladder import rung11_production as last

    root = Path(cuda_kernels.__file__).parent
    for what, path, line, text in last.ADDS:
        got = (root / path).read_text().splitlines()[line - 1]
        assert text in got, f"{what}: {path}:{line} is now {got.strip()!r}"
    topics = " ".join(what for what, *_ in last.ADDS)
    for topic in ("base-2 exp", "lazy rescale", "swizzle", "multi-warp CTAs", "split plan"):
        assert topic in topics, topic
