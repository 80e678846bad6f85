"""The hybrid allocator: full-attention and sliding-window KV cache groups over one pool (v1).

Gemma-style models interleave full-attention and sliding-window layers. vLLM v1 gives each
kind a *KV cache group* with its own block table per request, all over one `BlockPool`,
kept in step by `HybridKVCacheCoordinator` (v1 kv_cache_coordinator.py):

    lookup     the hit is *aligned*: the full group finds k blocks from the start, the
               window group searches within those k, and the full hit is cut to the
               window's length.
    allocate   all or nothing over both groups; a short pool returns None. The window
               group's hits are protected while the full group allocates (vLLM #33775).
    drop       the window group frees what its next query never reads; the full keeps all.

Each group is a manager of its own over one `CachingBlockPool`, chaining from its own root.
`snapshot()` shows a request's two tables as "A:full" and "A:window" (draw/hybrid.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .. import trace as tr
from ..block_table import BlockTable
from ..errors import OutOfBlocks, SequenceError, bool_arg, count_arg, token_ids_arg
from ..kv_events import BlockStored
from ..manager import SeqId
from ..usage import block_fill
from .cache_pool import CachingBlockPool
from .cache_stats import CacheStats
from .prefix_cache import ComputedBlocks, PrefixCachingManager
from .sliding_window_cache import SlidingWindowPrefixCachingManager

GROUPS = ("full", "window")  # group 0, group 1
Got = tuple[list[int], list[int]]  # the blocks a call allocated: (full group, window group)


@dataclass(frozen=True)
class HybridComputedBlocks:
    """What `HybridManager.get_computed_blocks` found: one aligned hit per group."""

    token_ids: tuple[int, ...]  # the lookup's token ids
    # (full-attention hit blocks, sliding-window hit blocks), equally long
    blocks: tuple[tuple[int, ...], ...]
    num_tokens: int  # tokens both groups reuse
    per_group: tuple[ComputedBlocks, ...] = ()  # the ComputedBlocks each group checks again


class HybridManager:
    """Two KV cache groups (full attention, sliding window) over one pool (see module doc)."""

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        *,
        sliding_window: int,
        eviction: str = "lru",
        enable_kv_cache_events: bool = False,
        trace: bool = True,
    ) -> None:
        bool_arg("trace", trace)
        self.stats = CacheStats()
        self.pool = CachingBlockPool(
            num_gpu_blocks, block_size, eviction, self.stats, enable_kv_cache_events
        )
        self.block_size = self.pool.block_size
        self.full = PrefixCachingManager(num_gpu_blocks, block_size, pool=self.pool, trace=False)
        self.window = SlidingWindowPrefixCachingManager(
            num_gpu_blocks,
            block_size,
            sliding_window=sliding_window,
            pool=self.pool,
            group_idx=1,
            trace=False,
        )
        # one request is one lookup (v1 records one PrefixCacheStats entry per request): the
        # full group records it in the pool's stats; the window group's go elsewhere
        self.window.stats = CacheStats()
        self.groups = (self.full, self.window)
        self.step = 0
        self._short = 0  # free blocks the last refused allocate_slots needed
        self._trace = tr.Trace() if trace else None
        if self._trace is not None:
            said = (
                f"a pool of {num_gpu_blocks} blocks x {block_size} tokens shared by two KV cache "
                f"groups: full attention and a sliding window of {sliding_window} tokens"
            )
            self._trace.snapshots.append(self.snapshot(caption=said))

    # ---- queries -----------------------------------------------------------------------
    @property
    def num_gpu_blocks(self) -> int:
        return self.pool.num_gpu_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def trace(self) -> tr.Trace | None:
        return self._trace

    def seq_ids(self) -> list[SeqId]:
        return self.full.seq_ids()

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self.full

    def block_tables(self, seq_id: SeqId) -> tuple[BlockTable, BlockTable]:
        """(full-attention table, sliding-window table) of a sequence, as copies."""
        return self.full.block_table(seq_id), self.window.block_table(seq_id)

    def num_tokens(self, seq_id: SeqId) -> int:
        return self.full.num_tokens(seq_id)

    def num_computed_tokens(self, seq_id: SeqId) -> int:
        return self.full.num_computed_tokens(seq_id)

    def peak_blocks(self, prompt_len: int, total_len: int, max_chunk: int | None = None) -> int:
        """The most blocks one sequence holds at once: each group's peak, over one pool."""
        return sum(g.peak_blocks(prompt_len, total_len, max_chunk) for g in self.groups)

    def get_num_common_prefix_blocks(
        self, request_id: SeqId, num_running_requests: int
    ) -> list[int]:
        """One count per group, as v1's KVCacheManager returns (the window group: 0)."""
        return [
            g.get_num_common_prefix_blocks(request_id, num_running_requests) for g in self.groups
        ]

    def take_events(self) -> list[Any]:
        return self.pool.take_events()

    # ---- the v1 calls ------------------------------------------------------------------
    def get_computed_blocks(
        self, token_ids: Any, *, cache_salt: Any = None, lora_id: Any = None
    ) -> HybridComputedBlocks:
        """The aligned hit of both groups, capped at num_tokens - 1 (see module doc)."""
        tokens = token_ids_arg("token_ids", token_ids)
        keys = [g.extra_keys(cache_salt, lora_id) for g in self.groups]
        cap = max(len(tokens) - 1, 0) // self.block_size
        full = self.full._match(tokens, cap, keys[0])
        window = self.window._match(tokens, len(full), keys[1])
        full = full[: len(window)]
        n = len(full) * self.block_size
        per_group = tuple(
            ComputedBlocks(tokens, tuple(hits), n, k)
            for hits, k in zip((full, window), keys, strict=True)
        )
        return HybridComputedBlocks(tokens, (tuple(full), tuple(window)), n, per_group)

    def allocate_slots(
        self,
        seq_id: SeqId,
        num_new_tokens: int,
        num_lookahead_tokens: int = 0,
        new_token_ids: Any = None,
        computed: HybridComputedBlocks | None = None,
        *,
        cache_salt: Any = None,
        lora_id: Any = None,
        preempted: bool = False,
    ) -> Got | None:
        """Slots in both groups, all or nothing; (full blocks, window blocks) or None."""
        n = count_arg("num_new_tokens", num_new_tokens)
        ahead = count_arg("num_lookahead_tokens", num_lookahead_tokens)
        queue = self.pool.kv_event_queue
        start = 0 if queue is None else len(queue)
        if seq_id in self.full:
            if computed is not None or cache_salt is not None or lora_id is not None or preempted:
                raise ValueError(
                    f"sequence {seq_id!r} is running; computed blocks, extra keys and "
                    f"preempted are for new ones"
                )
            got = self._extend(seq_id, n, ahead, new_token_ids)
        else:
            got = self._admit(
                seq_id, n, ahead, new_token_ids, computed, (cache_salt, lora_id, preempted)
            )
        if queue is not None:
            # v1 allocates every group's new blocks (evicting) before it caches any group's
            # full blocks (allocate_new_blocks, then cache_blocks): a call's BlockRemoved
            # events come before its BlockStored ones (tests/vllm_oracle)
            events = queue[start:]
            stored = [e for e in events if isinstance(e, BlockStored)]
            queue[start:] = [e for e in events if not isinstance(e, BlockStored)] + stored
        return got

    def _extend(self, seq_id: SeqId, n: int, ahead: int, new_token_ids: Any) -> Got | None:
        new = None if new_token_ids is None else token_ids_arg("new_token_ids", new_token_ids)
        for g in self.groups:  # refused as PrefixCachingManager refuses, before counting
            g._check_extend(seq_id, n, new, None)
        self.window._before_extend(seq_id)  # v1 frees skipped blocks before counting
        need = sum(g.blocks_to_extend(seq_id, n, ahead) for g in self.groups)
        if need > self.pool.num_free_blocks:
            self._short = need
            return None
        got_full = self.full.allocate_slots(seq_id, n, ahead, new)
        got_window = self.window.allocate_slots(seq_id, n, ahead, new)
        assert got_full is not None and got_window is not None, "the groups' need was miscounted"
        return self._after("extends", seq_id, (got_full, got_window))

    def _admit(
        self,
        seq_id: SeqId,
        n: int,
        ahead: int,
        new_token_ids: Any,
        computed: Any,
        extra: tuple[Any, Any, bool],
    ) -> Got | None:
        cache_salt, lora_id, preempted = extra
        self.full._check_new(seq_id)
        if new_token_ids is None:
            raise ValueError(f"new sequence {seq_id!r} needs new_token_ids (its prompt)")
        keys = [g.extra_keys(cache_salt, lora_id) for g in self.groups]
        if computed is None:
            tokens = token_ids_arg("new_token_ids", new_token_ids)
            per_group: list[Any] = [None, None]
            hits: tuple[tuple[int, ...], ...] = ((), ())
        elif (
            not isinstance(computed, HybridComputedBlocks)
            or len(computed.per_group) != 2
            or not all(isinstance(c, ComputedBlocks) for c in computed.per_group)
        ):
            raise TypeError(
                f"computed must come from HybridManager.get_computed_blocks, got {computed!r}"
            )
        else:
            tokens = (
                computed.token_ids
                if new_token_ids is computed.token_ids
                else token_ids_arg("new_token_ids", new_token_ids)
            )
            per_group, hits = list(computed.per_group), computed.blocks
            if (
                hits != tuple(c.blocks for c in per_group)
                or len(set(map(len, hits))) != 1
                or any(c.num_tokens != computed.num_tokens for c in per_group)
            ):
                raise ValueError("computed blocks are not one aligned hit of both groups")
            for g, c, k in zip(self.groups, per_group, keys, strict=True):
                g._check_computed(c, tokens, list(c.blocks), tokens is c.token_ids, k)
        done = computed.num_tokens if computed is not None else 0
        if done + n > len(tokens):
            raise ValueError(f"{done} cached + {n} new tokens exceed the {len(tokens)} known")
        need = sum(
            g._blocks_to_take(list(h), done + n + ahead)
            for g, h in zip(self.groups, hits, strict=True)
        )
        if need > self.pool.num_free_blocks:
            self._short = need
            return None
        extra_keys = dict(cache_salt=cache_salt, lora_id=lora_id)
        with self.pool.protecting(b for b in hits[1] if b >= 0):
            got_full = self.full.allocate_slots(
                seq_id, n, ahead, tokens, per_group[0], preempted=preempted, **extra_keys
            )
        got_window = self.window.allocate_slots(
            seq_id, n, ahead, tokens, per_group[1], **extra_keys
        )
        assert got_full is not None and got_window is not None, "the groups' need was miscounted"
        return self._after("arrives", seq_id, (got_full, got_window))

    # ---- the playground's calls --------------------------------------------------------
    def add_sequence(self, seq_id: SeqId, num_tokens: int, tokens: Any = None) -> Got:
        """Admit a prompt (ids default to 0, 1, ...) with its cache hit; OutOfBlocks if short."""
        self.full._check_new(seq_id)
        num_tokens = count_arg("num_tokens", num_tokens)
        ids = list(range(num_tokens)) if tokens is None else token_ids_arg("tokens", tokens)
        if len(ids) != num_tokens:
            raise ValueError(f"tokens has {len(ids)} entries but num_tokens is {num_tokens}")
        hit = self.get_computed_blocks(ids)
        got = self.allocate_slots(
            seq_id, num_tokens - hit.num_tokens, new_token_ids=ids, computed=hit
        )
        return self._or_refuse(got, seq_id, f"add_sequence({num_tokens} tokens)")

    def append_tokens(self, seq_id: SeqId, n: int = 1, token_ids: Any = None) -> Got:
        """`n` more tokens in both groups; a short pool as in add_sequence."""
        if seq_id not in self.full:
            raise SequenceError(f"unknown sequence {seq_id!r}")
        n = count_arg("n", n)
        if token_ids is not None:  # as PrefixCachingManager.append_tokens checks them
            token_ids = token_ids_arg("token_ids", token_ids, n)
        if not n:
            return [], []
        if self.full._known.get(seq_id) is None:
            token_ids = None  # ids of a sequence whose ids stopped being known are not hashed
        elif token_ids is None:
            token_ids = [self.full.num_tokens(seq_id) + i for i in range(n)]  # ids go on
        got = self.allocate_slots(seq_id, n, new_token_ids=token_ids)
        return self._or_refuse(got, seq_id, f"append_tokens({n})")

    def _or_refuse(self, got: Got | None, seq_id: SeqId, what: str) -> Got:
        if got is not None:
            return got
        self.step += 1
        if self._trace is not None:
            said = (
                f"seq {seq_id} {what} needs {self._short} free blocks in the two groups together "
                f"but only {self.pool.num_free_blocks} are free: OutOfBlocks, nothing changed"
            )
            self._trace.snapshots.append(self.snapshot(caption=said))
        raise OutOfBlocks(self._short, self.pool.num_free_blocks, f"seq {seq_id!r} {what}")

    def free_sequence(self, seq_id: SeqId) -> None:
        if seq_id not in self.full:
            raise SequenceError(f"unknown sequence {seq_id!r}")
        for g in self.groups:
            g.free_sequence(seq_id)
        self._after("finishes", seq_id, None)

    def reset_prefix_cache(self) -> bool:
        if not self.pool.reset():
            return False
        self._after("reset", None, None)
        return True

    def drain_copies(self) -> list[tuple[int, int]]:
        return []  # v1 shares blocks only through the cache: no copy-on-write

    # ---- steps, snapshots, invariants --------------------------------------------------
    def _after(self, what: str, seq_id: SeqId, got: Got | None) -> Got | None:
        self.step += 1
        if self._trace is not None:
            self._trace.snapshots.append(self.snapshot(caption=self._caption(what, seq_id)))
        return got

    def _caption(self, what: str, seq_id: SeqId) -> str:
        if what == "reset":
            return "reset_prefix_cache(): every cached block is forgotten"
        if what == "finishes":
            return f"seq {seq_id} finishes: both groups free its blocks (full blocks stay cached)"
        full, window = self.block_tables(seq_id)
        named = sum(1 for b in window if b >= 0)
        gone = len(window) - named  # null blocks: what the window group already dropped
        return (
            f"seq {seq_id} {what} ({full.num_tokens} tokens): the full-attention group "
            f"holds {len(full)} blocks, the sliding-window group {named} of {len(window)}"
            + (f" (the other {gone} fell out of its window)" if gone else "")
        )

    def snapshot(self, caption: str = "") -> tr.Snapshot:
        """Both groups' tables over the one pool: seq "A" shows as "A:full" and "A:window"."""
        tables = [
            (f"{s}:{name}", g._tables[s])
            for s in self.full.seq_ids()
            for name, g in zip(GROUPS, self.groups, strict=True)
        ]
        fill = block_fill([t for _, t in tables], self.num_gpu_blocks, self.block_size)
        return replace(  # the full group's snapshot shows the one pool and its cached blocks
            self.full.snapshot(caption=caption),
            step=self.step,
            block_fill=tuple(fill),
            sequences=tuple(tr.SeqState(name, tuple(t.blocks), t.num_tokens) for name, t in tables),
        )

    def check_invariants(self) -> None:
        """The pool's, each group's, and both groups' references summed; same sequences."""
        self.pool.check_invariants()
        references = sum(g.table_references() for g in self.groups)
        for g in self.groups:
            g.check_invariants()
        assert sum(self.pool.ref_counts()) == references, (
            f"ref counts sum to {sum(self.pool.ref_counts())} but the groups' tables hold "
            f"{references} references"
        )
        assert self.full.seq_ids() == self.window.seq_ids(), "the groups hold other sequences"
        for s in self.full.seq_ids():
            assert self.full.num_tokens(s) == self.window.num_tokens(s), (
                f"seq {s!r} has different lengths in the two groups"
            )
