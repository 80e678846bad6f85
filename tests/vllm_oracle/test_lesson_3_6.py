"""Lesson 3.6's scheduler walk, against vLLM itself: the same requests through vLLM's own
v1 Scheduler give the same steps (tokens scheduled, blocks, who samples and finishes, the
whole free queue), so the schedule() a student reads in the lesson is vLLM's."""

import json

from tests.vllm_oracle.sides import needs_vllm

needs_vllm()

from course.ch03_kv_block.lessons import l3_6  # noqa: E402
from tests.vllm_oracle.sides import (  # noqa: E402
    TINY_LLAMA,
    P,
    SchedulerArgs,
    vllm_free_list,
    vllm_request,
    vllm_scheduler,
)


def vllms_walk(vllm, model_dir) -> list:
    args = SchedulerArgs(l3_6.WALK_BLOCKS + 1, l3_6.BLOCK_SIZE, l3_6.WALK_BUDGET, 4, "fcfs", 64)
    sched = vllm_scheduler(vllm, model_dir, args)
    for name, prompt, max_tokens in l3_6.WALK:
        sched.add_request(vllm_request(vllm, name, prompt, l3_6.BLOCK_SIZE, max_tokens=max_tokens))
    manager, steps = sched.kv_cache_manager, []
    while sched.get_num_unfinished_requests():
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        caught_up = [
            r for r in ids if sched.requests[r].num_computed_tokens >= sched.requests[r].num_tokens
        ]
        token = 100 + len(steps) + 1  # the lesson's made-up model
        tables = {r: tuple(P(b) for b in manager.get_block_ids(r)[0]) for r in ids}
        runner = vllm.ModelRunnerOutput(
            req_ids=ids, sampled_token_ids=[[token] if r in caught_up else [] for r in ids]
        )
        done = [
            o.request_id
            for batch in sched.update_from_output(out, runner).values()
            for o in batch.outputs
            if o.finish_reason is not None
        ]
        new = {
            r.req_id: (r.num_computed_tokens, tuple(P(b) for b in r.block_ids[0]))
            for r in out.scheduled_new_reqs
        }
        free = tuple(vllm_free_list(manager.block_pool))
        steps.append(
            l3_6.WalkStep(
                dict(out.num_scheduled_tokens), new, tables, tuple(caught_up), tuple(done), free
            )
        )
    return steps


def test_the_lessons_scheduler_walk_is_what_vllms_scheduler_does(vllm, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    ours = l3_6.schedule_walk()
    assert len(ours) >= 3 and any(hit for step in ours for hit, _ in step.new.values())
    assert vllms_walk(vllm, str(tmp_path)) == ours
