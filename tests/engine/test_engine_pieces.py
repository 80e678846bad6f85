"""The engine's pieces: sampling that ignores batch composition, v1's capped cache hit,
v0's prefix-cache hits and swaps, and `pagedsim generate` on the shipped model."""

import json

import numpy as np
import pytest

from pagedsim.config import CacheConfig, SchedulerConfig
from pagedsim.engine import ModelConfig, PagedEngine, Request, TinyModel
from pagedsim.engine.generate_cli import main as generate_main
from pagedsim.engine.requests import RequestState
from pagedsim.engine.sampling import SamplingParams, draw, process


def sample(logits, temperature, seed, index, step, top_p=1.0):
    """The token a request's sampler draws (RequestState's path: process, then draw)."""
    params = SamplingParams(temperature=temperature, seed=seed, top_p=top_p)
    return draw(process(logits, (), (), params), params, index, step)


def test_a_sampled_token_depends_only_on_seed_sample_index_and_step():
    logits = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    draws = {sample(logits, 1.0, 5, index, step) for index in range(3) for step in range(3)}
    assert len(draws) > 1, "different streams give different tokens"
    assert sample(logits, 1.0, 5, 1, 2) == sample(logits.copy(), 1.0, 5, 1, 2)
    assert sample(logits, 0.0, 5, 1, 2) == int(np.argmax(logits))


def test_beam_search_keeps_the_best_beams_forks_a_double_winner_and_frees_a_loser():
    state = RequestState(0, Request((1, 2), 3, beam_width=2))
    state.advance({"r0.0": np.array([0, 5, 4, 0], np.float32)})
    assert sorted(map(tuple, state.tokens.values())) == [(1, 2, 1), (1, 2, 2)]
    a, b = state.seq_keys()
    strong = np.array([9, 8, 0, 0], np.float32)  # beam a wins both places
    actions = state.advance({a: strong, b: np.array([0, 0, 0, 0], np.float32)})
    assert ("free", b) in actions and any(x[0] == "fork" and x[1] == a for x in actions)


def test_a_beam_that_emits_a_stop_token_is_kept_as_a_hypothesis_and_stops_growing():
    state = RequestState(0, Request((1, 2), 5, beam_width=2, stop_token_ids=(3,)))
    actions = state.advance({"r0.0": np.array([0, 4, 3, 6], np.float32)})  # 3 is the best
    assert [h[2] for h in state.hypotheses] == [[1, 2, 3]]  # finished, scored, kept
    assert sorted(map(tuple, state.tokens.values())) == [(1, 2, 1), (1, 2, 2)]  # no stop token
    assert actions == [("fork", "r0.0", "r0.1")] and not state.done


def test_beam_search_ends_early_once_no_live_beam_can_beat_the_finished_ones():
    state = RequestState(0, Request((1, 2), 9, beam_width=2, stop_token_ids=(3,)))
    state.advance({"r0.0": np.array([0, 4, 3, 6], np.float32)})
    a, b = state.seq_keys()
    stop = np.array([0, 0, 0, 9], np.float32)  # both beams now put almost all mass on 3
    actions = state.advance({a: stop, b: stop})
    assert state.done and state.generated == 2 < state.request.max_tokens
    assert sorted(actions) == [("free", a), ("free", b)] and not state.seq_keys()
    scores = [h[0] for h in state.hypotheses]
    assert len(scores) == 2 and scores == sorted(scores, reverse=True)
    assert all(out[-1] == 3 for out in state.outputs())  # best first, each ending in EOS
    assert state.outputs()[0] == [3]  # -log p / 1 beats the two-token hypotheses


def test_a_fully_cached_block_aligned_prompt_recomputes_its_last_block_as_v1_does():
    model = TinyModel(ModelConfig(layers=1, heads=2, kv_heads=1, head_dim=8, hidden=16, mlp=32))
    engine = PagedEngine(
        model,
        CacheConfig(block_size=2, num_gpu_blocks=8, enable_prefix_caching=True),
        SchedulerConfig(max_num_batched_tokens=8, preemption_mode="recompute"),
        backend="numpy",
    )
    prompt = (3, 4, 5, 6)
    engine.generate([Request(prompt, 1)])
    engine.generate([Request(prompt, 1)])
    last = engine.log[-1]
    # v1 caps a hit at num_tokens - 1 tokens, in whole blocks: block 0 is hit, block 1 recomputed
    assert last["seqs"] == ["r1.0[2:4]"] and engine.stats["cached_tokens"] == 2


