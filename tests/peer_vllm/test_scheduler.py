"""vLLM's tests/v1/core/test_scheduler.py, re-told on pagedsim (vLLM commit
003df2961dd8830c317a61f9745ccd557da9fa06).

Translations:
    * vLLM's Scheduler is `make_scheduler(requests, manager, mode="v1", ...)` (SchedulerV1);
      `create_requests(num_requests, num_tokens, max_tokens)` is a list of
      `Request(num_tokens, max_tokens)`; `SchedulingPolicy.PRIORITY` is `policy="priority"`
      with `priorities=[...]` and `arrival_times=[...]` (v1's Request.arrival_time: it orders
      requests, it does not delay them; `Request.arrival_step` delays).
    * `add_request` then `schedule()` is one `step()`: it also "runs the model", so a
      request whose prompt is computed samples its next token in the same step. vLLM's
      `update_from_output` with one sampled token is that sampling.
    * `output.scheduled_new_reqs` is the order requests join `running`; `scheduler.waiting`
      iterates in admission order (a heap under the priority policy, as in vLLM).
    * A pool of N vLLM blocks (one is the null block) is N - 1 blocks here. Prefix caching
      off is the plain `KVCacheManager`.
    * `request.num_computed_tokens` is `V1Request.num_computed_tokens`; ids are (request, sample).
Not applicable: multimodal encoder budgets, speculative decoding, structured output, KV
connectors, async scheduling and pipeline parallelism, EOS and stop strings (pagedsim
samples a fixed number of tokens), scheduler stats objects.
"""

from pagedsim import KVCacheManager
from pagedsim.policies import PrefixCachingManager
from pagedsim.scheduler import make_scheduler
from pagedsim.workloads import Request


def priority_scheduler(
    priorities,
    arrival_times=None,
    num_tokens=10,
    max_tokens=16,
    max_num_seqs=16,
    max_num_batched_tokens=8192,
    num_gpu_blocks=10000,
    arrival_steps=None,
):
    """vLLM's create_scheduler_with_priority + create_requests_with_priority."""
    n = len(priorities)
    steps = arrival_steps or [0] * n
    reqs = [Request(num_tokens, max_tokens, arrival_step=steps[i]) for i in range(n)]
    return make_scheduler(
        reqs,
        KVCacheManager(num_gpu_blocks - 1, 16),
        mode="v1",
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        policy="priority",
        priorities=priorities,
        arrival_times=arrival_times or [float(i) for i in range(n)],
    )


def ids(reqs):
    return [str(r.request_id[0]) for r in reqs]


def test_schedule():
    s = make_scheduler([Request(10, 16) for _ in range(10)], KVCacheManager(9999, 16), mode="v1")
    s.step()
    assert not list(s.waiting) and ids(s.running) == [str(i) for i in range(10)]
    assert s.records[-1].prefill_tokens == 10 * 10  # every prompt in full


def test_schedule_concurrent_partial_requests():
    for cache in (True, False):
        m = PrefixCachingManager(9999, 16) if cache else KVCacheManager(9999, 16)
        s = make_scheduler(
            [Request(800, 4) for _ in range(3)],
            m,
            mode="v1",
            max_num_batched_tokens=1024,
            long_prefill_token_threshold=400,
            tokens=[[i] * 800 for i in range(3)] if cache else None,
        )
        s.step()
        assert [r.num_computed_tokens for r in s.running] == [400, 400, 224]
        s.step()
        assert [r.num_computed_tokens for r in s.running] == [800, 800, 448]
        s.step()  # two decodes, and the third prompt's remaining 352 tokens
        assert [r.num_computed_tokens for r in s.running] == [801, 801, 800]
        assert s.records[-1].scheduled_tokens == 1 + 1 + 800 - 224 - 224


def test_schedule_partial_requests():
    """tests/v1/core/test_scheduler.py::test_schedule_partial_requests, in its text-only
    form (vLLM's sliding-window scheduler variant, main branch; the multimodal one needs
    an encoder budget pagedsim does not have). Without long_prefill_token_threshold the
    first prompt is scheduled whole and the next one gets the rest of the budget; a
    running prefill keeps being chunked until its prompt is done."""
    s = make_scheduler(
        [Request(800, 4) for _ in range(3)],
        KVCacheManager(9999, 16),
        mode="v1",
        max_num_batched_tokens=1024,
    )
    s.step()
    assert ids(s.running) == ["0", "1"] and [r.num_computed_tokens for r in s.running] == [800, 224]
    s.step()  # a decode, 576 tokens finishing prompt 1, and the 447 left for prompt 2
    assert [r.num_computed_tokens for r in s.running] == [801, 800, 447]
    s.step()  # two decodes and prompt 2's remaining 353
    assert [r.num_computed_tokens for r in s.running] == [802, 801, 800]
    assert s.records[-1].scheduled_tokens == 1 + 1 + 353
    s.step()  # every request decodes one token
    assert s.records[-1].scheduled_tokens == 3


