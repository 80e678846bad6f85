"""The KV-cache manager: sequences, block tables, sharing and copy-on-write (3.3, 3.4).

It owns one `BlockPool` and one `BlockTable` per live sequence, and it is the only
thing that changes them. Its outputs are what the kernels consume:

    block_table(seq)  logical -> physical ids        (paged_attention's block_tables row)
    slot_mapping(seq) flat slot of every token        (write_kv's slot_mapping)
    drain_copies()    (src, dst) pairs to copy         (copy_blocks, for copy-on-write)

Sharing (beam search, parallel sampling): `fork` gives the child the parent's table
and adds one to every block's count. A block goes back to the free list only when
the last owner frees it. When an owner appends into a *partly filled, shared* last
block, it first gets a private copy: a new block, plus a (src, dst) pair for the
copy kernel. Full shared blocks are never written again, so they stay shared.

Every operation is all-or-nothing: it works out how many blocks it needs *before*
touching anything, and raises `OutOfBlocks` (or `SequenceError`/`BlockError`) with
the state untouched. Each public call is one trace step (see `trace.py`).

Invariants (`check_invariants`), on top of the pool's own:
    * every table has ceil(num_tokens / block_size) entries;
    * the sum of all ref counts equals the number of table entries that name a block;
    * no table names a free block, and no table names the same block twice.
"""

from __future__ import annotations

import numpy as np

