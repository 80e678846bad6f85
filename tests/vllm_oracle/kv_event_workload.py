"""One random workload on vLLM's KVCacheManager and pagedsim's PrefixCachingManager, side by side.

Each operation runs on both managers: a new request (one of a few shared prefixes plus
random tokens: `get_computed_blocks`, then `allocate_slots`), a decode step (one more
token, `allocate_slots(1)`; freed when the pool is dry), a free, or, now and then,
every request freed and `reset_prefix_cache`. After each operation vLLM's queued KV
events are handed to a `KVEventBatch` (as the engine core does) and pagedsim's are taken.

`Sides(None, seed=...)` runs pagedsim's side alone: the operations depend only on the
seed and on which allocations fail, where both managers agree, so the main suite (no
vLLM) replays the same workload beside a stream vLLM recorded.

vLLM's block b is pagedsim's block b - 1 (vLLM's block 0 is its null block). Both
managers hash differently (sha256 vs Python's hash), so `HashLink` pairs the hashes of
the blocks the two BlockStored streams name in the same order.

Run as a module to record a stream through vLLM's own ZmqEventPublisher into a capture
(`tests/view/data/vllm_stream.kvcap` is one; it needs the oracle venv):

    .venv-vllm/bin/python -m tests.vllm_oracle.kv_event_workload OUT.kvcap
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass, field
from typing import Any

from pagedsim.policies.prefix_cache import PrefixCachingManager


def load_vllm() -> dict[str, Any]:
    """vLLM's pieces for this workload (about 7 s to import)."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import torch
    from vllm.distributed import kv_events
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request

    kv_cache_utils.init_none_hash(sha256)
    return dict(
        torch=torch,
        kv_events=kv_events,
        SamplingParams=SamplingParams,
        sha256=sha256,
        utils=kv_cache_utils,
        KVCacheManager=KVCacheManager,
        FullAttentionSpec=FullAttentionSpec,
        KVCacheConfig=KVCacheConfig,
        KVCacheGroupSpec=KVCacheGroupSpec,
        Request=Request,
    )