def test_schedule_order():
    reqs = [Request(800, 4), Request(800, 4), Request(10, 4), Request(10, 4)]
    s = make_scheduler(
        reqs, KVCacheManager(9999, 16), mode="v1", max_num_batched_tokens=1024, max_num_seqs=3
    )
    s.step()  # chunked prefill: the second long prompt takes the rest of the budget
    assert ids(s.running) == ["0", "1"] and s.records[-1].scheduled_tokens == 1024


def test_memory_leak():
    reqs = [Request(30 + i % 7, 1 + i % 5, arrival_step=i // 3) for i in range(40)]
    m = PrefixCachingManager(40, 16)
    make_scheduler(
        reqs,
        m,
        mode="v1",
        max_num_batched_tokens=128,
        tokens=[[i % 4] * r.prompt_len for i, r in enumerate(reqs)],
    ).run(check=True)
    assert m.num_free_blocks == 40 and not m.seq_ids()


def test_priority_scheduling_basic_ordering():
    s = priority_scheduler([2, 0, 1], [1.0, 2.0, 3.0])
    s.step()
    assert ids(s.running) == ["1", "2", "0"]


def test_priority_scheduling_arrival_time_tiebreaker():
    s = priority_scheduler([1, 1, 1], [3.0, 1.0, 2.0])
    s.step()
    assert ids(s.running) == ["1", "2", "0"]


def test_priority_scheduling_mixed_priority_and_arrival():
    s = priority_scheduler([2, 1, 1, 0], [1.0, 3.0, 2.0, 4.0])
    s.step()
    assert ids(s.running) == ["3", "2", "1", "0"]


def test_priority_scheduling_preemption():
    # block_size 16, vLLM's 6 blocks = 5 here; lo1 (priority 5) runs first, hi1 (0) later
    s = priority_scheduler(
        [5, 0],
        [1.0, 2.0],
        num_tokens=32,
        max_num_seqs=3,
        max_num_batched_tokens=200,
        num_gpu_blocks=6,
        arrival_steps=[0, 1],
    )
    s.step()  # lo1 prefilled (2 blocks) and samples: 33 tokens
    assert ids(s.running) == ["0"]
    s.step()  # lo1 takes its 3rd block, hi1 is admitted (2 blocks): the pool is full
    assert ids(s.running) == ["0", "1"] and s.manager.num_free_blocks == 0
    s.step()  # hi1 needs a 3rd block: the least urgent running request, lo1, is preempted
    assert ids(s.running) == ["1"] and ids(s.waiting) == ["0"] and s.preemptions == 1
    assert next(iter(s.waiting)).num_computed_tokens == 0


def test_priority_scheduling_no_preemption_when_space_available():
    s = priority_scheduler(
        [5, 5, 0],
        [1.0, 2.0, 3.0],
        num_tokens=30,
        max_num_seqs=3,
        max_num_batched_tokens=200,
        arrival_steps=[0, 0, 1],
    )
    s.step()
    s.step()
    assert len(s.running) == 3 and len(s.waiting) == 0 and s.preemptions == 0


def test_priority_scheduling_preemption_victim_selection():
    s = priority_scheduler([3, 2, 0], [1.0, 2.0, 3.0], max_num_seqs=1)
    s.step()
    assert ids(s.running) == ["2"]
    assert [r.priority for r in s.waiting] == [2, 3] and ids(s.waiting) == ["1", "0"]


def test_priority_scheduling_equal_priority_preemption():
    s = priority_scheduler([2, 2, 2], [3.0, 1.0, 2.0], max_num_seqs=1)
    s.step()
    assert ids(s.running) == ["1"]
    assert [r.arrival_time for r in s.waiting] == [2.0, 3.0] and ids(s.waiting) == ["2", "0"]


def test_priority_scheduling_waiting_queue_order():
    s = priority_scheduler([3, 1, 2, 0], [1.0, 2.0, 3.0, 4.0], max_num_seqs=1)
    s.step()
    assert ids(s.running) == ["3"]
    assert ids(s.waiting) == ["1", "2", "0"] and [r.priority for r in s.waiting] == [1, 2, 3]


def test_priority_scheduling_fcfs_fallback():
    s = priority_scheduler([1, 1, 1, 1], [4.0, 1.0, 3.0, 2.0])
    s.step()
    assert ids(s.running) == ["1", "3", "2", "0"]


def test_priority_scheduling_with_limited_slots():
    s = priority_scheduler(
        [3, 1, 2, 0], [1.0, 2.0, 3.0, 4.0], max_num_seqs=2, max_num_batched_tokens=1000
    )
    s.step()
    assert set(ids(s.running)) == {"3", "1"}
    assert [r.priority for r in s.waiting] == [2, 3] and ids(s.waiting) == ["2", "0"]


def test_priority_scheduling_heap_property():
    priorities = [5, 1, 8, 3, 2, 7, 4, 6]
    s = priority_scheduler(priorities, max_tokens=1, max_num_seqs=1)
    order, left = [], {str(i) for i in range(len(priorities))}
    while not s.done:
        s.step()  # max_num_seqs=1 and one token each: one request starts and ends per step
        finished = left - set(ids(s.waiting)) - set(ids(s.running))
        assert len(finished) == 1
        order += finished
        left -= finished
    assert [priorities[int(i)] for i in order] == sorted(priorities)
