"""An independent, deliberately plain emulation of vLLM v1's rules, compared with the simulator.

The emulation keeps the free queue as a Python list, names a cached block by the
whole token prefix it ends (no hash function at all), and reimplements v1's
scheduler loop from its description. The simulator (intrusive list, chained hashes,
heap-ordered eviction, SchedulerV1) must agree on every step's scheduled tokens and
on the hit, computed, preempted and recomputed token counts, on multi-turn,
parallel-sampling and preemption workloads.
"""

from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim.policies import PrefixCachingManager
from pagedsim.scheduler import make_scheduler
from pagedsim.scheduler_v1 import synthetic_token
from pagedsim.workloads import Request


class Emulated:
    """v1's block pool + scheduler, the slow obvious way."""

    def __init__(self, num_gpu_blocks, bs, budget, max_seqs, by_priority=False):
        self.bs, self.budget, self.max_seqs = bs, budget, max_seqs
        self.by_priority = by_priority
        self.free = list(range(num_gpu_blocks))  # front = next handed out
        self.ref = [0] * num_gpu_blocks
        self.name = [None] * num_gpu_blocks  # the token prefix a cached block ends
        self.cache = {}  # prefix -> [blocks], oldest first
        self.hit_tokens = self.preemptions = self.recomputed = 0
        self.preempted_hit_tokens = 0  # hits of preempted requests' lookups: v1 counts them apart
        self.steps = []

    def lookup(self, tokens):
        hits = []
        for i in range((len(tokens) - 1) // self.bs):
            found = self.cache.get(tuple(tokens[: (i + 1) * self.bs]))
            if not found:
                break
            hits.append(found[0])
        return hits

    def allocate(self, r, n, hits=()):
        total = -(-(r["done"] + n) // self.bs)
        need = total - len(r["blocks"]) - len(hits) + sum(1 for b in hits if not self.ref[b])
        if need > len(self.free):
            return False
        for b in hits:
            if not self.ref[b]:
                self.free.remove(b)
            self.ref[b] += 1
            r["blocks"].append(b)
        while len(r["blocks"]) < total:
            b = self.free.pop(0)
            if self.name[b] is not None:  # evict
                self.cache[self.name[b]].remove(b)
                if not self.cache[self.name[b]]:
                    del self.cache[self.name[b]]
                self.name[b] = None
            self.ref[b] = 1
            r["blocks"].append(b)
        tokens = r["prompt"] + r["out"]
        for i in range(min(r["done"] + n, len(tokens)) // self.bs):
            b = r["blocks"][i]
            if self.name[b] is None:
                self.name[b] = tuple(tokens[: (i + 1) * self.bs])
                self.cache.setdefault(self.name[b], []).append(b)
        return True

    def release(self, r):
        front, back = [], []
        for b in reversed(r["blocks"]):
            self.ref[b] -= 1
            if not self.ref[b]:
                (back if self.name[b] is not None else front).append(b)
        self.free = front + self.free + back
        r["blocks"], r["done"] = [], 0

    @staticmethod
    def rank(r):
        """v1's Request order under the priority policy: (priority, arrival_time, id)."""
        return (r["priority"], r["arrival"], r["index"], r["sample"])

    def count_hits(self, r, tokens):
        """v1's PrefixCacheStats.record: a preempted request's hits are counted apart."""
        if r.get("preempted"):
            self.preempted_hit_tokens += tokens
        else:
            self.hit_tokens += tokens

    def schedule_running(self, running, waiting, sched):
        """v1's first loop: the running requests in order, preempting until each fits;
        returns the budget left and whether anything was preempted."""
        budget, preempted, i = self.budget, False, 0
        while i < len(running) and budget > 0:
            r = running[i]
            n = min(len(r["prompt"]) + len(r["out"]) - r["done"], budget)
            ok = self.allocate(r, n)
            while not ok:
                if self.by_priority:  # v1 0.34: max (priority, arrival time); a tie goes
                    # to the first running (max keeps the first), not to the latest index
                    victim = max(running, key=lambda q: (q["priority"], q["arrival"]))
                    running.remove(victim)
                    if id(victim) in sched:  # scheduled earlier this step: undo that
                        budget += sched.pop(id(victim))[1]
                        i -= 1
                else:
                    victim = running.pop()
                self.release(victim)
                victim["preempted"] = True
                waiting.insert(0, victim)
                self.preemptions += 1
                preempted = True
                if victim is r:
                    break
                ok = self.allocate(r, n)
            if not ok:
                if self.by_priority and victim is r:  # v1 0.34: r preempted itself; the
                    continue  # ones after it rank higher and may fit (running[i] is next)
                break
            sched[id(r)] = (r, n)
            budget -= n
            i += 1
        return budget, preempted

    def run(self, reqs):
        waiting, running, now, pending = [], [], 0, sorted(reqs, key=lambda r: r["arrival"])
        while pending or waiting or running:
            now += 1
            while pending and pending[0]["arrival"] < now:
                waiting.append(pending.pop(0))
            sched = {}
            budget, preempted = self.schedule_running(running, waiting, sched)
            while not preempted and waiting and budget > 0 and len(running) < self.max_seqs:
                if self.by_priority:  # v1's priority queue: the most urgent, then the oldest
                    waiting.sort(key=self.rank)
                r = waiting[0]
                tokens = r["prompt"] + r["out"]
                hits = self.lookup(tokens)
                n = min(len(tokens) - len(hits) * self.bs, budget)
                r["done"] = len(hits) * self.bs
                if not self.allocate(r, n, hits):
                    r["done"] = 0
                    break
                self.count_hits(r, len(hits) * self.bs)
                waiting.pop(0)
                running.append(r)
                sched[id(r)] = (r, n)
                budget -= n
            for r, n in sched.values():
                self.recomputed += max(0, min(r["done"] + n, r["high"]) - r["done"])
                r["done"] += n
                r["high"] = max(r["high"], r["done"])
                if r["done"] == len(r["prompt"]) + len(r["out"]):
                    r["out"].append(r["outputs"][len(r["out"])])
                    if len(r["out"]) == len(r["outputs"]):
                        self.release(r)
                        running.remove(r)
            self.steps.append(sum(n for _, n in sched.values()))


@st.composite
def workloads(draw):
    """Multi-turn chats (a turn's prompt = an earlier turn's prompt + output + more) and
    parallel samples, all from a small vocabulary so that prefixes repeat."""
    reqs, tokens, outputs = [], [], []
    for _i in range(draw(st.integers(1, 6))):
        out = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(1, 6)))]
        if tokens and draw(st.booleans()):  # a next turn of an earlier request
            j = draw(st.integers(0, len(tokens) - 1))
            prompt = tokens[j] + outputs[j] + [draw(st.integers(0, 3))]
        else:
            prompt = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(1, 12)))]
        n = draw(st.sampled_from([1, 1, 2, 3]))
        reqs.append(Request(len(prompt), len(out), n=n, arrival_step=draw(st.integers(0, 6))))
        tokens.append(prompt)
        outputs.append(out)
    return reqs, tokens, outputs