from . import trace as tr
from .block_pool import BlockPool
from .block_table import NULL_BLOCK, BlockTable, blocks_needed
from .errors import OutOfBlocks, SequenceError, count_arg as _count
from .usage import Usage


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, *, free_order: str = "lifo",
                 trace: bool = True, snapshots: bool = True):
        self.pool = BlockPool(num_blocks, block_size, free_order)
        self.block_size = block_size
        self._tables: dict[object, BlockTable] = {}  # live sequences, in admission order
        self._copies: list[tuple[int, int]] = []  # copy-on-write pairs awaiting the kernel
        self.trace = tr.Trace(snapshots) if trace else None  # None: tracing off, for speed
        self.step = 0  # number of completed public steps
        # Called as evictor(manager, blocks_short, protect) when an allocation finds too few
        # free blocks (the chapter's evict_blocks()). It may free blocks of sequences not in
        # `protect` (preempt, swap out, drop cached blocks); the request is then re-checked.
        self.evictor = None
        self._step_events = 0  # index in trace.events where the current step began
        if self.trace is not None and snapshots:
            self.trace.snapshots.append(self.snapshot(caption=(
                f"a pool of {num_blocks} blocks x {block_size} tokens, all free")))

    # ---- queries -------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    def seq_ids(self) -> list:
        return list(self._tables)

    def __contains__(self, seq_id) -> bool:
        return seq_id in self._tables

    def block_table(self, seq_id) -> BlockTable:
        """A copy of the sequence's table: changing it does not change the manager."""
        return self._table(seq_id).copy()

    def num_tokens(self, seq_id) -> int:
        return self._table(seq_id).num_tokens

    def slot_mapping(self, seq_id) -> np.ndarray:
        return self._table(seq_id).slot_mapping()

    def can_allocate(self, num_tokens: int) -> bool:
        """Would a new sequence of `num_tokens` tokens fit in the free blocks right now?"""
        return blocks_needed(_count("num_tokens", num_tokens), self.block_size) <= self.pool.num_free

    def drain_copies(self) -> list[tuple[int, int]]:
        """Return the pending copy-on-write (src, dst) pairs and forget them."""
        out, self._copies = self._copies, []
        return out

    def usage(self) -> Usage:
        fill = self._block_fill()
        stored = sum(fill)
        used = self.pool.num_used
        return Usage(self.num_blocks, used, self.pool.num_free, stored,
                     sum(t.num_tokens for t in self._tables.values()),
                     used * self.block_size - stored)

    # ---- operations ------------------------------------------------------------
    def add_sequence(self, seq_id, num_tokens: int) -> np.ndarray:
        """Admit a sequence with a prompt of `num_tokens` tokens.

        Returns the prompt's slot mapping (int64 array), ready for `write_kv`."""
        try:
            if seq_id in self._tables:
                raise SequenceError(f"sequence {seq_id!r} already exists")
        except TypeError:
            raise SequenceError(f"sequence id must be hashable, got {seq_id!r}") from None
        num_tokens = _count("num_tokens", num_tokens)
        need = blocks_needed(num_tokens, self.block_size)
        if need > self.pool._num_free:
            self._reserve(need, seq_id, f"add_sequence({num_tokens} tokens)")
        table = BlockTable(self.block_size, num_tokens=num_tokens)
        table.blocks = self.pool.allocate_many(need)  # a fresh list: no copy needed
        self._tables[seq_id] = table
        if self.trace is not None:
            self._emit(tr.SequenceAdded(self.step + 1, seq_id, num_tokens))
            for logical, b in enumerate(table.blocks):
                self._emit(tr.BlockAllocated(self.step + 1, seq_id, b, logical))
        self._end_step()
        return table.slot_mapping()

    def append_tokens(self, seq_id, n: int = 1) -> list[int]:
        """Append `n` tokens to a sequence. Returns the slots they are written to."""
        table = self._table(seq_id)
        n = _count("n", n)
        if n == 0:
            return []
        bs, ref = self.block_size, self.pool._ref
        cow = table.num_tokens % bs != 0 and ref[table.blocks[-1]] > 1
        total = blocks_needed(table.num_tokens + n, bs)  # table length after the append
        need = total - len(table.blocks) + cow
        if need > self.pool._num_free:
            self._reserve(need, seq_id, f"append_tokens({n})")
        if cow:
            self._copy_on_write(seq_id, table)
        for logical in range(len(table.blocks), total):
            self._grow(seq_id, table, logical)
        first = table.num_tokens
        table.num_tokens += n
        blocks = table.blocks
        slots = [blocks[p // bs] * bs + p % bs for p in range(first, first + n)]
        self._emit(tr.TokensAppended(self.step + 1, seq_id, first, tuple(slots)), first=True)
        self._end_step()
        return slots

    def decode_step(self, seq_ids, with_slots: bool = True) -> list[int] | None:
        """Append one token to each listed sequence: one scheduler iteration.

        A sequence listed k times gets k tokens. The same as calling
        `append_tokens(s, 1)` for each entry (with tracing on, that is exactly what it
        does, one trace step each); with tracing off it is one tight loop. All or
        nothing for the whole batch. Returns the new tokens' slots, or None when
        `with_slots` is False.
        """
        tables = self._tables
        try:
            batch = list(map(tables.__getitem__, seq_ids))  # also proves every id exists
        except (KeyError, TypeError):
            missing = next(s for s in seq_ids if s not in tables)
            raise SequenceError(f"unknown sequence {missing!r}") from None
        pool, bs = self.pool, self.block_size
        if pool._num_free < len(batch):  # each entry needs at most one block: count exactly
            self._reserve(self._decode_need(seq_ids), frozenset(seq_ids),
                          f"decode_step({len(batch)} seqs)")
        if self.trace is not None:
            slots = [slot for s in seq_ids for slot in self.append_tokens(s, 1)]
            return slots if with_slots else None
        self.step += 1
        if not pool._num_shared and not with_slots:  # the common case: nothing shared
            full = []  # tables whose last block is full: one new block each, in one splice
            for t in batch:
                pos = t.num_tokens
                if pos % bs == 0:
                    full.append(t.blocks)
                t.num_tokens = pos + 1
            if full:
                for blocks, b in zip(full, pool.allocate_many(len(full))):
                    blocks.append(b)
            return None
        slots, ref, allocate = [], pool._ref, pool.allocate
        for s, t in zip(seq_ids, batch):
            pos = t.num_tokens
            off = pos % bs
            if off == 0:
                t.blocks.append(allocate())
            elif pool._num_shared and ref[t.blocks[-1]] > 1:
                self._copy_on_write(s, t)
            t.num_tokens = pos + 1
            slots.append(t.blocks[-1] * bs + off)
        return slots if with_slots else None

    def _decode_need(self, seq_ids) -> int:
        """Blocks a decode step needs: a new block at a boundary, a copy for a shared tail."""
        need, pos_after, ref, bs = 0, {}, self.pool._ref, self.block_size
        for s in seq_ids:
            t = self._tables[s]
            pos = pos_after.get(s, t.num_tokens)
            if pos % bs == 0:
                need += 1
            elif s not in pos_after and ref[t.blocks[-1]] > 1:
                need += 1  # only the first write into a shared tail copies it
            pos_after[s] = pos + 1
        return need

    def restore_sequences(self, tables: dict) -> dict:
        """Re-admit sequences whose KV comes back from elsewhere (a swap-in), as one step.

        `tables` maps seq_id -> (labels, num_tokens), one label per logical block
        (NULL_BLOCK for a dropped one). Entries with the same label get the same new
        physical block, so a prefix the sequences shared before stays shared. All or
        nothing. Returns {label: physical block}, for the copy that brings data back.
        """
        for seq_id, (labels, num_tokens) in tables.items():
            if seq_id in self._tables:
                raise SequenceError(f"sequence {seq_id!r} already exists")
            if len(labels) != blocks_needed(_count("num_tokens", num_tokens), self.block_size):
                raise ValueError(f"seq {seq_id!r}: {len(labels)} labels for {num_tokens} tokens")
        distinct = {b for labels, _ in tables.values() for b in labels if b != NULL_BLOCK}
        if len(distinct) > self.pool.num_free:
            self._reserve(len(distinct), frozenset(tables), f"restore_sequences({len(tables)} seqs)")
        placed, step = {}, self.step + 1
        for seq_id, (labels, num_tokens) in tables.items():
            table = BlockTable(self.block_size, num_tokens=num_tokens)
            self._tables[seq_id] = table
            self._emit(tr.SequenceAdded(step, seq_id, num_tokens))
            for logical, label in enumerate(labels):
                if label == NULL_BLOCK:
                    table.blocks.append(NULL_BLOCK)
                elif label in placed:
                    b = placed[label]
                    table.blocks.append(b)
                    self._emit(tr.BlockShared(step, seq_id, b, self.pool.incref(b)))
                else:
                    b = placed[label] = self.pool.allocate()
                    table.blocks.append(b)
                    self._emit(tr.BlockAllocated(step, seq_id, b, logical))
        self._end_step()
        return placed

    def fork(self, parent_id, child_id) -> None:
        """The child shares every block of the parent; each block's count goes up by one."""
        parent = self._table(parent_id)
        if child_id in self._tables:
            raise SequenceError(f"sequence {child_id!r} already exists")
        self._tables[child_id] = parent.copy()
        self._emit(tr.SequenceForked(self.step + 1, parent_id, child_id))
        for b in parent.blocks:
            if b != NULL_BLOCK:
                count = self.pool.incref(b)
                self._emit(tr.BlockShared(self.step + 1, child_id, b, count))
        self._end_step()

    def free_sequence(self, seq_id) -> None:
        """Release a finished sequence's blocks, last block first."""
        table = self._table(seq_id)
        del self._tables[seq_id]
        if self.trace is None:
            blocks = table.blocks
            if NULL_BLOCK in blocks:
                blocks = [b for b in blocks if b != NULL_BLOCK]
            self.pool.release(reversed(blocks))
            self.step += 1
            return
        self._emit(tr.SequenceFreed(self.step + 1, seq_id, table.num_tokens))
        for b in reversed(table.blocks):
            if b != NULL_BLOCK:
                count = self.pool.free(b)
                self._emit(tr.BlockReleased(self.step + 1, seq_id, b, count))
        self._end_step()

    # ---- internals ---------------------------------------------------------------
    def _table(self, seq_id) -> BlockTable:
        try:
            return self._tables[seq_id]
        except (KeyError, TypeError):
            raise SequenceError(f"unknown sequence {seq_id!r}") from None

    def _reserve(self, need: int, seq_id, what: str) -> None:
        """Raise OutOfBlocks (recording the refusal) unless `need` blocks are free."""
        available = self.pool.num_free
        if need <= available:
            return
        if self.evictor is not None:
            protect = set(seq_id) if isinstance(seq_id, (set, frozenset)) else {seq_id}
            self.evictor(self, need - available, protect)
            available = self.pool.num_free
            if need <= available:
                return
        if isinstance(seq_id, frozenset):
            seq_id = "batch"
        self._emit(tr.AllocationFailed(self.step + 1, seq_id, what, need, available))
        self._end_step()
        raise OutOfBlocks(need, available, f"seq {seq_id!r} {what}")

    def _grow(self, seq_id, table: BlockTable, logical: int) -> None:
        b = self.pool.allocate()
        table.blocks.append(b)
        if self.trace is not None:
            self._emit(tr.BlockAllocated(self.step + 1, seq_id, b, logical))

    def _copy_on_write(self, seq_id, table: BlockTable) -> None:
        src = table.blocks[-1]
        before = self.pool._ref[src]
        dst = self.pool.allocate()
        after = self.pool.free(src)  # the writer lets go of the shared block (count >= 1 stays)
        table.blocks[-1] = dst
        self._copies.append((src, dst))
        if self.trace is not None:
            step = self.step + 1
            self._emit(tr.CopyOnWrite(step, seq_id, src, dst, before))
            self._emit(tr.BlockAllocated(step, seq_id, dst, len(table.blocks) - 1))
            self._emit(tr.BlockReleased(step, seq_id, src, after))

    def _emit(self, event: tr.Event, first: bool = False) -> None:
        if self.trace is not None:
            events = self.trace.events
            events.insert(self._step_events, event) if first else events.append(event)

    def _end_step(self) -> None:
        self.step += 1
        t = self.trace
        if t is None:
            return
        if t.keep_snapshots:
            t.snapshots.append(self.snapshot(t.events[self._step_events:]))
        self._step_events = len(t.events)

    def _block_fill(self) -> list[int]:
        fill, bs = [0] * self.num_blocks, self.block_size
        for t in self._tables.values():
            for i, b in enumerate(t.blocks):
                if b != NULL_BLOCK:
                    fill[b] = max(fill[b], min(bs, t.num_tokens - i * bs))
        return fill

    def snapshot(self, events=(), caption: str | None = None) -> tr.Snapshot:
        """The whole state as frozen data (for pictures, the tour and time travel)."""
        events = tuple(events)
        return tr.Snapshot(
            step=self.step,
            caption=caption if caption is not None else tr.describe(events),
            events=events,
            num_blocks=self.num_blocks,
            block_size=self.block_size,
            free_list=tuple(self.pool.free_list()),
            ref_counts=tuple(self.pool._ref),
            block_fill=tuple(self._block_fill()),
            sequences=tuple(tr.SeqState(s, tuple(t.blocks), t.num_tokens)
                            for s, t in self._tables.items()),
            pending_copies=tuple(self._copies),
        )

    def check_invariants(self) -> None:
        self.pool.check_invariants()
        ref = self.pool._ref
        references = 0
        for seq_id, table in self._tables.items():
            table.check()
            named = [b for b in table.blocks if b != NULL_BLOCK]
            assert len(set(named)) == len(named), f"seq {seq_id!r} names a block twice: {named}"
            for b in named:
                assert ref[b] > 0, f"seq {seq_id!r} names block {b}, which is free"
            references += len(named)
        assert sum(ref) == references, (
            f"ref counts sum to {sum(ref)} but tables hold {references} references")
