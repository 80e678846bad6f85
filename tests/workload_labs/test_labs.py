"""The labs: block-size sweep, policy comparison, swap-vs-recompute cost model, sharing savings."""

import json
import math

import pytest

from pagedsim import workloads
from pagedsim.labs import policies, sharing, swapcost, sweep
from pagedsim.policies import PrefixCachingManager
from pagedsim.scheduler import make_scheduler
from pagedsim.sizing import preset
from pagedsim.workloads import Request


def test_one_sweep_row_by_hand():
    # P = 3, O = 2, B = 4: the steps hold l = 4 and 5 tokens in 4 and 8 slots.
    cols = workloads.as_arrays([Request(3, 2)])
    row = sweep.analytic_row(cols, 4, memory_tokens=8)
    assert row["waste"] == 3 / 12  # (4 - 4) + (8 - 5) empty of 12 slots
    assert row["mean_entries"] == 1.5  # ceil(4/4) + ceil(5/4) = 3 entries over 2 steps
    assert row["max_entries"] == 2
    assert row["max_batch"] == 1  # 8 slots = 2 blocks; the request needs ceil(5/4) = 2


def test_doubling_the_block_size_never_lowers_waste_nor_raises_tables_or_batch():
    reqs = workloads.synthetic("alpaca", 60, seed=3)
    rows = sweep.sweep(reqs, memory_tokens=4096, sim_requests=20)
    assert [r["block_size"] for r in rows] == list(sweep.BLOCK_SIZES)
    for a, b in zip(rows, rows[1:], strict=False):
        assert b["waste"] >= a["waste"]
        assert b["mean_entries"] <= a["mean_entries"]
        assert b["max_batch"] <= a["max_batch"]
    assert all(0.0 <= r["hit_rate"] <= 1.0 for r in rows)


def test_sweep_cli_json_and_figure(tmp_path, capsys):
    args = [
        "--workload",
        "alpaca",
        "--num-requests",
        "40",
        "--sim-requests",
        "10",
        "--memory-tokens",
        "2048",
        "--json",
        "--figure",
        str(tmp_path),
    ]
    assert sweep.main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(sweep.BLOCK_SIZES) and set(rows[0]) == set(sweep.COLUMNS)
    assert (tmp_path / "block_size_sweep.png").stat().st_size > 10_000


def test_policy_comparison_covers_every_combination_and_only_swap_moves_bytes():
    reqs = workloads.synthetic("sharegpt", 25, seed=1)
    rows = policies.compare(reqs, workloads.prompt_tokens(reqs), memory_tokens=2048)
    assert {(r["eviction"], r["preemption"]) for r in rows} == {
        (e, p) for e in ("lru", "lfu", "fifo") for p in ("recompute", "swap")
    }
    assert all(r["swapped_mib"] > 0 for r in rows if r["preemption"] == "swap")
    for r in rows:
        if r["preemption"] == "recompute":
            assert r["swapped_mib"] == 0
        assert r["preemptions"] > 0  # 2048 slots cannot hold 25 ShareGPT requests at once


def test_v1_hit_rates_leave_preempted_requests_lookups_out():
    reqs = workloads.synthetic("sharegpt", 25, seed=1)
    tokens = workloads.prompt_tokens(reqs)
    rows = [r for r in policies.compare(reqs, tokens, memory_tokens=2048) if r["mode"] == "v1"]
    for r in rows:
        m = PrefixCachingManager(2048 // 16, 16, eviction=r["eviction"], trace=False)
        make_scheduler(reqs, m, mode="v1", tokens=tokens, record=False).run()
        # the denominator is every sample's prompt, looked up once on its first admission
        assert m.stats.prompt_tokens == sum(q.prompt_len * q.n for q in reqs)
        assert r["hit_rate"] == m.stats.hit_tokens / m.stats.prompt_tokens
        assert r["preemptions"] == m.stats.preempted_requests > 0
        assert 0.0 < r["preempted_hit_rate"] <= 1.0


def test_policies_cli_prints_a_row_per_combination(capsys):
    assert (
        policies.main(["--workload", "alpaca", "--num-requests", "30", "--memory-tokens", "512"])
        == 0
    )
    assert len(capsys.readouterr().out.strip().splitlines()) == 2 + 3 + 6  # v1 rows, then v0


def test_swap_cost_by_hand_and_the_crossover_is_where_the_costs_meet():
    spec = preset("opt-13b")  # 819,200 bytes per token
    params = swapcost.params_of(spec)
    assert params == 12 * 40 * 5120**2
    a100 = swapcost.Setup(
        spec, params, 16, tflops=312.0, mfu=0.5, pcie_gbps=25.0, copy_latency_us=10.0
    )
    # 16 tokens, B = 16: one block each way; 2 * (10 us + 16 * 819200 / 25e9 s)
    assert swapcost.swap_seconds(16, a100) == pytest.approx(2 * (10e-6 + 16 * 819_200 / 25e9))
    x = swapcost.crossover_gbps(512, a100)
    assert swapcost.swap_seconds(512, a100._replace(pcie_gbps=x)) == pytest.approx(
        swapcost.recompute_seconds(512, a100)
    )
    # A copy latency that alone costs more than recomputing means swap never wins.
    slow_copies = a100._replace(block_size=1, copy_latency_us=1e6)
    assert swapcost.crossover_gbps(16, slow_copies) is None


def test_swapcost_cli_states_its_assumptions(capsys):
    assert swapcost.main(["--pcie-gbps", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ASSUMED:") and "8 GB/s" in out and "recompute" in out
    with pytest.raises(SystemExit):
        swapcost.main(["--mfu", "0"])


def test_sharing_saves_blocks_for_samples_and_more_for_beams():
    reqs = workloads.synthetic("alpaca", 40, seed=2)
    got = sharing.sharing_savings(reqs, 16, widths=(2, 6))
    ps, bs = got["parallel sampling"], got["beam search"]
    assert 0 < ps[2] < ps[6] < 1 and 0 < bs[2] < bs[6] < 1
    assert bs[2] > ps[2]  # beams share history as well as the prompt
    assert math.isclose(sharing.saving(reqs, 16), 0.0)  # one sequence per request: nothing shared
