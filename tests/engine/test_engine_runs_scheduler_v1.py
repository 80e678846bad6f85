"""The v1 engine is SchedulerV1 plus a model: on random greedy workloads its batches, step
by step, are the ones SchedulerV1 schedules by itself when it is handed the same tokens
(the lessons' scheduler, stepped through schedule() and update_from_output())."""

from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim.engine import DenseEngine, ModelConfig, PagedEngine, Request, TinyModel
from pagedsim.manager import KVCacheManager
from pagedsim.policies.prefix_cache import PrefixCachingManager
from pagedsim.scheduler import SchedulerV1
from pagedsim.workloads import Request as Workload

MODEL = TinyModel(ModelConfig(layers=1, heads=2, kv_heads=1, head_dim=8, hidden=16, mlp=32))


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
    need = max(-(-(len(r.prompt) + r.max_tokens) // block_size) for r in requests)
    return (
        requests,
        block_size,
        draw(st.integers(need, need + 12)),  # from one request's worth: preemption
        draw(st.integers(1, 12)),  # max_num_batched_tokens: chunked prefill
        draw(st.booleans()),
    )


def scheduler_alone(requests, outputs, block_size, num_blocks, budget, caching):
    """SchedulerV1 on its own, handed the engine's tokens: its batches, step by step."""
    cls = PrefixCachingManager if caching else KVCacheManager
    scheduler = SchedulerV1(
        [Workload(len(r.prompt), r.max_tokens) for r in requests],
        cls(num_blocks, block_size),
        max_num_batched_tokens=budget,
        tokens=[r.prompt for r in requests],
        output_tokens=outputs,
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


@settings(max_examples=40, deadline=None)
@given(workload=workloads())
def test_the_v1_engine_schedules_what_scheduler_v1_schedules(workload):
    requests, block_size, num_blocks, budget, caching = workload
    engine = PagedEngine(
        MODEL,
        num_blocks,
        block_size,
        max_num_batched_tokens=budget,
        enable_prefix_caching=caching,
        backend="numpy",
        check=True,
    )
    states = engine.generate(requests)
    outputs = [s.outputs()[0] for s in states]
    assert outputs == [d.outputs()[0] for d in DenseEngine(MODEL).generate(requests)]
    alone = scheduler_alone(requests, outputs, block_size, num_blocks, budget, caching)
    assert [rec["seqs"] for rec in engine.log] == alone
    assert engine.manager.num_free_blocks == num_blocks
