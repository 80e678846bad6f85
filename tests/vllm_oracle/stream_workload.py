"""vLLM 0.34's own KVCacheManager publishing through its own ZmqEventPublisher, read whole by
pagedsim's subscriber: every event that goes out is counted in and applied.

`run(v, ...)` drives a random workload on vLLM's v1 KVCacheManager alone (new requests on a
few shared prefixes, decode steps, frees, now and then `reset_prefix_cache`), with one KV
cache group of full attention, or (`hybrid=True`) a full group of 8-token blocks beside a
sliding-window group of 4 (hash blocks of 4): every prompt block is then cached once per
group and evicted per group, and the stream carries two block sizes. After each operation
vLLM's queued events go out as one `KVEventBatch`, and the blocks vLLM's block pool holds
are noted as (group, external hash): the set the stream must leave on the page.

pagedsim's `Subscriber` binds a loopback port that vLLM's publisher connects to (the first
batches may be sent before the connection is up: they come back through vLLM's replay
socket). Its batches are replayed by `kv_events.timeline`, and the cached set after each
batch is compared with vLLM's. The figure for the report, with the oracle venv:

    .venv-vllm/bin/python -m tests.vllm_oracle.stream_workload 20000 [--hybrid] [--bytes]
"""

from __future__ import annotations

import os
import random
import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pagedsim import kv_events as ke
from pagedsim.kv_stream import sequence_notes
from pagedsim.kv_subscriber import Subscriber


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manager(v: Any, hybrid: bool, num_blocks: int) -> Any:
    """vLLM's KVCacheManager, events on: one full group of 4, or full 8 + window 4."""
    spec, shape = v.spec, dict(num_kv_heads=1, head_size=1, dtype=v.float32)
    if hybrid:
        groups = [
            spec.KVCacheGroupSpec(["full"], spec.FullAttentionSpec(block_size=8, **shape)),
            spec.KVCacheGroupSpec(
                ["window"], spec.SlidingWindowSpec(block_size=4, sliding_window=8, **shape)
            ),
        ]
    else:
        groups = [spec.KVCacheGroupSpec(["full"], spec.FullAttentionSpec(block_size=4, **shape))]
    config = spec.KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups)
    return v.KVCacheManager(
        config,
        4096,
        scheduler_block_size=8 if hybrid else 4,
        hash_block_size=4,
        enable_caching=True,
        enable_kv_cache_events=True,
    )


def held(v: Any, m: Any) -> Counter[tuple[int, Any]]:
    """What vLLM's block pool holds: per (group, the hash its events name), how many blocks
    are cached under it (BlockHashToBlockMap keeps one id, and the others in _dup_ids)."""
    u, table = v.utils, m.block_pool.cached_block_hash_to_block
    return Counter(
        {
            (u.get_group_id(k), _text(u.maybe_convert_block_hash(u.get_block_hash(k)))): len(
                table._dup_ids.get(k, (None,))
            )
            for k in table._cache
        }
    )


def _text(h: Any) -> Any:
    return h.hex() if isinstance(h, bytes) else h  # pagedsim reads bytes hashes as hex


@dataclass
class Workload:
    v: Any
    hybrid: bool = False
    seed: int = 0
    num_blocks: int = 48
    running: dict[str, Any] = field(default_factory=dict)
    count: int = 0

    def __post_init__(self) -> None:
        self.m = manager(self.v, self.hybrid, self.num_blocks)
        self.rng = random.Random(self.seed)
        self.prefixes = [[self.rng.randrange(500) for _ in range(24)] for _ in range(4)]
        self.hasher = self.v.utils.get_request_block_hasher(4, self.v.sha256)

    def step(self) -> list[Any]:
        """One random operation; vLLM's events it queued."""
        r = self.rng.random()
        if r < 0.01:
            for rid in sorted(self.running):
                self.m.free(self.running.pop(rid))
            self.m.reset_prefix_cache()
        elif not self.running or r < 0.35:
            self._new()
        elif r < 0.85:
            self._decode(self.rng.choice(sorted(self.running)))
        else:
            self.m.free(self.running.pop(self.rng.choice(sorted(self.running))))
        return self.m.take_events()

    def _new(self) -> None:
        self.count += 1
        prefix = self.rng.choice(self.prefixes)[: self.rng.randrange(0, 25)]
        tokens = prefix + [self.rng.randrange(500) for _ in range(self.rng.randrange(1, 12))]
        params = self.v.SamplingParams(max_tokens=10_000)
        req = self.v.Request(f"r{self.count}", tokens, params, None, block_hasher=self.hasher)
        hit, n_hit = self.m.get_computed_blocks(req)[:2]
        if self.m.allocate_slots(req, len(tokens) - n_hit, n_hit, hit) is not None:
            req.num_computed_tokens = len(tokens)
            self.running[req.request_id] = req

    def _decode(self, rid: str) -> None:
        req = self.running[rid]
        req.append_output_token_ids(self.rng.randrange(500))
        if self.m.allocate_slots(req, 1) is None:  # the pool is dry: free, as preemption would
            self.m.free(self.running.pop(rid))
        else:
            req.num_computed_tokens += 1


