"""benchmarks/gpu_labs.py: refuses to time on the simulator, and its dry run checks every lab."""

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kernels, pytest.mark.ch3_7, pytest.mark.slow]
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_labs.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_labs", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_script_refuses_to_time_on_the_simulator(capsys):
    assert _load().main([]) == 2
    assert "refusing" in capsys.readouterr().err


def test_dry_run_checks_every_variant_and_reports_no_timing(tmp_path):
    out = tmp_path / "labs.json"
    assert _load().main(["--dry-run", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["backend"] == "simulator" and r["dry_run"] and r["wall_s"] is None
    assert [row["layout"] for row in r["layouts"]] == ["fused", "split", "nhd", "vllm"]
    assert all(row["max_abs_diff_vs_fused"] < 1e-2 for row in r["layouts"])
    assert [row["address_mod_128"] for row in r["alignment"]] == [0, 4, 16, 64, 0]
    assert all(row["max_abs_diff_vs_offset_0"] < 1e-2 for row in r["alignment"])
    for row in r["allocators"]:
        assert row["handed_out"] == row["blocks"]
        if row["method"] != "racy":
            assert row["handed_out_twice"] == 0
    assert {row["strategy"]: row["device_allocations"] for row in r["prealloc"]} == {
        "on_demand": 4,
        "pooled": 1,
    }
    timings = [
        row[k]
        for sec in ("layouts", "alignment", "allocators", "prealloc")
        for row in r[sec]
        for k in ("median_ms", "seconds")
        if k in row
    ]
    assert timings and all(t is None for t in timings)  # the simulator measures nothing
