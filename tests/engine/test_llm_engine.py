"""`pagedsim generate` is built on pagedsim.LLM, and what LLM gives it: the engine kept
across calls (`llm_engine`, vLLM's name), vLLM's engine arguments, the per-step trace
(`trace=True`, `steps`), BeamSearchParams and the dense check (`check_dense`).
"""

import gc
import json
import tracemalloc

import pytest

import pagedsim
from pagedsim.engine import generate_cli
from pagedsim.engine.generate import DEFAULT_MODEL, load, step_frames
from pagedsim.engine.llm import LLM
from pagedsim.engine.sampling import BeamSearchParams, SamplingParams

from .checkpoints import write_checkpoint

PROMPT = "ROMEO.\nBut soft"


@pytest.fixture(scope="module")
def shipped():
    return load()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("llm_engine"), vocab=40, layers=2, seed=5)


def _cli_json(argv, capsys) -> dict:
    assert generate_cli.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["summary"]


def test_the_command_serves_through_llm_generate(monkeypatch, capsys):
    returned = []
    real = LLM.generate

    def spy(self, prompts, sampling_params=None):
        out = real(self, prompts, sampling_params)
        returned.append((sampling_params, out))
        return out

    monkeypatch.setattr(LLM, "generate", spy)
    for argv, want in (
        (["-n", "2", "--seed", "3"], SamplingParams(n=2, temperature=1.0, seed=3, max_tokens=8)),
        ([], SamplingParams(temperature=0.0, max_tokens=8)),  # greedy unless asked to sample
    ):
        summary = _cli_json(["--prompt", PROMPT, "--max-tokens", "8", *argv], capsys)
        ((params, outputs),) = returned  # one call, with vLLM's parameters
        assert params == [want]
        printed = [[o["token_ids"] for o in r["outputs"]] for r in summary["requests"]]
        assert printed == [[c.token_ids for c in o.outputs] for o in outputs]
        assert summary["tokens_match"] is True  # the shipped model: checked by default
        returned.clear()


def test_the_command_prints_what_a_users_llm_generates(shipped, capsys):
    """Token for token: the command's run and a plain LLM with vLLM's default engine
    arguments (another budget, scheduler and pool) give the same samples and beams."""
    summary = _cli_json(["--prompt", PROMPT, "-n", "3", "--temperature", "0.9", "--seed", "11",
                         "--max-tokens", "10", "--no-check-dense"], capsys)  # fmt: skip
    beams = _cli_json(["--prompt", PROMPT, "--beam-width", "2", "--max-tokens", "6"], capsys)
    llm = LLM(DEFAULT_MODEL)
    (sampled,) = llm.generate(PROMPT, SamplingParams(n=3, temperature=0.9, seed=11, max_tokens=10))
    (beamed,) = llm.generate([PROMPT], [BeamSearchParams(beam_width=2, max_tokens=6)])
    assert [c.token_ids for c in sampled.outputs] == [
        o["token_ids"] for o in summary["requests"][0]["outputs"]
    ]
    assert [c.token_ids for c in beamed.outputs] == [
        o["token_ids"] for o in beams["requests"][0]["outputs"]
    ]
    assert [c.text for c in sampled.outputs] == [
        o["text"] for o in summary["requests"][0]["outputs"]
    ]


def test_the_engine_lives_across_calls_and_a_repeat_hits_its_cache(checkpoint):
    llm = pagedsim.LLM(checkpoint, block_size=4, num_gpu_blocks_override=64)
    greedy = SamplingParams(temperature=0, max_tokens=6)
    (first,) = llm.generate("the cat sat on the mat", greedy)
    engine = llm.llm_engine
    (again,) = llm.generate("the cat sat on the mat", greedy)
    assert llm.llm_engine is engine and engine.mode == "v1"
    assert first.num_cached_tokens == 0
    # v1 caps a hit at num_tokens - 1: the 22-token prompt's 5 full blocks of 4
    assert again.num_cached_tokens == 20
    assert again.outputs[0].token_ids == first.outputs[0].token_ids
    # n > 1 forks (vLLM v0): a v0 engine serves it, built afresh
    llm.generate("the cat", SamplingParams(n=2, seed=1, max_tokens=3))
    assert llm.llm_engine is not engine and llm.llm_engine.mode == "v0"


def test_a_request_too_big_for_the_pool_is_one_line_and_leaves_no_half_served_batch(checkpoint):
    llm = LLM(checkpoint, block_size=4, num_gpu_blocks_override=3)
    greedy = SamplingParams(temperature=0, max_tokens=4)
    with pytest.raises(ValueError) as e:
        llm.generate(["the cat", "the cat sat on the mat, and the dog sat too"], greedy)
    assert "blocks" in str(e.value) and len(str(e.value).splitlines()) == 1
    (out,) = llm.generate("the cat", greedy)
    # "the cat" of the refused batch is not served later
    assert len(llm.llm_engine.scheduler.requests) == 1
    alone = LLM(checkpoint).generate("the cat", greedy)[0]
    assert out.outputs[0].token_ids == alone.outputs[0].token_ids


def test_engine_arguments_are_vllms_and_an_unknown_one_is_one_line(checkpoint):
    llm = LLM(checkpoint, block_size=8, max_num_batched_tokens=32, preemption_mode="swap")
    assert (llm.cache_config.block_size, llm.scheduler_config.max_num_batched_tokens) == (8, 32)
    assert llm.scheduler_config.preemption_mode == "swap"
    with pytest.raises(TypeError) as e:
        LLM(checkpoint, blocksize=8)
    assert "'blocksize'" in str(e.value) and len(str(e.value).splitlines()) == 1
    with pytest.raises(ValueError, match="block_size"):
        LLM(checkpoint, block_size=0)
    with pytest.raises(TypeError, match="^cache_config must be a CacheConfig, got dict$"):
        LLM(checkpoint, cache_config={"block_size": 8})
    with pytest.raises(TypeError, match="^scheduler_config must be a SchedulerConfig, got str$"):
        LLM(checkpoint, scheduler_config="v1")


