"""pagedsim's SchedulerV1 against vLLM v1's own Scheduler, step by step.

Hypothesis draws the whole configuration, then drives both schedulers with the same
operations (`lockstep.py` compares them):

    block_size          1, 2, 3 (odd), 5 or 16
    prompts             short (up to 10 tokens) or long (up to 40, against a small budget:
                        chunked prefill), sharing prefixes, some cut to an exact multiple
                        of block_size (v1 never hits a whole prompt: the last block is
                        computed again)
    pool                from the fewest blocks the longest request needs alone up
    max_num_batched_tokens 1..16, max_num_seqs 1..4, "fcfs" or "priority"
    long_prefill_token_threshold   0 (off) or a small cap
    enable_prefix_caching          on, or off (the PrefixCachingManager, or a plain
                                   KVCacheManager with v1's "prepend" free order)
    num_lookahead_tokens           0..3 (the slots a drafter would use)
    max_model_len       exactly the longest request, or a little more
    arrivals            over the first steps; arrival_time ties and priorities (negative
                        ones too) tied or not, arrival_time apart from the arrival step

Between steps a request may be aborted (v1's finish_requests, FINISHED_ABORTED: waiting,
preempted, mid-prefill or mid-decode, finished or not yet arrived) and reset_prefix_cache
asked, with or without reset_running_requests. A request ends by length (max_tokens), by
EOS or by a stop token id in vLLM; pagedsim has no EOS, so its output_len is where vLLM's
request ends (that much of each is faked in the same way on both sides).

A second test takes one request alone in a pool that may be too small for it: SchedulerV1
refuses exactly the requests vLLM's Scheduler could never finish.
"""

from __future__ import annotations

import json
from typing import NamedTuple

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from pagedsim.block_table import blocks_needed
from pagedsim.config import CacheConfig, SchedulerConfig
from pagedsim.manager import KVCacheManager
from pagedsim.policies import PrefixCachingManager
from pagedsim.scheduler_v1 import RequestColumns, SchedulerV1
from pagedsim.workloads import Request

from .lockstep import Lockstep, vllm_id
from .sides import TINY_LLAMA, SchedulerArgs, agreed, needs_vllm, vllm_request, vllm_scheduler

needs_vllm()  # skips this module where vLLM is missing (conftest.py)

EOS, STOP = 99, 98  # the faked model's end-of-sequence id and a stop_token_ids entry
PREFIXES = ((), (1, 2), (1, 2, 3, 4), (5, 5, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9))
STEPS = settings(max_examples=30, stateful_step_count=40, deadline=None)
RARE = 4  # an abort or a reset acts in one of this many of its turns


class Work(NamedTuple):
    """One request of the workload."""

    prompt: list[int]
    outputs: list[int]  # what the faked model samples, in turn
    arrival: int  # the step it arrives before
    arrival_time: float  # v1's Request.arrival_time (priority ties)
    priority: int
    end: str  # "length", "eos" or "stop"


class Setup(NamedTuple):
    args: SchedulerArgs  # vLLM's side (its pool has one block more: the null block)
    work: list[Work]
    plain: bool  # prefix caching off, served by a plain KVCacheManager


