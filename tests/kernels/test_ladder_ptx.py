"""`python -m cuda_kernels.report --ladder`: every rung compiles for sm_80 and sm_90
without spilling, the last rung's loop issues at least 5x fewer SASS instructions per
K/V byte than the first's, each rung's loop shows the instruction its idea adds (LDG.128,
LDGSTS, HMMA), and cuda_kernels/README.md's ladder table is what the report prints now
(static counts from ptxas and nvdisasm; no GPU)."""

from pathlib import Path

import ptx_rows
import pytest
from ptx_rows import uses

from cuda_kernels.ladder import RUNGS
from cuda_kernels.report import find_tool
from cuda_kernels.tools import report_format

README = Path(__file__).resolve().parents[2] / "cuda_kernels" / "README.md"

pytestmark = [pytest.mark.ptx, pytest.mark.slow]


@pytest.mark.skipif(find_tool("ptxas") is None, reason="needs the ptx extra (nvidia-cuda-nvcc)")
@uses("ladder")
def test_every_rung_compiles_without_spills_and_the_last_is_five_times_leaner_per_byte(
    request, tmp_path_factory
):
    run = ptx_rows.report(request, tmp_path_factory)  # the rows of `report --ladder`
    assert run.returncode == 0, run.stderr
    names = [f"rung{i}.{r.name}" for i, r in enumerate(RUNGS, 1)]
    rows = run.of(names)
    assert [(r["kernel"], r["arch"]) for r in rows] == [
        (n, a) for n in names for a in ("sm_80", "sm_90")
    ]
    spilled = [(r["kernel"], r["arch"], r["spill_bytes"]) for r in rows if r["spill_bytes"]]
    assert not spilled, f"register spills: {spilled}"
    assert all(0 < r["registers"] <= 255 and r["sass_per_kv_byte"] > 0 for r in rows), rows
    for arch in ("sm_80", "sm_90"):
        at = [r for r in rows if r["arch"] == arch]
        assert at[0]["sass_per_kv_byte"] >= 5 * at[-1]["sass_per_kv_byte"], at
        # GQA: per byte of cache a decode step needs, reading once per group beats once per head
        per_cache = {r["kernel"].split(".")[1]: r["sass_per_cache_byte"] for r in at}
        assert per_cache["gqa"] < per_cache["vector_loads"] < per_cache["naive"], per_cache
    assert rows[-1]["hmma"] > 0 and rows[0]["hmma"] == 0
    assert {r["loop_kv_bits"] for r in rows if r["kernel"].startswith("rung5.")} == {128}
    assert {r["loop_kv_bits"] for r in rows if r["kernel"].startswith("rung1.")} == {16}
    by = {r["kernel"].split(".")[0]: r for r in rows if r["arch"] == "sm_90"}
    assert by["rung5"]["ldg128"] > 0 and by["rung5"]["ldgsts"] == 0 == by["rung8"]["ldgsts"]
    assert by["rung9"]["ldgsts"] > 0 and by["rung9"]["hmma"] == 0
    assert by["rung10"]["hmma"] > 0 and by["rung10"]["ldgsts"] > 0
    block = report_format.readme_block("ladder", rows)
    assert block in README.read_text(), (
        "cuda_kernels/README.md's ladder table is stale: "
        "python -m cuda_kernels.report --ladder --readme"
    )
