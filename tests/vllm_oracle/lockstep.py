"""One step of pagedsim's SchedulerV1 beside vLLM v1's Scheduler, compared: the one loop.

Whoever drives pagedsim's scheduler -- the oracle machine (test_scheduler_oracle.py) or the
engine's own `PagedEngine.step` (test_engine_oracle.py) -- hands each `schedule()` output and
each `update_from_output()` to a `Lockstep`, which makes vLLM's Scheduler do the same and
compares after each call:

    schedule()            the scheduled requests and their token counts, the new ones (with
                          num_computed_tokens and block ids), the running ones, the
                          preempted and the finished request ids
    update_from_output()  which requests sample, and which finish
    state()               the running order, the waiting order, every running block table,
                          the whole free queue and every ref count

pagedsim's request id (i, 0) is vLLM's "rNN" (v1 runs one sequence per request).
"""

from __future__ import annotations

from typing import Any

from .sides import P, vllm_free_list


def vllm_id(req_id: tuple[int, int]) -> str:
    """vLLM's request id for pagedsim's (request index, sample index)."""
    return f"r{req_id[0]:02d}"


class Lockstep:
    """vLLM's Scheduler (`theirs`) kept in step with pagedsim's SchedulerV1 (`ours`)."""

    def __init__(self, vllm: Any, theirs: Any, ours: Any, tables: Any) -> None:
        """`tables(req_id)`: pagedsim's block table of a running request, per KV cache group."""
        self.vllm, self.theirs, self.ours, self.tables = vllm, theirs, ours, tables
        self.reset_preempted: set[str] = set()  # preempted by a reset since the last step
        self.out: Any = None  # vLLM's output of the step under way

    def schedule(self, ours_out: Any) -> None:
        """vLLM's schedule(), compared with pagedsim's output of the same step."""
        self.out = theirs = self.theirs.schedule()
        sched = {vllm_id(r): n for r, n in ours_out.num_scheduled_tokens.items()}
        assert theirs.num_scheduled_tokens == sched, (
            f"scheduled: vLLM {theirs.num_scheduled_tokens}, pagedsim {sched}"
        )
        new = [
            (vllm_id(r.req_id), r.num_computed_tokens, list(r.block_ids))
            for r in ours_out.scheduled_new_reqs
        ]
        got = [
            (r.req_id, r.num_computed_tokens, [P(b) for b in r.block_ids[0]])
            for r in theirs.scheduled_new_reqs
        ]
        assert got == new, f"new requests (id, computed, blocks): vLLM {got}, pagedsim {new}"
        cached = ours_out.scheduled_cached_reqs
        mine = ([vllm_id(r) for r in cached.req_ids], cached.num_computed_tokens)
        theirs_cached = theirs.scheduled_cached_reqs
        got_cached = (theirs_cached.req_ids, theirs_cached.num_computed_tokens)
        assert got_cached == mine, f"running ones: vLLM {got_cached}, pagedsim {mine}"
        # vLLM 0.34 also reports the requests reset_prefix_cache(reset_running_requests=True)
        # preempted since the last step; SchedulerV1 only those this step preempted
        # (docs/vllm-name-map.md)
        preempted = {vllm_id(r) for r in ours_out.preempted_req_ids} | self.reset_preempted
        assert theirs.preempted_req_ids == preempted, (
            f"preempted: vLLM {theirs.preempted_req_ids}, pagedsim {preempted}"
        )
        self.reset_preempted = set()
        finished = {vllm_id(r) for r in ours_out.finished_req_ids}
        assert theirs.finished_req_ids == finished, (
            f"finished ids: vLLM {theirs.finished_req_ids}, pagedsim {finished}"
        )
        self._same_tables()  # as allocated, before a finished request frees them

    def _same_tables(self) -> None:
        manager = self.theirs.kv_cache_manager
        for r in self.ours.running:
            rid = vllm_id(r.request_id)
            got = tuple([P(b) for b in group] for group in manager.get_block_ids(rid))
            want = self.tables(r.request_id)
            assert got == want, f"block table of {rid}: vLLM {got}, pagedsim {want}"

    def update(self, sampled: dict[tuple[int, int], int], finished: list[Any]) -> None:
        """vLLM's update_from_output() with the tokens pagedsim's model sampled; both must
        let the same requests sample and finish the same ones."""
        theirs, self.out = self.out, None
        ids = list(theirs.num_scheduled_tokens)
        want = {vllm_id(rid): [t] for rid, t in sampled.items()}
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
        mine = {vllm_id(rid) for rid in finished}
        assert done == mine, f"finished: vLLM {done}, pagedsim {mine}"

    def reset_prefix_cache(self, running: bool) -> None:
        if running:
            self.reset_preempted |= {vllm_id(r.request_id) for r in self.ours.running}
        ok = self.theirs.reset_prefix_cache(reset_running_requests=running)
        assert ok == self.ours.reset_prefix_cache(running), f"reset_prefix_cache: vLLM {ok}"

    def abort(self, req_id: tuple[int, int]) -> None:
        """One request aborted on both sides (v1's finish_requests, FINISHED_ABORTED)."""
        status = self.vllm.mods["vllm.v1.request"].RequestStatus.FINISHED_ABORTED
        theirs = [r.request_id for r in self.theirs.finish_requests(vllm_id(req_id), status)]
        mine = [vllm_id(r) for r in self.ours.finish_requests(req_id)]
        assert theirs == mine, f"aborted: vLLM {theirs}, pagedsim {mine}"

    def state(self) -> None:
        """Running and waiting order, block tables, the free queue and every ref count."""
        theirs, ours = self.theirs, self.ours
        running = [vllm_id(r.request_id) for r in ours.running]
        assert [r.request_id for r in theirs.running] == running, "running order"
        waiting = [vllm_id(r.request_id) for r in ours.waiting]
        got = [
            r.request_id
            for r in (sorted(theirs.waiting) if ours.policy == "priority" else theirs.waiting)
        ]
        assert got == waiting, f"waiting order: vLLM {got}, pagedsim {waiting}"
        for r in ours.running + list(ours.waiting):
            got_n = theirs.requests[vllm_id(r.request_id)].num_computed_tokens
            assert got_n == r.num_computed_tokens, f"{vllm_id(r.request_id)} num_computed_tokens"
        self._same_tables()
        manager = theirs.kv_cache_manager
        pool = manager.block_pool
        free = vllm_free_list(pool)
        assert free == ours.manager.pool.free_list(), (
            f"free queue: vLLM {free}, pagedsim {ours.manager.pool.free_list()}"
        )
        assert [b.ref_cnt for b in pool.blocks[1:]] == ours.manager.pool.ref_counts(), "ref counts"