@settings(max_examples=40, deadline=None)
@given(
    workloads(),
    st.sampled_from([1, 2, 4]),
    st.integers(0, 6),
    st.sampled_from([3, 8, 64]),
    st.sampled_from([1, 2, 8]),
    st.none() | st.lists(st.integers(0, 2), min_size=6, max_size=6),
)
def test_the_simulator_agrees_with_a_plain_emulation_of_v1(
    work, bs, spare, budget, max_seqs, priorities
):
    reqs, tokens, outputs = work
    num_gpu_blocks = max(-(-(r.total_len - 1) // bs) for r in reqs) + spare  # tight: preemptions
    m = PrefixCachingManager(num_gpu_blocks, bs, trace=False)
    prio = None if priorities is None else priorities[: len(reqs)]
    s = make_scheduler(
        reqs,
        m,
        mode="v1",
        max_num_batched_tokens=budget,
        max_num_seqs=max_seqs,
        tokens=tokens,
        output_tokens=outputs,
        priorities=prio,
        policy="fcfs" if prio is None else "priority",
    ).run(check=True)
    emu = Emulated(num_gpu_blocks, bs, budget, max_seqs, by_priority=prio is not None)
    emu.run(
        [
            {
                "prompt": list(tokens[i]),
                "out": [],
                "done": 0,
                "high": 0,
                "blocks": [],
                "index": i,
                "sample": k,
                "priority": 0 if prio is None else prio[i],
                "arrival": r.arrival_step,
                "outputs": outputs[i]
                if k == 0
                else [synthetic_token(i, k, j) for j in range(r.output_len)],
            }
            for i, r in enumerate(reqs)
            for k in range(r.n)
        ]
    )
    assert [rec.scheduled_tokens for rec in s.records] == emu.steps
    assert m.stats.hit_tokens == emu.hit_tokens
    assert m.stats.preempted_hit_tokens == emu.preempted_hit_tokens
    assert (s.preemptions, s.recomputed_tokens) == (emu.preemptions, emu.recomputed)
    assert m.num_free_blocks == num_gpu_blocks and s.finished == len(reqs)


def test_the_chat_benchmark_matches_v1_hits_worked_out_by_hand():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[2] / "benchmarks" / "chat_prefix_cache.py"
    spec = importlib.util.spec_from_file_location("chat_prefix_cache", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    chat = bench.chat_workload(conversations=3, turns=4, seed=5)
    got = bench.run(chat, block_size=16, num_gpu_blocks=4096)
    bs, expected = 16, []
    for t in range(4):  # random 32k-vocabulary text: only a conversation's own history hits
        hits = 0
        for conv in chat:
            history = [tok for msg, resp in conv[:t] for tok in msg + resp]
            prompt = history + conv[t][0]
            kv = len(history) - 1 if t else 0  # the previous answer's last token has no KV
            hits += min(kv // bs, (len(prompt) - 1) // bs) * bs
        expected.append(hits)
    assert [row["hit_tokens"] for row in got["per_turn"]] == expected
