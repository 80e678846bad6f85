"""pagedsim's SchedulerV1 against vLLM v1's own Scheduler, step by step.

Both take the same workload (prompts sharing prefixes, arrivals over the first steps,
priorities including negative ones, under "fcfs" or "priority"), the same token budget
and max_num_seqs, over pools small enough that running requests get preempted. Each step
is one loop over schedule(), a faked model (every request that caught up samples the next
id of its drawn outputs) and update_from_output(); between steps reset_prefix_cache may be
asked, with or without reset_running_requests. A request ends by length (max_tokens), by
EOS or by a stop token id in vLLM; pagedsim has no EOS or stop ids, so its output_len is
where vLLM's request ends (that much of each is faked in the same way on both sides).

After every step both agree on: the scheduled requests and their token counts, the new
and the running ones (and their num_computed_tokens), the new requests' block ids, the
preempted and the finished requests, which requests sample, every running block table,
the running order, the whole free queue and every ref count.
"""

from __future__ import annotations

import json

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from pagedsim.config import SchedulerConfig
from pagedsim.policies import PrefixCachingManager
from pagedsim.scheduler_v1 import RequestColumns, SchedulerV1
from pagedsim.workloads import Request

from .sides import (
    TINY_LLAMA,
    P,
    SchedulerArgs,
    agreed,
    needs_vllm,
    vllm_free_list,
    vllm_request,
    vllm_scheduler,
)

needs_vllm()  # skips this module where vLLM is missing (conftest.py)

N, B, MAX_LEN = 8, 2, 64  # pagedsim blocks (vLLM: one more), tokens per block, max_model_len
EOS, STOP = 99, 98  # the faked model's end-of-sequence id and a stop_token_ids entry
PREFIXES = ((), (1, 2), (1, 2, 3, 4), (5, 5, 5))
STEPS = settings(max_examples=15, stateful_step_count=30, deadline=None)


@st.composite
def workloads(draw):
    """(prompt, outputs, arrival step, priority, how it ends) per request."""
    out = []
    for _ in range(draw(st.integers(1, 6))):
        prompt = list(draw(st.sampled_from(PREFIXES)))
        prompt += draw(st.lists(st.integers(1, 3), min_size=1, max_size=10 - len(prompt)))
        outputs = draw(st.lists(st.integers(1, 3), min_size=1, max_size=5))
        end = draw(st.sampled_from(["length", "eos", "stop"]))
        if end != "length":
            outputs[-1] = EOS if end == "eos" else STOP
        arrival, priority = draw(st.integers(0, 3)), draw(st.integers(-2, 2))
        out.append((prompt, outputs, arrival, priority, end))
    return out


def vllm_id(req_id):
    """vLLM's request id for pagedsim's (request index, sample index)."""
    return f"r{req_id[0]:02d}"


