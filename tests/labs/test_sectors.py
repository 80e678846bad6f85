"""The sector-count model: what each layout and each misalignment costs one warp, from index
arithmetic."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedsim.labs import sectors as sc

pytestmark = pytest.mark.ch3_7


def test_a_contiguous_aligned_warp_load_touches_exactly_its_bytes_in_sectors():
    g = sc.Geometry(elem_bytes=4)
    w = sc.warp_load("fused", "kernel", "k", g)
    assert (w.requested, w.sectors, w.lines, w.efficiency) == (128, 4, 1, 1.0)
    assert (np.diff(w.addresses) == 4).all()


def test_fused_and_split_cost_the_same_sectors_and_differ_only_in_k_to_v_distance():
    g = sc.Geometry()
    for mapping in sc.MAPPINGS:
        for which in "kv":
            a, b = (
                sc.warp_load("fused", mapping, which, g),
                sc.warp_load("split", mapping, which, g),
            )
            assert (a.sectors, a.lines) == (b.sectors, b.lines)
    block_bytes = g.num_kv_heads * g.block_size * g.head_dim * g.elem_bytes
    assert sc.kv_distance("fused", g) == block_bytes  # V follows K inside the block
    assert sc.kv_distance("split", g) > 10 * block_bytes  # V lives in the other pool


# the test's name is its one-line spec (and its pytest id): kept whole rather than renamed
def test_vllm_key_packing_halves_efficiency_for_lanes_over_head_dim_but_is_full_for_its_own_mapping():  # noqa: E501
    g = sc.Geometry(elem_bytes=2, block_size=16, head_dim=128)
    mine = sc.warp_load("vllm", "kernel", "k", g)
    # 32 fp16 lanes = 4 chunks of x=8 elements, each chunk 16 B in its own sector
    assert (mine.sectors, mine.efficiency) == (4, 0.5)
    theirs = sc.warp_load("vllm", "vec16", "k", g)
    assert theirs.efficiency == 1.0 and theirs.lines == 4  # 512 contiguous bytes
    hnd = sc.warp_load("fused", "vec16", "k", g)
    assert hnd.sectors == theirs.sectors and hnd.lines == 16  # same sectors, 4x the lines


def test_vllm_value_layout_scatters_a_lanes_over_head_dim_load_into_one_sector_per_lane():
    g = sc.Geometry(elem_bytes=4, block_size=16)
    w = sc.warp_load("vllm", "kernel", "v", g)
    assert w.sectors == 32 and w.efficiency == pytest.approx(1 / 8)


@given(st.sampled_from([2, 4]), st.integers(0, 255))
def test_misalignment_costs_one_extra_sector_exactly_when_the_offset_is_not_a_multiple_of_32(
    es, offset
):
    offset -= offset % es
    g = sc.Geometry(elem_bytes=es)
    aligned = sc.warp_load("fused", "kernel", "k", g).sectors
    shifted = sc.warp_load("fused", "kernel", "k", g, offset_bytes=offset).sectors
    assert shifted - aligned == (1 if offset % 32 else 0)


def test_alignment_table_predicts_the_per_warp_and_per_tile_extra_traffic():
    rows = {
        r["offset"]: r
        for r in sc.alignment_table(g=sc.Geometry(elem_bytes=4, block_size=16, head_dim=128))
    }
    assert rows[0]["warp_sectors"] == 4 and rows[128]["warp_extra"] == 0
    assert rows[4]["warp_extra"] == pytest.approx(0.25) and rows[16]["warp_sectors"] == 5
    # sector-aligned, line-straddling
    assert rows[64]["warp_sectors"] == 4 and rows[64]["warp_lines"] == 2
    assert rows[4]["tile_extra"] == pytest.approx(1 / 256)  # 8 KiB tile: one sector more


def test_model_rejects_unknown_names():
    with pytest.raises(ValueError, match="layout"):
        sc.element_offset("hnd", "k", sc.Geometry(), 0, 0, 0, 0)
    with pytest.raises(ValueError, match="mapping"):
        sc.warp_load("fused", "rows")
    with pytest.raises(ValueError, match="which"):
        sc.warp_load("fused", "kernel", "q")


def test_the_sector_model_and_its_figure_load_no_numba(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys; import pagedsim.labs.sectors; from pagedsim.draw import figures_labs; "
        f"figures_labs.layout_sectors({str(tmp_path)!r}); print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('numba', 'cuda_kernels')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert (tmp_path / "layout_sectors.png").exists()


def test_the_layout_registry_names_every_layout_once_for_the_model_and_the_kernels():
    from cuda_kernels.labs import PTX_KERNELS, layouts

    assert set(layouts.LOADERS) == set(sc.LAYOUTS) == set(layouts.LAYOUTS)
    assert {row[0].split("[")[0] for row in PTX_KERNELS} == {f"decode_{n}" for n in sc.LAYOUTS}
    with pytest.raises(ValueError, match="layout must be one of"):
        sc.layout("hnd")
    with pytest.raises(ValueError, match="layout must be one of"):
        layouts.convert("hnd", np.zeros((1, 2, 1, 1, 8), np.float32))
