"""Adding a KV-cache layout is one registry entry plus one loader pair: a throwaway
head-major layout (HND, k_pool[H, N, B, D]) flows through the sector model, `convert`,
the launcher's shape checks, the decode kernel and the PTX/SASS report."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cuda_kernels  # noqa: F401  (selects the backend before numba.cuda is imported)

# isort: split
from numba import cuda, float32

from cuda_kernels import reference
from cuda_kernels.labs import layouts
from cuda_kernels.layout import Loaders
from pagedsim.labs import kv_layouts, sectors

pytestmark = pytest.mark.ch3_7
ROOT = Path(__file__).resolve().parents[2]
HND = kv_layouts.KVLayout(
    "hnd", ("H", "N", "B", "D"), ("H", "N", "B", "D"), "k_pool[H, N, B, D], v_pool[H, N, B, D]"
)


@cuda.jit(device=True)
def load_hnd(pool, block, kv_head, offset, d):
    return float32(pool[kv_head, block, offset, d])  # pool: [H, N, B, D]


def add_hnd() -> None:
    kv_layouts.register(HND)
    layouts.register_loaders("hnd", Loaders("hnd pools [H,N,B,D] scalar", load_hnd, load_hnd))


def remove_hnd() -> None:
    layouts.unregister_loaders("hnd")
    kv_layouts.unregister("hnd")


@pytest.fixture
def hnd():
    add_hnd()
    try:
        yield HND
    finally:
        remove_hnd()
    assert "hnd" not in kv_layouts.LAYOUTS and "hnd" not in layouts.LOADERS


def test_a_registered_layout_is_in_every_table_of_the_sector_model(hnd):
    rows = [r for r in sectors.layout_table() if r["layout"] == "hnd"]
    assert [(r["mapping"], r["which"]) for r in rows] == [
        (m, w) for m in sectors.MAPPINGS for w in ("k", "v")
    ]
    g = sectors.Geometry()
    w = sectors.warp_load("hnd", "kernel", "k", g, block=3, head=1)
    shape = (g.num_kv_heads, g.num_blocks, g.block_size, g.head_dim)
    lanes = np.arange(sectors.WARP)
    want = np.ravel_multi_index((1, 3, lanes // g.head_dim, lanes % g.head_dim), shape) * 2
    np.testing.assert_array_equal(w.addresses, want)  # NumPy's own row-major rule agrees


def test_a_registered_layout_converts_checks_shapes_and_decodes_like_the_reference(hnd):
    rng = np.random.default_rng(11)
    cache = rng.standard_normal((5, 2, 2, 4, 8)).astype(np.float32)  # [N, 2, H, B, D]
    query = rng.standard_normal((2, 4, 8)).astype(np.float32)
    tables, lens = np.array([[3, 0], [4, 1]], np.int32), np.array([7, 5], np.int32)
    k_src, v_src = layouts.convert("hnd", cache)
    assert k_src.shape == (2, 5, 4, 8) and k_src[1, 3, 2, 6] == cache[3, 0, 1, 2, 6]
    assert v_src[0, 4, 3, 1] == cache[4, 1, 0, 3, 1]
    with pytest.raises(ValueError, match="v_src must have shape"):
        layouts.decode("hnd", query, k_src, np.ascontiguousarray(v_src[:, :3]), tables, lens)
    got = layouts.decode("hnd", query, k_src, v_src, tables, lens, mode="single")
    want = reference.paged_attention(query, cache, tables, lens)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_layout_without_loaders_or_with_a_taken_name_is_refused_and_nothing_is_kept():
    before = set(kv_layouts.LAYOUTS)
    kv_layouts.register(HND)
    try:
        with pytest.raises(ValueError, match="no device loaders"):
            layouts.loaders("hnd")
        with pytest.raises(ValueError, match="already registered"):
            kv_layouts.register(HND)
    finally:
        kv_layouts.unregister("hnd")
    with pytest.raises(ValueError, match="must name N, H, B and D"):
        kv_layouts.KVLayout("bad", ("N", "H", "D"), ("N", "H", "B", "D"), "")
    with pytest.raises(ValueError, match="layout must be one of"):
        layouts.register_loaders("nope", layouts.SPLIT_SCALAR)
    assert set(kv_layouts.LAYOUTS) == set(layouts.LOADERS) == before


@pytest.mark.parametrize("module", [kv_layouts, layouts])
def test_the_layout_tables_in_the_docstrings_name_exactly_the_registered_layouts(module):
    named = [
        line.split()[0]
        for line in module.__doc__.splitlines()
        if line.startswith("    ") and not line.startswith("     ")
    ]
    assert named == list(kv_layouts.LAYOUTS), module.__name__


@pytest.mark.ptx
@pytest.mark.slow
def test_a_registered_layout_gets_its_own_row_in_the_ptx_and_sass_report():
    code = (
        "import json; from tests.labs.test_layout_registry import add_hnd; add_hnd()\n"
        "from cuda_kernels import labs, report\n"
        "rows = [r for r in labs._ptx_kernels() if r[0].startswith('decode_hnd')]\n"
        "specs = [('labs.' + r[0], *r[1:]) for r in rows]\n"
        "print(json.dumps(report.collect(specs, ('sm_90',), workers=1)))\n"
    )
    env = dict(
        os.environ,
        PAGEDSIM_CUDA="gpu",
        NUMBA_ENABLE_CUDASIM="0",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["kernel"] == "labs.decode_hnd[float16,G=4,D=128]" and row["arch"] == "sm_90"
    assert row["registers"] > 0 and row["spill_bytes"] == 0
    assert row["global_load_bits"] < 128  # scalar loads: this throwaway has no 16-byte pair