@dataclass
class Outcome:
    published: int  # events vLLM's publisher was handed
    batches: int
    received: int  # events in the batches pagedsim's subscriber holds
    applied: int  # steps of pagedsim's replay (one per event)
    refused: int  # messages the subscriber refused
    notes: list[str]  # what the seqs said (gaps, replays)
    mismatches: list[int]  # batches after which the replay's cache differs from vLLM's
    seconds: float
    blocks_at_end: int  # blocks vLLM's pool holds at the end (copies counted)


def run(
    v: Any, events: int, hybrid: bool = False, seed: int = 0, capture: str | None = None
) -> Outcome:
    """Publish at least `events` events from the workload; read them back (saved as a
    `.kvcap` at `capture` if given); compare."""
    start = time.monotonic()
    port, replay = _port(), _port()
    sub = Subscriber(
        f"tcp://127.0.0.1:{port}", bind=True, replay_endpoint=f"tcp://127.0.0.1:{replay}"
    )
    pub = v.events.ZmqEventPublisher(
        0,
        endpoint=f"tcp://127.0.0.1:{port}",
        replay_endpoint=f"tcp://127.0.0.1:{replay}",
        buffer_steps=1_000_000,
    )
    work, after, published = Workload(v, hybrid, seed), [], 0
    try:
        while published < events:
            batch = work.step()
            if batch:
                pub.publish(v.events.KVEventBatch(ts=time.time(), events=batch))
                published += len(batch)
                after.append(held(v, work.m))
                sub.poll(0)
        deadline = time.monotonic() + 60
        while sub.num_events < published and time.monotonic() < deadline:
            sub.poll(100)
    finally:
        pub.shutdown()
        sub.close()
    if capture is not None:
        sub.save(capture)
    return _compare(sub, published, after, time.monotonic() - start)


def _compare(sub: Subscriber, published: int, after: list, seconds: float) -> Outcome:
    batches = sub.batches()
    t = ke.timeline(e for b in batches for e in b.events)
    cached: Counter[tuple[int, Any]] = Counter()  # copies of each key on the page
    k, mismatches = 0, []
    for i, b in enumerate(batches):
        for step in t.steps[k : k + len(b.events)]:
            cached.subtract(_key(t.records[r]) for r in step.removed)
            cached.update(_key(t.records[r]) for r in step.added)
        k += len(b.events)
        if i >= len(after) or +cached != after[i]:
            mismatches.append(i)
    notes = [n for _, ns in sequence_notes(batches) for n in ns if "replay socket" not in n]
    return Outcome(
        published,
        len(batches),
        sub.num_events,
        len(t.steps),
        sub.refused,
        notes,
        mismatches,
        seconds,
        sum(after[-1].values()) if after else 0,
    )


def _key(r: ke.Record) -> tuple[int, Any]:
    return (r.event.group_idx or 0, r.hash)


def main(argv: list[str]) -> int:
    from tests.vllm_oracle.sides import load_vllm

    if "--bytes" in argv:
        os.environ["VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"] = "0"
    v = load_vllm()
    events = int(next((a for a in argv if a.isdigit()), "20000"))
    out = run(v, events, hybrid="--hybrid" in argv)
    print(
        f"vLLM {v.version} published {out.published:,} events in {out.batches:,} batches; "
        f"pagedsim received {out.received:,}, applied {out.applied:,}; "
        f"{out.refused} refused; {len(out.mismatches)} batches differ from vLLM's pool; "
        f"notes {out.notes[:3]}; {out.seconds:.1f} s"
    )
    return 0 if out.published == out.applied and not out.mismatches else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