@st.composite
def works(draw, block_size, long):
    prompt = list(draw(st.sampled_from(PREFIXES)))
    most = 40 if long else 10
    prompt += draw(st.lists(st.integers(1, 3), min_size=1, max_size=most - len(prompt)))
    if draw(st.booleans()):  # an exact multiple of block_size: the whole-prompt-hit edge
        k = max(1, len(prompt) // block_size)
        prompt = (prompt + [1] * block_size)[: k * block_size]
    outputs = draw(st.lists(st.integers(1, 3), min_size=1, max_size=5))
    end = draw(st.sampled_from(["length", "eos", "stop"]))
    if end != "length":
        outputs[-1] = EOS if end == "eos" else STOP
    arrival = draw(st.integers(0, 3))
    arrival_time = float(draw(st.sampled_from([arrival, draw(st.integers(0, 3))])))
    return Work(prompt, outputs, arrival, arrival_time, draw(st.integers(-2, 2)), end)


@st.composite
def setups(draw):
    bs = draw(st.sampled_from([1, 2, 3, 5, 16]))
    long = draw(st.booleans())
    work = draw(st.lists(works(bs, long), min_size=1, max_size=6))
    caching = draw(st.booleans())
    plain = not caching and draw(st.booleans())
    ahead = 0 if plain else draw(st.sampled_from([0, 1, 3]))
    longest = max(len(w.prompt) + len(w.outputs) for w in work)
    max_model_len = longest + draw(st.sampled_from([0, 0, 1, 7]))
    # the blocks the largest request holds alone at its last step (its last token is
    # never computed; lookahead slots stop at max_model_len)
    need = max(
        blocks_needed(min(len(w.prompt) + len(w.outputs) - 1 + ahead, max_model_len), bs)
        for w in work
    )
    budget = draw(st.integers(1, 16))
    args = SchedulerArgs(
        num_gpu_blocks=need + draw(st.sampled_from([0, 0, 1, 2, 6])) + 1,  # tight: preempts
        block_size=bs,
        max_num_batched_tokens=budget,
        # vLLM's SchedulerConfig refuses a budget below max_num_seqs; SchedulerV1 takes it
        # (docs/vllm-name-map.md)
        max_num_seqs=min(draw(st.integers(1, 4)), budget),
        policy=draw(st.sampled_from(["fcfs", "priority"])),
        max_model_len=max_model_len,
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 1, 2, 3, 5])),
        enable_prefix_caching=caching,
        num_lookahead_tokens=ahead,
    )
    return Setup(args, work, plain)


def our_scheduler(setup: Setup) -> SchedulerV1:
    """pagedsim's SchedulerV1 for a setup, configured as vLLM's."""
    a, work = setup.args, setup.work
    n = a.num_gpu_blocks - 1  # vLLM's null block is not ours
    manager = (
        KVCacheManager(n, a.block_size, free_order="prepend", trace=False)
        if setup.plain
        else PrefixCachingManager(n, a.block_size, trace=False)
    )
    return SchedulerV1(
        [Request(len(w.prompt), len(w.outputs), arrival_step=w.arrival) for w in work],
        manager,
        SchedulerConfig(
            max_num_batched_tokens=a.max_num_batched_tokens,
            max_num_seqs=a.max_num_seqs,
            policy=a.policy,
            max_model_len=a.max_model_len,
            long_prefill_token_threshold=a.long_prefill_token_threshold,
        ),
        CacheConfig(block_size=a.block_size, enable_prefix_caching=a.enable_prefix_caching),
        columns=RequestColumns(
            tokens=[w.prompt for w in work],
            output_tokens=[w.outputs for w in work],
            priorities=[w.priority for w in work],
            arrival_times=[w.arrival_time for w in work],
        ),
        num_lookahead_tokens=a.num_lookahead_tokens,
        record=False,
    )