def _v0_tokens(caching: bool, num_gpu_blocks: int, mode: str = "swap"):
    model = TinyModel(ModelConfig(layers=1, heads=2, kv_heads=1, head_dim=8, hidden=16, mlp=32))
    engine = PagedEngine(
        model,
        CacheConfig(block_size=2, num_gpu_blocks=num_gpu_blocks, enable_prefix_caching=caching),
        SchedulerConfig(max_num_batched_tokens=16, preemption_mode=mode),
        mode="v0",
        backend="numpy",
        check=True,
    )
    requests = [Request((1, 2, 3, 4, 5), 4, n=2, seed=3, temperature=0.9)]
    requests += [Request((1, 2, 3, 4, 9), 4), Request((7, 8, 9), 6, beam_width=2)]
    return [s.outputs() for s in engine.generate(requests)], engine


def test_v0_prefix_hits_and_swaps_leave_every_token_as_a_roomy_uncached_run_gives():
    roomy, _ = _v0_tokens(False, 64)
    cached, engine = _v0_tokens(True, 64)
    assert cached == roomy and engine.stats["cached_tokens"] == 4  # b hits a's two blocks
    for mode in ("swap", "recompute"):
        tight, engine = _v0_tokens(True, 12, mode)
        assert tight == roomy, mode
        assert engine.stats["preempted_swap"] > 0 and engine.stats["swap_bytes"] > 0, mode
        assert engine.manager.num_free_blocks == 12


def test_generate_reports_cache_hits_copies_swaps_and_a_match_with_the_dense_engine(capsys):
    assert generate_main(["--backend", "numpy", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["summary"]
    assert s["tokens_match"] and s["logit_positions_match"] and s["max_logit_diff"] < 1e-4
    assert s["skipped_by_prefix_cache"] > 0 and s["cow_bytes"] > 0 and s["swap_bytes"] > 0
    assert (
        sum(step["prefill_tokens"] + step["decode_tokens"] for step in out["steps"])
        == s["computed_tokens"]
    )
    assert s["backend"] == "numpy" and s["attention"] == "NumPy paged attention on the CPU"


def test_generate_refuses_a_pool_too_small_for_one_request_with_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        generate_main(["--backend", "numpy", "--num-gpu-blocks-override", "5"])
    assert exit_.value.code == 2
    assert "needs up to 9 blocks alone; the pool has 5" in capsys.readouterr().err


def test_a_bad_request_is_refused_before_the_engine_changes_anything():
    model = TinyModel(ModelConfig(layers=1, heads=2, kv_heads=1, head_dim=8, hidden=16, mlp=32))
    engine = PagedEngine(
        model,
        CacheConfig(block_size=2, num_gpu_blocks=8, enable_prefix_caching=False),
        backend="numpy",
    )
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 96\)"):
        engine.submit(Request((1, 96), 2))
    with pytest.raises(TypeError, match="prompt entry must be an int, got float 1.5"):
        engine.submit(Request((1.5,), 2))
    with pytest.raises(ValueError, match="up to 17 blocks alone; the pool has 8"):
        engine.submit(Request((1,), 1, n=17))  # the pool check comes first
    assert (
        engine.runs == {} and not engine.scheduler.waiting and engine.manager.num_free_blocks == 8
    )


def test_top_p_samples_only_from_the_smallest_set_reaching_that_probability():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal(40).astype(np.float32) * 3
    p = np.exp(logits - logits.max())
    p /= p.sum()
    order = np.argsort(-p)
    nucleus = set(order[: int(np.searchsorted(np.cumsum(p[order]), 0.5)) + 1].tolist())
    draws = {sample(logits, 1.0, seed, 0, 0, top_p=0.5) for seed in range(200)}
    assert draws <= nucleus and len(draws) > 1
    assert {sample(logits, 1.0, seed, 0, 0, top_p=1e-9) for seed in range(50)} == {
        int(np.argmax(logits))
    }
    assert [sample(logits, 1.0, s, 0, 0, top_p=1.0) for s in range(20)] == [
        sample(logits, 1.0, s, 0, 0) for s in range(20)
    ]