@dataclass
class Sides:
    """Both managers and the requests running on them."""

    v: dict[str, Any] | None  # load_vllm(), or None: pagedsim's side alone
    num_gpu_blocks: int = 16
    block_size: int = 4
    seed: int = 0
    running: dict[str, Any] = field(default_factory=dict)  # id -> vLLM Request
    count: int = 0

    def __post_init__(self) -> None:
        bs = self.block_size
        self.ours = PrefixCachingManager(self.num_gpu_blocks, bs, enable_kv_cache_events=True)
        self.rng = random.Random(self.seed)
        self.prefixes = [[self.rng.randrange(1000) for _ in range(12)] for _ in range(3)]
        self.theirs: Any = None
        if self.v is None:
            return
        v = self.v
        spec = v["FullAttentionSpec"](
            block_size=bs, num_kv_heads=1, head_size=1, dtype=v["torch"].float32
        )
        config = v["KVCacheConfig"](
            self.num_gpu_blocks + 1, [], [v["KVCacheGroupSpec"](["layer"], spec)]
        )
        self.theirs = v["KVCacheManager"](
            config,
            max_model_len=4096,
            scheduler_block_size=bs,
            hash_block_size=bs,
            enable_caching=True,
            enable_kv_cache_events=True,
        )

    def step(self) -> tuple[list[Any], list[Any]]:
        """One random operation on both sides: (vLLM's events, pagedsim's events)."""
        r = self.rng.random()
        if r < 0.03:  # every request finishes, then the cache is reset (AllBlocksCleared)
            for rid in sorted(self.running):
                self._free(rid)
            done = self.ours.reset_prefix_cache()
            assert self.theirs is None or self.theirs.reset_prefix_cache() == done
        elif not self.running or r < 0.4:
            self._new()
        elif r < 0.8:
            self._decode(self.rng.choice(sorted(self.running)))
        else:
            self._free(self.rng.choice(sorted(self.running)))
        theirs = self.theirs.take_events() if self.theirs is not None else []
        return theirs, self.ours.take_events()

    def _new(self) -> None:
        self.count += 1
        rid = f"r{self.count}"
        prefix = self.rng.choice(self.prefixes)[: self.rng.randrange(0, 13)]
        tokens = prefix + [self.rng.randrange(1000) for _ in range(self.rng.randrange(1, 10))]
        computed = self.ours.get_computed_blocks(tokens)
        n_new = len(tokens) - computed.num_tokens
        mine = self.ours.allocate_slots(rid, n_new, new_token_ids=tokens, computed=computed)
        if self.v is None:
            if mine is not None:
                self.running[rid] = None
            return
        hasher = self.v["utils"].get_request_block_hasher(self.block_size, self.v["sha256"])
        params = self.v["SamplingParams"](max_tokens=10_000)
        req = self.v["Request"](rid, list(tokens), params, None, block_hasher=hasher)
        hit, n_hit = self.theirs.get_computed_blocks(req)[:2]
        assert n_hit == computed.num_tokens, (n_hit, computed.num_tokens)
        got = self.theirs.allocate_slots(req, n_new, n_hit, hit)
        assert (got is None) == (mine is None), (got, mine)
        if got is not None:
            req.num_computed_tokens = len(tokens)
            self.running[rid] = req

    def _decode(self, rid: str) -> None:
        req = self.running[rid]
        token = self.rng.randrange(1000)
        mine = self.ours.allocate_slots(rid, 1, new_token_ids=[token])
        if req is not None:
            req.append_output_token_ids(token)
            got = self.theirs.allocate_slots(req, 1)
            assert (got is None) == (mine is None), (got, mine)
        if mine is None:  # the pool is dry: free it, as a stand-in for preemption
            self._free(rid)
        elif req is not None:
            req.num_computed_tokens += 1

    def _free(self, rid: str) -> None:
        req = self.running.pop(rid)
        if req is not None:
            self.theirs.free(req)
        self.ours.free_sequence(rid)


class HashLink:
    """vLLM hash -> pagedsim hash, one-to-one, from BlockStored events named in step."""

    def __init__(self) -> None:
        self.to_ours: dict[Any, int] = {}
        self.to_theirs: dict[int, Any] = {}

    def link(self, theirs: list[Any], ours: list[Any]) -> None:
        a = [h for e in theirs if type(e).__name__ == "BlockStored" for h in e.block_hashes]
        b = [h for e in ours if type(e).__name__ == "BlockStored" for h in e.block_hashes]
        assert len(a) == len(b), (len(a), len(b))
        for x, y in zip(a, b, strict=True):
            assert self.to_ours.setdefault(x, y) == y and self.to_theirs.setdefault(y, x) == x


RECORDED = dict(steps=150, seed=3)  # the workload behind tests/view/data/vllm_stream.kvcap


def record(path: str, steps: int = RECORDED["steps"], seed: int = RECORDED["seed"]) -> None:
    """A stream from vLLM's own KVCacheManager through vLLM's own ZmqEventPublisher,
    captured by pagedsim's subscriber on a loopback port."""
    import socket
    import time

    from pagedsim.kv_subscriber import Subscriber

    v = load_vllm()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sub = Subscriber(f"tcp://127.0.0.1:{port}", bind=True)
    pub = v["kv_events"].ZmqEventPublisher(0, endpoint=f"tcp://127.0.0.1:{port}")
    sub.poll(500)  # the socket takes the connection in (libzmq does it inside calls)
    sides = Sides(v, seed=seed)
    for _ in range(steps):
        theirs, _ = sides.step()
        if theirs:
            pub.publish(v["kv_events"].KVEventBatch(ts=time.time(), events=theirs))
    pub.shutdown()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sub.poll(200):
        pass
    sub.save(path)
    sub.close()
    print(f"wrote {path}: {sub.num_events} events in {len(sub.entries)} batches")


if __name__ == "__main__":
    record(sys.argv[1])