class SchedulerOracle(RuleBasedStateMachine):
    def __init__(self, vllm, model_dir):
        super().__init__()
        self.vllm, self.model_dir = vllm, model_dir

    @initialize(setup=setups())
    def build(self, setup):
        self.setup = setup
        self.ours = our_scheduler(setup)
        theirs = vllm_scheduler(self.vllm, self.model_dir, setup.args)
        m = self.ours.manager
        self.pair = Lockstep(
            self.vllm, theirs, self.ours, lambda rid: (list(m.block_table(rid).blocks),)
        )
        self.order = sorted(range(len(setup.work)), key=lambda i: (setup.work[i].arrival, i))
        self.added = 0

    def _vllm_request(self, i):
        w = self.setup.work[i]
        extra = 3 if w.end != "length" else 0  # ends early, by EOS or a stop id
        req = vllm_request(
            self.vllm,
            vllm_id((i, 0)),
            w.prompt,
            self.setup.args.block_size,
            max_tokens=len(w.outputs) + extra,
            priority=w.priority,
            arrival_time=w.arrival_time,
        )
        params = req.sampling_params
        params.update_from_generation_config({}, EOS)
        if w.end == "stop":
            params.stop_token_ids = [STOP]
            params._all_stop_token_ids = {EOS, STOP}
        return req

    def _arrive(self):
        """vLLM takes in what pagedsim's next schedule() takes in (arrived before it)."""
        now = self.ours.now + 1
        while self.added < len(self.order):
            i = self.order[self.added]
            if self.setup.work[i].arrival >= now:
                break
            self.pair.theirs.add_request(self._vllm_request(i))
            self.added += 1

    @precondition(lambda self: hasattr(self, "ours") and not self.ours.done)
    @rule(k=st.sampled_from([1, 1, 5]))
    def step(self, k):
        """k engine steps (long prompts need many), both sides compared after each."""
        for _ in range(k):
            if self.ours.done:
                return
            self._arrive()
            out = self.ours.schedule()
            self.pair.schedule(out)
            tokens = self.ours.workload_tokens(out)  # the faked model: the drawn outputs
            self.pair.update(tokens, self.ours.update_from_output(out, tokens))
            self.agree()

    # the rules below are asked as often as `step` but act one time in RARE, so requests
    # still run to their ends (where lookahead meets max_model_len)
    @precondition(lambda self: hasattr(self, "ours"))
    @rule(running=st.booleans(), go=st.integers(1, RARE))
    def reset_prefix_cache(self, running, go):
        if go == 1:
            self.pair.reset_prefix_cache(running)

    @precondition(lambda self: hasattr(self, "ours"))
    @rule(which=st.integers(0, 5), go=st.integers(1, RARE))
    def abort(self, which, go):
        """Abort request `which` (if there is one): waiting, preempted, running, finished
        or not yet arrived."""
        if go == 1 and which < len(self.setup.work):
            self.pair.abort((which, 0))

    @invariant()
    def agree(self):
        if not hasattr(self, "ours"):
            return
        self.pair.state()
        self.ours.manager.check_invariants()
        agreed(self)


def test_scheduler_v1_follows_vllm(vllm, model_dir):
    run_state_machine_as_test(lambda: SchedulerOracle(vllm, model_dir), settings=STEPS)


@settings(max_examples=25, deadline=None)
@given(
    prompt_len=st.integers(1, 12),
    output_len=st.integers(1, 6),
    block_size=st.sampled_from([1, 2, 3, 5]),
    num_gpu_blocks=st.integers(1, 8),
    budget=st.integers(1, 8),
    ahead=st.sampled_from([0, 1, 3]),
)
def test_scheduler_v1_refuses_exactly_what_vllm_could_never_finish(
    vllm, model_dir, prompt_len, output_len, block_size, num_gpu_blocks, budget, ahead
):
    """A request alone in a pool too small for it: vLLM 0.34 (admitting on the first chunk)
    takes it and preempts it again and again, never finishing it; SchedulerV1 refuses it
    when it is built (ValueError), and takes every request vLLM does finish."""
    work = [Work([1] * prompt_len, [2] * output_len, 0, 0.0, 0, "length")]
    args = SchedulerArgs(
        num_gpu_blocks + 1,
        block_size,
        budget,
        1,
        "fcfs",
        max_model_len=prompt_len + output_len,
        num_lookahead_tokens=ahead,
    )
    theirs = vllm_scheduler(vllm, model_dir, args)
    theirs.add_request(vllm_request(vllm, "r00", work[0].prompt, block_size, max_tokens=output_len))
    finished = False
    for _ in range(4 * (prompt_len + output_len)):  # alone, it needs at most P + O steps
        out = theirs.schedule()
        ids = list(out.num_scheduled_tokens)
        sampled = [
            [2] if theirs.requests[r].num_computed_tokens >= theirs.requests[r].num_tokens else []
            for r in ids
        ]
        theirs.update_from_output(
            out, vllm.ModelRunnerOutput(req_ids=ids, sampled_token_ids=sampled)
        )
        if not theirs.requests:
            finished = True
            break
    try:
        our_scheduler(Setup(args, work, False)).run()
        refused = False
    except ValueError as e:
        assert "more than the pool" in str(e), e
        refused = True
    assert refused == (not finished), f"vLLM finished it: {finished}; pagedsim refused: {refused}"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_llama")
    (path / "config.json").write_text(json.dumps(TINY_LLAMA))
    return str(path)
