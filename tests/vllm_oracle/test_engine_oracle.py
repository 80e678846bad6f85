"""The engine's own scheduler against vLLM v1's Scheduler: `PagedEngine.step` runs
schedule() -> the model -> update_from_output() on its SchedulerV1, and every one of those
calls is handed, as it happens, to `lockstep.Lockstep`, which makes vLLM's Scheduler do the
same with the tokens the engine's model sampled and compares (the one loop the scheduler
machine uses too). No copy of the engine's loop: the test only listens to its scheduler.

Models: full attention, a sliding window (one window group), and a hybrid one (a full and
a window group over one pool), with prefix caching on or off, chunked prefill and pools
tight enough to preempt. After every engine step both agree on the running and waiting
order, every block table (each group's), the whole free queue and every ref count.
"""

from __future__ import annotations

import json
from dataclasses import replace

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from pagedsim.config import CacheConfig, SchedulerConfig
from pagedsim.engine import PagedEngine
from pagedsim.policies.hybrid import HybridManager
from tests.engine.test_engine_runs_scheduler_v1 import MODELS, WINDOW
from tests.engine.test_engine_runs_scheduler_v1 import workloads as engine_workloads

from .lockstep import Lockstep, vllm_id
from .sides import TINY_LLAMA, SchedulerArgs, needs_vllm, vllm_request, vllm_scheduler

needs_vllm()  # skips this module where vLLM is missing (conftest.py)

GROUPS = {"full": ("full",), "window": ("window",), "hybrid": ("full", "window")}  # vLLM's


@st.composite
def workloads(draw):
    """The engine tests' workloads (shared prefixes, tight pools, chunked prefill), with
    stop tokens; vLLM refuses max_num_seqs above the budget and the engine runs up to 256,
    so a budget of at least one token per request keeps vLLM's (= budget) from binding."""
    requests, block_size, num_gpu_blocks, budget, _ = draw(engine_workloads())
    stops = st.lists(st.integers(0, 95), max_size=2).map(tuple)
    requests = [replace(r, stop_token_ids=draw(stops)) for r in requests]
    return requests, block_size, num_gpu_blocks, max(budget, len(requests))


def listen(engine, pair):
    """Hand each schedule() and update_from_output() of the engine's scheduler to `pair`."""
    sched = engine.scheduler
    schedule, update = sched.schedule, sched.update_from_output

    def schedule_and_compare():
        out = schedule()
        pair.schedule(out)
        return out

    def update_and_compare(out, sampled):
        finished = update(out, sampled)
        pair.update(sampled, finished)
        return finished

    sched.schedule, sched.update_from_output = schedule_and_compare, update_and_compare


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_llama")
    (path / "config.json").write_text(json.dumps(TINY_LLAMA))
    return str(path)


@pytest.mark.parametrize("caching", [True, False])
@pytest.mark.parametrize("kind", list(GROUPS))
@settings(max_examples=10, deadline=None)
@given(workload=workloads())
def test_the_engines_scheduler_schedules_what_vllm_schedules(
    vllm, model_dir, kind, caching, workload
):
    requests, block_size, num_gpu_blocks, budget = workload
    cache = CacheConfig(block_size, num_gpu_blocks=num_gpu_blocks, enable_prefix_caching=caching)
    config = SchedulerConfig(max_num_batched_tokens=budget, preemption_mode="recompute")
    engine = PagedEngine(MODELS[kind], cache, config, backend="numpy")
    args = SchedulerArgs(
        num_gpu_blocks + 1,
        block_size,
        budget,
        max_num_seqs=budget,
        policy="fcfs",
        max_model_len=TINY_LLAMA["max_position_embeddings"],
        enable_prefix_caching=caching,
        kv_cache_groups=GROUPS[kind],
        sliding_window=WINDOW,
    )
    m = engine.manager

    def tables(rid):
        if isinstance(m, HybridManager):
            return tuple(list(t.blocks) for t in m.block_tables(rid))
        return (list(m.block_table(rid).blocks),)

    pair = Lockstep(vllm, vllm_scheduler(vllm, model_dir, args), engine.scheduler, tables)
    listen(engine, pair)
    for r in requests:
        run = engine.submit(r)
        req = vllm_request(
            vllm, vllm_id((run.state.rid, 0)), r.prompt, block_size, max_tokens=r.max_tokens
        )
        req.sampling_params.stop_token_ids = list(r.stop_token_ids)
        req.sampling_params._all_stop_token_ids = set(r.stop_token_ids)
        pair.theirs.add_request(req)
    while engine.runs:
        engine.step()
        pair.state()
    assert not pair.theirs.requests and m.num_free_blocks == num_gpu_blocks
