"""What a KV-cache manager holds, and every way to read it (3.3, 3.4).

`ManagerState` owns the pool, one `BlockTable` per live sequence, the pending
copy-on-write pairs and the trace sink, and answers every query about them: tables,
slot mappings, the blocks a decode step would take, usage, snapshots and the
invariants. It changes nothing except by closing a step; the operations that change
state live in `KVCacheManager` (manager.py), which builds on this class.

Invariants (`check_invariants`), on top of the pool's own:
    * every table has ceil(num_tokens / block_size) entries;
    * the sum of all ref counts equals the number of table entries that name a block;
    * no table names a free block, and no table names the same block twice;
    * only a manager that drops blocks (a sliding window) holds NULL_BLOCK entries.
"""

from __future__ import annotations

import numpy as np

from . import trace as tr
from .batch import decode_need
from .block_pool import BlockPool
from .block_table import NULL_BLOCK, BlockTable, blocks_needed
from .errors import SequenceError
from .errors import count_arg as _count
from .usage import Usage, block_fill


class ManagerState:
    """The pool, the tables, the pending copies and the trace; the queries on them."""

    drops_blocks = False  # may a table hold NULL_BLOCK entries? (a sliding window: yes)

    def __init__(self, num_blocks: int, block_size: int, *, free_order: str = "lifo",
                 trace: bool = True, snapshots: bool = True, pool: BlockPool | None = None):
        for name, flag in (("trace", trace), ("snapshots", snapshots)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
        if pool is None:
            pool = BlockPool(num_blocks, block_size, free_order)
        elif not isinstance(pool, BlockPool):
            raise TypeError(f"pool must be a BlockPool, got {type(pool).__name__}")
        elif (pool.num_blocks, pool.block_size) != (num_blocks, block_size):
            raise ValueError(f"pool has {pool.num_blocks} blocks x {pool.block_size} tokens, "
                             f"not {num_blocks!r} x {block_size!r}")
        elif pool.num_free_blocks != pool.num_blocks:
            raise ValueError("pool must start with every block free")
        self.pool = pool
        self.block_size = pool.block_size
        self._tables: dict[object, BlockTable] = {}  # live sequences, in admission order
        self._copies: list[tuple[int, int]] = []  # copy-on-write pairs awaiting the kernel
        self._sink = tr.Trace(snapshots) if trace else tr.NULL_SINK
        self._tracing = trace  # build events at all? (False: nothing is built)
        # Can a step end by just counting it? (no trace, and no subclass hooks _end_step)
        self._quiet_steps = not trace and type(self)._end_step is ManagerState._end_step
        self.step = 0  # number of completed public steps
        # Called as reclaimer(manager, blocks_short, protect) when an allocation finds too few
        # free blocks. It may free blocks of sequences not in `protect` (preempt, swap out);
        # the request is then planned again.
        self.reclaimer = None
        if trace and snapshots:
            self._sink.snapshots.append(self.snapshot())  # step 0: the pool as created

    @property
    def trace(self) -> tr.Trace | None:
        """The recorded history, or None when tracing is off."""
        return self._sink if self._tracing else None

    # ---- queries -------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def seq_ids(self) -> list:
        return list(self._tables)

    def __contains__(self, seq_id) -> bool:
        try:
            return seq_id in self._tables
        except TypeError:
            return False

    def block_table(self, seq_id) -> BlockTable:
        """A copy of the sequence's table: changing it does not change the manager."""
        return self._table(seq_id).copy()

    def num_tokens(self, seq_id) -> int:
        return self._table(seq_id).num_tokens

    def num_computed_tokens(self, seq_id) -> int:
        """Tokens whose KV is computed: all of them here (a prefix cache's lookahead is not)."""
        return self._table(seq_id).num_tokens

    def slot_mapping(self, seq_id) -> np.ndarray:
        return self._table(seq_id).slot_mapping()

    def get_num_common_prefix_blocks(self, request_id, num_running_requests: int) -> int:
        """Leading blocks of `request_id` that every one of the `num_running_requests`
        running requests holds: a block's count equals that number (v1, for cascade
        attention, which computes attention over such a shared prefix once)."""
        table = self._table(request_id)
        n = _count("num_running_requests", num_running_requests, 1)
        common = 0
        for b in table.blocks:
            if b == NULL_BLOCK or self.pool.ref_count(b) != n:
                break
            common += 1
        return common

    def can_allocate(self, num_tokens: int) -> bool:
        """Would a new sequence of `num_tokens` tokens fit in the free blocks right now?"""
        need = blocks_needed(_count("num_tokens", num_tokens), self.block_size)
        return need <= self.pool.num_free_blocks

    def blocks_for_decode(self, seq_ids) -> int:
        """Free blocks `decode_step(seq_ids)` needs: one at each block boundary, one for
        each first write into a shared, partly filled last block (copy-on-write)."""
        return decode_need(self._batch(seq_ids)[1], self.pool, self.block_size)

    def peak_blocks(self, prompt_len: int, total_len: int, max_chunk: int | None = None) -> int:
        """The most blocks one sequence holds at once while growing from prompt_len to total_len
        slots, `max_chunk` slots a step at most (v1's chunked prefill; None: a whole prompt in
        one step, as v0 admits it). Full attention holds every block, whatever the chunk."""
        if max_chunk is not None:
            _count("max_chunk", max_chunk)
        return blocks_needed(max(_count("prompt_len", prompt_len), _count("total_len", total_len)),
                             self.block_size)

    def drain_copies(self) -> list[tuple[int, int]]:
        """Return the pending copy-on-write (src, dst) pairs and forget them."""
        out, self._copies = self._copies, []
        return out

    def usage(self) -> Usage:
        return Usage.of(self._tables.values(), self.pool)

    # ---- lookups ---------------------------------------------------------------
    def _table(self, seq_id) -> BlockTable:
        try:
            return self._tables[seq_id]
        except (KeyError, TypeError):
            raise SequenceError(f"unknown sequence {seq_id!r}") from None

    def _check_new(self, seq_id) -> None:
        try:
            exists = seq_id in self._tables
        except TypeError:
            raise TypeError(f"sequence id must be hashable, got {type(seq_id).__name__}") from None
        if exists:
            raise SequenceError(f"sequence {seq_id!r} already exists")

    def _batch(self, seq_ids) -> tuple[list, list]:
        """(seq_ids as a list, their tables); a generator is read once, a string is refused."""
        if isinstance(seq_ids, (str, bytes)) or not hasattr(seq_ids, "__iter__"):
            raise TypeError(f"seq_ids must be an iterable of sequence ids, got "
                            f"{type(seq_ids).__name__}")
        if type(seq_ids) is not list:
            seq_ids = list(seq_ids)
        try:
            return seq_ids, list(map(self._tables.__getitem__, seq_ids))
        except (KeyError, TypeError):
            missing = next(s for s in seq_ids if s not in self)
            raise SequenceError(f"unknown sequence {missing!r}") from None

    # ---- steps, snapshots, invariants ----------------------------------------------
    def _emit(self, kind, *fields) -> None:
        """Record `kind(step, *fields)` in the current step; nothing is built when tracing is
        off."""
        if self._tracing:
            self._sink.emit(kind(self.step + 1, *fields))

    def _end_step(self) -> None:
        self.step += 1
        if self._tracing:
            self._sink.end_step(self.snapshot)

    def snapshot(self, events=(), caption: str | None = None) -> tr.Snapshot:
        """The whole state as frozen data (for pictures, the tour and time travel)."""
        events = tuple(events)
        return tr.Snapshot(
            step=self.step,
            custom_caption=caption,
            events=events,
            num_blocks=self.num_blocks,
            block_size=self.block_size,
            free_list=tuple(self.pool.free_list()),
            ref_counts=tuple(self.pool.ref_counts()),
            block_fill=tuple(block_fill(self._tables.values(), self.num_blocks, self.block_size)),
            sequences=tuple(tr.SeqState(s, tuple(t.blocks), t.num_tokens)
                            for s, t in self._tables.items()),
            pending_copies=tuple(self._copies),
        )

    def check_invariants(self) -> None:
        references = self.table_references()
        if self.shares_pool:  # the owner of the pool sums every manager's references
            return
        self.pool.check_invariants()
        ref = self.pool.ref_counts()
        assert sum(ref) == references, (
            f"ref counts sum to {sum(ref)} but tables hold {references} references")

    shares_pool = False  # True for a KV cache group of a hybrid manager (policies/hybrid.py)

    def table_references(self) -> int:
        """Check every table against the pool; the number of block references they hold."""
        ref = self.pool.ref_counts()
        references = 0
        for seq_id, table in self._tables.items():
            table.check()
            named = [b for b in table.blocks if b != NULL_BLOCK]
            assert len(set(named)) == len(named), f"seq {seq_id!r} names a block twice: {named}"
            assert self.drops_blocks or len(named) == len(table.blocks), (
                f"seq {seq_id!r} holds NULL_BLOCK but nothing here drops blocks")
            for b in named:
                assert ref[b] > 0, f"seq {seq_id!r} names block {b}, which is free"
            references += len(named)
        return references