def test_a_traced_llm_keeps_each_steps_snapshot_and_block_text(shipped):
    model, tok = shipped
    llm = LLM(model, tokenizer=tok, block_size=16, trace=True)
    (out,) = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=20))
    engine = llm.llm_engine
    assert len(llm.steps) == len(engine.log) > 1
    marks = [s.snapshot for s in llm.steps]
    assert marks == sorted(marks) and marks[-1] < len(engine.manager.trace.snapshots)
    first = step_frames(engine, llm.steps)[0]
    (seq,) = first.sequences
    assert "".join(first.block_labels[b] for b in seq.blocks) == PROMPT
    plain = LLM(model, tokenizer=tok)  # untraced: no steps kept
    (again,) = plain.generate(PROMPT, SamplingParams(temperature=0, max_tokens=20))
    assert plain.steps == [] and again.outputs[0].token_ids == out.outputs[0].token_ids


def test_check_dense_compares_with_the_dense_engine_and_can_fail(checkpoint):
    llm = LLM(checkpoint, block_size=4, keep_logits=True)
    outputs = llm.generate(["the cat", "a dog sat"], SamplingParams(temperature=0, max_tokens=5))
    check = llm.check_dense(outputs)
    assert check.tokens_match and check.logit_positions_match
    assert check.max_logit_diff < 1e-4
    state = llm._run_of(outputs[1].request_id).state  # the paged engine's own logits
    key = next(iter(state.logits))
    state.logits[key] = state.logits[key] + 1.0
    assert llm.check_dense(outputs).max_logit_diff >= 1.0 - 1e-4
    state.finished = {k: [*v[:-1], (v[-1] + 1) % 40] for k, v in state.finished.items()}
    state.tokens = {k: [*v[:-1], (v[-1] + 1) % 40] for k, v in state.tokens.items()}
    assert not llm.check_dense(outputs).tokens_match
    with pytest.raises(ValueError) as e:
        LLM(checkpoint, keep_logits=True).check_dense(outputs)
    assert "not served" in str(e.value) and len(str(e.value).splitlines()) == 1


def test_check_dense_of_outputs_served_without_keep_logits_is_one_line_naming_it(checkpoint):
    llm = LLM(checkpoint, block_size=4)
    outputs = llm.generate(["the cat"], SamplingParams(temperature=0, max_tokens=3))
    with pytest.raises(ValueError) as e:
        llm.check_dense(outputs)
    assert "keep_logits=True" in str(e.value) and len(str(e.value).splitlines()) == 1
    with pytest.raises(TypeError, match="keep_logits must be a bool"):
        LLM(checkpoint, keep_logits="yes")


def test_a_long_lived_llm_keeps_no_finished_request_and_no_logits(checkpoint):
    """vLLM frees a request from its engine once its output is returned: after many calls
    the engine holds no run, the LLM no served request, and no state kept logits."""
    llm = LLM(checkpoint, block_size=4)
    greedy = SamplingParams(temperature=0, max_tokens=4)
    states = []
    real = llm._run_engine

    def spy(requests):
        runs = real(requests)
        states.extend(run.state for run in runs)
        return runs

    llm._run_engine = spy  # type: ignore[method-assign]
    llm.generate(["the cat", "a dog sat"], greedy)
    first = len(llm.llm_engine.log)
    for _ in range(4):
        llm.generate(["the cat", "a dog sat"], greedy)
    engine = llm.llm_engine
    assert engine is not None and engine.runs == {} and llm._served == {}
    assert len(states) == 10 and all(s.logits == {} for s in states)
    # untraced, the step log holds the last call's steps only
    assert [rec["step"] for rec in engine.log] == list(range(1, len(engine.log) + 1))
    assert 0 < len(engine.log) <= first
    kept = LLM(checkpoint, block_size=4, keep_logits=True)
    (out,) = kept.generate(["the cat"], greedy)
    assert len(kept._run_of(out.request_id).state.logits) == 4  # asked for: kept
    (lp,) = llm.generate(["the cat"], SamplingParams(temperature=0, max_tokens=2, logprobs=1))
    assert len(lp.outputs[0].logprobs) == 2  # a logprobs request keeps what it needs


def test_the_retained_memory_of_a_long_generate_loop_stays_flat(checkpoint):
    """Bytes still allocated after 40 more calls, once the engine is warm: without the
    requests' logits, runs and step log they stay far below what 40 calls kept before."""
    llm = LLM(checkpoint, block_size=4)
    greedy = SamplingParams(temperature=0, max_tokens=8)
    for _ in range(10):
        llm.generate(["the cat", "a dog sat"], greedy)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(40):
            llm.generate(["the cat", "a dog sat"], greedy)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # measured: about 38 KB now (NumPy's small-buffer cache, and the scheduler's request
    # numbering, about 130 bytes a request); 660 KB when logits, runs, finished scheduler
    # requests and the step log stayed
    assert grown < 40 * 2048, f"{grown} bytes kept by 40 calls"


@pytest.mark.parametrize(
    "field, value",
    [("beam_width", 0), ("max_tokens", 0), ("temperature", 0.7), ("repetition_penalty", 0.0)],
)
def test_a_bad_beam_search_parameter_is_one_line_naming_it(field, value):
    args = dict(beam_width=2, max_tokens=4) | {field: value}
    with pytest.raises((ValueError, TypeError)) as e:
        BeamSearchParams(**args)
    assert field in str(e.value) and len(str(e.value).splitlines()) == 1
