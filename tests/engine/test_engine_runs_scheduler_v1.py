"""The v1 engine is SchedulerV1 plus a model: on random greedy workloads its batches, step
by step, are the ones SchedulerV1 schedules by itself when it is handed the same tokens
(the lessons' scheduler, stepped through schedule() and update_from_output())."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim.config import CacheConfig, SchedulerConfig
from pagedsim.engine import DenseEngine, ModelConfig, PagedEngine, Request, TinyModel
from pagedsim.manager import KVCacheManager
from pagedsim.policies.hybrid import HybridManager
from pagedsim.policies.prefix_cache import PrefixCachingManager
from pagedsim.policies.sliding_window_cache import SlidingWindowPrefixCachingManager
from pagedsim.scheduler_v1 import RequestColumns, SchedulerV1
from pagedsim.workloads import Request as Workload

SMALL = dict(heads=2, kv_heads=1, head_dim=8, hidden=16, mlp=32)
WINDOW = 5
MODELS = {
    "full": TinyModel(ModelConfig(layers=1, **SMALL)),
    "window": TinyModel(ModelConfig(layers=1, sliding_window=WINDOW, **SMALL)),
    "hybrid": TinyModel(
        ModelConfig(layers=2, sliding_window=WINDOW, layer_types=("sliding", "full"), **SMALL)
    ),
}


def v1_manager(kind, num_gpu_blocks, block_size, caching):
    """The manager the v1 engine builds for a model of this kind (paged._v1_manager)."""
    if kind == "hybrid":
        return HybridManager(num_gpu_blocks, block_size, sliding_window=WINDOW)
    if kind == "window":
        return SlidingWindowPrefixCachingManager(num_gpu_blocks, block_size, sliding_window=WINDOW)
    return (PrefixCachingManager if caching else KVCacheManager)(num_gpu_blocks, block_size)


@st.composite
def workloads(draw):
    stem = draw(st.lists(st.integers(1, 20), min_size=0, max_size=6))  # shared prefixes
    requests = [
        Request(
            tuple(stem[: draw(st.integers(0, len(stem)))])
            + tuple(draw(st.lists(st.integers(1, 90), min_size=1, max_size=8))),
            draw(st.integers(1, 6)),
        )
        for _ in range(draw(st.integers(1, 5)))
    ]
    block_size = draw(st.sampled_from([1, 2, 4]))
    # one request's worth (both groups of a hybrid model): a tight pool preempts
    need = 2 * max(-(-(len(r.prompt) + r.max_tokens) // block_size) for r in requests)
    return (
        requests,
        block_size,
        draw(st.integers(need, need + 12)),
        draw(st.integers(1, 12)),  # max_num_batched_tokens: chunked prefill
        draw(st.booleans()),
    )


def scheduler_alone(kind, requests, outputs, workload):
    """SchedulerV1 on its own, handed the engine's tokens: its batches, step by step."""
    _, block_size, num_gpu_blocks, budget, caching = workload
    scheduler = SchedulerV1(
        [Workload(len(r.prompt), r.max_tokens) for r in requests],
        v1_manager(kind, num_gpu_blocks, block_size, caching),
        SchedulerConfig(max_num_batched_tokens=budget),
        CacheConfig(enable_prefix_caching=caching),
        columns=RequestColumns(tokens=[r.prompt for r in requests], output_tokens=outputs),
        slide_after_update=True,
    )
    batches = []
    while not scheduler.done:
        out = scheduler.schedule()
        batches.append(
            [
                f"r{rid[0]}.0[{start}:{start + n}]"
                for rid, n, start in (
                    (rid, n, scheduler._by_id[rid].num_computed_tokens - n)
                    for rid, n in out.num_scheduled_tokens.items()
                )
            ]
        )
        scheduler.update_from_output(out, scheduler.workload_tokens(out))
    return batches


@pytest.mark.parametrize("kind", list(MODELS))
@settings(max_examples=25, deadline=None)
@given(workload=workloads())
def test_the_v1_engine_schedules_what_scheduler_v1_schedules(kind, workload):
    requests, block_size, num_gpu_blocks, budget, caching = workload
    model = MODELS[kind]
    engine = PagedEngine(
        model,
        CacheConfig(
            block_size=block_size, num_gpu_blocks=num_gpu_blocks, enable_prefix_caching=caching
        ),
        SchedulerConfig(max_num_batched_tokens=budget, preemption_mode="recompute"),
        backend="numpy",
        check=True,
    )
    states = engine.generate(requests)
    outputs = [s.outputs()[0] for s in states]
    assert outputs == [d.outputs()[0] for d in DenseEngine(model).generate(requests)]
    alone = scheduler_alone(kind, requests, outputs, workload)
    assert [rec["seqs"] for rec in engine.log] == alone
    assert engine.manager.num_free_blocks == num_gpu_blocks