class SchedulerOracle(RuleBasedStateMachine):
    def __init__(self, vllm, model_dir):
        super().__init__()
        self.vllm, self.model_dir = vllm, model_dir

    @initialize(
        work=workloads(),
        budget=st.integers(1, 12),
        max_num_seqs=st.integers(1, 4),
        policy=st.sampled_from(["fcfs", "priority"]),
    )
    def build(self, work, budget, max_num_seqs, policy):
        # vLLM's SchedulerConfig refuses a budget below max_num_seqs; SchedulerV1 takes it
        # (docs/vllm-name-map.md)
        max_num_seqs = min(max_num_seqs, budget)
        args = SchedulerArgs(N + 1, B, budget, max_num_seqs, policy, MAX_LEN)
        self.theirs = vllm_scheduler(self.vllm, self.model_dir, args)
        self.ours = SchedulerV1(
            [Request(len(p), len(o), arrival_step=a) for p, o, a, _, _ in work],
            PrefixCachingManager(N, B, trace=False),
            SchedulerConfig(
                max_num_batched_tokens=budget,
                max_num_seqs=max_num_seqs,
                policy=policy,
                max_model_len=MAX_LEN,
            ),
            columns=RequestColumns(
                tokens=[p for p, *_ in work],
                output_tokens=[o for _, o, *_ in work],
                priorities=[pr for *_, pr, _ in work],
            ),
            record=False,
        )
        self.work, self.added = work, 0
        self.reset_preempted: set[str] = set()  # preempted by a reset since the last step

    def _vllm_request(self, i):
        prompt, outputs, arrival, priority, end = self.work[i]
        extra = 3 if end != "length" else 0  # ends early, by EOS or a stop id
        req = vllm_request(
            self.vllm,
            vllm_id((i, 0)),
            prompt,
            B,
            max_tokens=len(outputs) + extra,
            priority=priority,
            arrival_time=float(arrival),
        )
        params = req.sampling_params
        params.update_from_generation_config({}, EOS)
        if end == "stop":
            params.stop_token_ids = [STOP]
            params._all_stop_token_ids = {EOS, STOP}
        return req

    @precondition(lambda self: not self.ours.done)
    @rule()
    def step(self):
        now = self.ours.now + 1  # pagedsim takes in what arrived before this step
        while self.added < len(self.work) and self._arrival_order()[self.added][0] < now:
            self.theirs.add_request(self._vllm_request(self._arrival_order()[self.added][1]))
            self.added += 1
        theirs, ours = self.theirs.schedule(), self.ours.schedule()
        self._same_schedule(theirs, ours)
        tokens = self.ours.workload_tokens(ours)  # the faked model: the drawn outputs, in turn
        finished = self.ours.update_from_output(ours, tokens)
        ids = list(theirs.num_scheduled_tokens)
        want = {vllm_id(rid): [t] for rid, t in tokens.items()}
        for rid in ids:  # the requests vLLM lets sample are pagedsim's
            req = self.theirs.requests[rid]
            assert (req.num_computed_tokens >= req.num_tokens) == (rid in want), f"{rid} samples?"
        out = self.theirs.update_from_output(
            theirs,
            self.vllm.ModelRunnerOutput(
                req_ids=ids, sampled_token_ids=[want.get(r, []) for r in ids]
            ),
        )
        done = {
            o.request_id
            for batch in out.values()
            for o in batch.outputs
            if o.finish_reason is not None
        }
        assert done == {vllm_id(rid) for rid in finished}, f"finished: vLLM {done}"

    def _arrival_order(self):
        return sorted((a, i) for i, (_, _, a, _, _) in enumerate(self.work))

    def _same_schedule(self, theirs, ours):
        name = {rid: vllm_id(rid) for rid in ours.num_scheduled_tokens}
        name |= {rid: vllm_id(rid) for rid in ours.preempted_req_ids | ours.finished_req_ids}
        sched = {name[r]: n for r, n in ours.num_scheduled_tokens.items()}
        assert theirs.num_scheduled_tokens == sched, (
            f"scheduled: vLLM {theirs.num_scheduled_tokens}, pagedsim {sched}"
        )
        new = [
            (name[r.req_id], r.num_computed_tokens, list(r.block_ids))
            for r in ours.scheduled_new_reqs
        ]
        got = [
            (r.req_id, r.num_computed_tokens, [P(b) for b in r.block_ids[0]])
            for r in theirs.scheduled_new_reqs
        ]
        assert got == new, "new requests (id, num_computed_tokens, block ids)"
        cached = ours.scheduled_cached_reqs
        mine = ([name[r] for r in cached.req_ids], cached.num_computed_tokens)
        theirs_cached = theirs.scheduled_cached_reqs
        assert (theirs_cached.req_ids, theirs_cached.num_computed_tokens) == mine, "running ones"
        # vLLM 0.34 also reports the requests reset_prefix_cache(reset_running_requests=True)
        # preempted since the last step; SchedulerV1 only those this step preempted
        # (docs/vllm-name-map.md)
        preempted = {name[r] for r in ours.preempted_req_ids} | self.reset_preempted
        assert theirs.preempted_req_ids == preempted, f"preempted: vLLM {theirs.preempted_req_ids}"
        self.reset_preempted = set()
        assert theirs.finished_req_ids == {name[r] for r in ours.finished_req_ids}, "finished ids"

    @precondition(lambda self: hasattr(self, "ours"))
    @rule(running=st.booleans())
    def reset_prefix_cache(self, running):
        if running:
            self.reset_preempted |= {vllm_id(r.request_id) for r in self.ours.running}
        ok = self.theirs.reset_prefix_cache(reset_running_requests=running)
        assert ok == self.ours.reset_prefix_cache(running), f"reset_prefix_cache: vLLM {ok}"

    @invariant()
    def agree(self):
        if not hasattr(self, "ours"):
            return
        manager = self.theirs.kv_cache_manager
        running = [vllm_id(r.request_id) for r in self.ours.running]
        assert [r.request_id for r in self.theirs.running] == running, "running order"
        for r in self.ours.running:
            theirs = [P(b) for b in manager.get_block_ids(vllm_id(r.request_id))[0]]
            assert theirs == self.ours.manager.block_table(r.request_id).blocks, "block table"
        pool = manager.block_pool
        assert vllm_free_list(pool) == self.ours.manager.pool.free_list(), "free queue order"
        assert [b.ref_cnt for b in pool.blocks[1:]] == self.ours.manager.pool.ref_counts()
        self.ours.manager.check_invariants()
        agreed(self)


def test_scheduler_v1_follows_vllm(vllm, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("tiny_llama")
    (model_dir / "config.json").write_text(json.dumps(TINY_LLAMA))
    run_state_machine_as_test(lambda: SchedulerOracle(vllm, str(model_dir)), settings=STEPS)
