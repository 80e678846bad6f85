"""The KV-cache manager: sequences, block tables, sharing and copy-on-write (3.3, 3.4).

It owns one `BlockPool` and one `BlockTable` per live sequence, and only it changes them.
The kernels consume `block_table(seq)`, `slot_mapping(seq)` and `drain_copies()`.
Sharing, fork and copy-on-write follow vLLM v0's block manager (v1 shares only full
blocks, through the prefix cache).

Every operation is all-or-nothing: it counts the blocks it needs before touching anything,
asking a `reclaimer` (the scheduler's preemption) to free others' blocks when short; a
request larger than the whole pool is refused without asking (as v1). Each public call is
one trace step (`trace.py`).

Invariants (`check_invariants`), on top of the pool's own:
    * every table has ceil(num_tokens / block_size) entries;
    * the sum of all ref counts equals the number of table entries that name a block;
    * no table names a free block, and no table names the same block twice;
    * only a manager that drops blocks (a sliding window) holds NULL_BLOCK entries.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, NamedTuple

import numpy as np

from . import trace as tr
from .block_pool import BlockPool
from .block_table import NULL_BLOCK, BlockTable, blocks_needed, restore_plan
from .errors import OutOfBlocks, SequenceError, bool_arg, token_ids_arg
from .errors import count_arg as _count
from .usage import Usage, block_fill

SeqId = Hashable  # a sequence (request) id: any hashable value
# (src, dst) copy-on-write pairs; reclaimer(manager, blocks_short, protect)
Reclaimer = Callable[["KVCacheManager", int, set[Hashable]], None]


class KVCacheManager:
    """The block manager: the pool, the tables, the pending copies and the trace."""

    drops_blocks = False  # may a table hold NULL_BLOCK entries? (a sliding window: yes)
    shares_pool = False  # True for a KV cache group of a hybrid manager (policies/hybrid.py)

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        *,
        free_order: str = "lifo",
        trace: bool = True,
        snapshots: bool = True,
        pool: BlockPool | None = None,
    ):
        bool_arg("trace", trace)
        bool_arg("snapshots", snapshots)
        if pool is None:
            pool = BlockPool(num_gpu_blocks, block_size, free_order)
        elif not isinstance(pool, BlockPool):
            raise TypeError(f"pool must be a BlockPool, got {type(pool).__name__}")
        elif (pool.num_gpu_blocks, pool.block_size) != (num_gpu_blocks, block_size):
            raise ValueError(
                f"pool has {pool.num_gpu_blocks} blocks x {pool.block_size} tokens, "
                f"not {num_gpu_blocks!r} x {block_size!r}"
            )
        elif pool.num_free_blocks != pool.num_gpu_blocks:
            raise ValueError("pool must start with every block free")
        self.pool = pool
        self.block_size = pool.block_size
        self._tables: dict[SeqId, BlockTable] = {}  # live sequences, in admission order
        self._copies: list[tuple[int, int]] = []  # copy-on-write pairs awaiting the kernel
        self._sink = tr.Trace(snapshots and trace)  # written to only while tracing
        self._tracing = trace  # build events at all? (False: nothing is built)
        # a step ends by just counting it: no trace, and no subclass hooks _end_step
        self._quiet_steps = not trace and type(self)._end_step is KVCacheManager._end_step
        self.step = 0  # number of completed public steps
        # may free blocks of sequences outside `protect` when an allocation is short
        self.reclaimer: Reclaimer | None = None
        if trace and snapshots:
            self._sink.snapshots.append(self.snapshot())  # step 0: the pool as created

    @property
    def trace(self) -> tr.Trace | None:
        """The recorded history, or None when tracing is off."""
        return self._sink if self._tracing else None

    # ---- queries -------------------------------------------------------------
    @property
    def num_gpu_blocks(self) -> int:
        return self.pool.num_gpu_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def seq_ids(self) -> list[SeqId]:
        return list(self._tables)

    def __contains__(self, seq_id: object) -> bool:
        try:
            return seq_id in self._tables
        except TypeError:
            return False

    def block_table(self, seq_id: SeqId) -> BlockTable:
        """A copy of the sequence's table: changing it does not change the manager."""
        return self._table(seq_id).copy()

    def num_tokens(self, seq_id: SeqId) -> int:
        return self._table(seq_id).num_tokens

    def num_computed_tokens(self, seq_id: SeqId) -> int:
        return self._table(seq_id).num_tokens

    def slot_mapping(self, seq_id: SeqId) -> np.ndarray:
        return self._table(seq_id).slot_mapping()

    def get_num_common_prefix_blocks(self, request_id: SeqId, num_running_requests: int) -> int:
        """Leading blocks of `request_id` whose count equals `num_running_requests`: the
        prefix every running request holds (v1, for cascade attention)."""
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

    def blocks_for_decode(self, seq_ids: Iterable[SeqId]) -> int:
        """Free blocks `decode_step(seq_ids)` needs (boundaries plus copy-on-writes)."""
        return decode_need(self._tables_of(self._id_list(seq_ids)), self.pool, self.block_size)

    def peak_blocks(self, prompt_len: int, total_len: int, max_chunk: int | None = None) -> int:
        """Most blocks one sequence holds growing from prompt_len to total_len slots,
        `max_chunk` a step (None: v0's whole prompt); full attention holds them all."""
        if max_chunk is not None:
            _count("max_chunk", max_chunk)
        return blocks_needed(
            max(_count("prompt_len", prompt_len), _count("total_len", total_len)), self.block_size
        )

    def drain_copies(self) -> list[tuple[int, int]]:
        """Return the pending copy-on-write (src, dst) pairs and forget them."""
        out, self._copies = self._copies, []
        return out

    def usage(self) -> Usage:
        return Usage.of(self._tables.values(), self.pool)

    # ---- operations ------------------------------------------------------------
    def add_sequence(
        self, seq_id: SeqId, num_tokens: int, *, with_slots: bool = True
    ) -> np.ndarray | None:
        """Admit a `num_tokens`-token prompt; its slot mapping (None without `with_slots`)."""
        self._check_new(seq_id)
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = _count("num_tokens", num_tokens)
        bool_arg("with_slots", with_slots)
        pool, bs = self.pool, self.block_size
        need = -(-num_tokens // bs)  # blocks_needed, both checked already
        if need > pool.num_free_blocks:
            self._reserve(need, {seq_id}, f"add_sequence({num_tokens} tokens)")
        table = BlockTable(bs, (), num_tokens)
        table.blocks = pool.allocate_many(need)  # a fresh list: no copy needed
        self._tables[seq_id] = table
        if self._tracing:
            self._emit(tr.SequenceAdded, seq_id, num_tokens)
            for logical, b in enumerate(table.blocks):
                self._emit(tr.BlockAllocated, seq_id, b, logical)
        if self._quiet_steps:
            self.step += 1
        else:
            self._end_step()
        return table.slot_mapping() if with_slots else None

    def append_tokens(self, seq_id: SeqId, n: int = 1, token_ids: Any = None) -> list[int]:
        """Append `n` tokens to a sequence; the slots they are written to."""
        try:
            table = self._tables[seq_id]
        except (KeyError, TypeError):
            raise SequenceError(f"unknown sequence {seq_id!r}") from None
        if token_ids is not None or type(n) is not int or n < 1:
            n = _count("n", n)
            if token_ids is not None:
                token_ids = token_ids_arg("token_ids", token_ids, n)
                self._before_tokens_appended([(seq_id, token_ids)])
            if not n:
                return []
        bs, blocks, pos = self.block_size, table.blocks, table.num_tokens
        off = pos % bs  # where the first new token lands in its block
        if (
            not off
            or (n > 1 and pos + n > len(blocks) * bs)
            or (self.pool.num_shared and self.pool.is_shared(blocks[-1]))
        ):
            self._make_room(seq_id, table, n)  # copy-on-write and new blocks, all or nothing
        table.num_tokens = pos + n
        if n == 1:
            slots = [blocks[pos // bs] * bs + off]
        else:
            slots = [blocks[p // bs] * bs + p % bs for p in range(pos, pos + n)]
        if token_ids is not None:
            self._on_tokens_appended(seq_id, pos, token_ids)
        if self._quiet_steps:  # nothing to record and no end-of-step hook: just count it
            self.step += 1
            return slots
        if self._tracing:
            self._sink.emit(tr.TokensAppended(self.step + 1, seq_id, pos, tuple(slots)), True)
        self._end_step()
        return slots

    def decode_step(
        self, seq_ids: Iterable[SeqId], with_slots: bool = True, token_ids: Any = None
    ) -> list[int] | None:
        """Append one token to each listed sequence (k times if listed k times), as one
        all-or-nothing step; the slots (None without `with_slots`)."""
        seq_ids = self._id_list(seq_ids)
        pool, bs = self.pool, self.block_size
        plan = None  # the common step plans nothing: no slots, no trace, no copies, room
        if (
            with_slots is not False
            or token_ids is not None
            or self._tracing
            or pool.num_shared
            or len(seq_ids) > pool.num_free_blocks
        ):
            plan = self._plan_decode(seq_ids, with_slots, token_ids)
        # the one pass; in the common step an unknown id stops it and _take_back undoes it
        takers = []  # tables whose next token starts a block, in entry order
        try:
            for t in plan.batch if plan is not None else map(self._tables.__getitem__, seq_ids):
                pos = t.num_tokens
                if not pos % bs:
                    takers.append(t)
                t.num_tokens = pos + 1
        except (KeyError, TypeError):
            self._take_back(seq_ids)
        new = pool.allocate_many(len(takers)) if takers else []
        for t, b in zip(takers, new, strict=True):
            t.blocks.append(b)
        if plan is None or plan.positions is None:  # no slots wanted, nothing to trace
            if self._quiet_steps:
                self.step += 1
            else:
                self._end_step()
            return None
        positions, batch = plan.positions, plan.batch
        slots = [t.blocks[p // bs] * bs + p % bs for t, p in zip(batch, positions, strict=True)]
        if plan.token_ids is not None:
            for s, p, token in zip(seq_ids, positions, plan.token_ids, strict=True):
                self._on_tokens_appended(s, p, (token,))
        if self._tracing:
            self._trace_decode(
                seq_ids, batch, positions, slots, plan.copied, zip(takers, new, strict=True)
            )
        self._end_step()
        return slots if with_slots else None

    def restore_sequences(
        self, tables: dict[SeqId, Any], prefix_state: Any = None
    ) -> dict[int, int]:
        """Re-admit swapped-in sequences, as one step; {label: new physical block}.
        `tables`: seq_id -> (labels, num_tokens); equal labels share one new block.
        `prefix_state`: seq_id -> `prefix_state(seq_id)` from before the free (v0)."""
        plan = restore_plan(tables, self.block_size, self.drops_blocks)
        for seq_id in plan:
            self._check_new(seq_id)
        states = self._restore_states(plan, prefix_state)
        distinct = {b for labels, _ in plan.values() for b in labels if b != NULL_BLOCK}
        if len(distinct) > self.pool.num_free_blocks:
            self._reserve(len(distinct), set(plan), f"restore_sequences({len(plan)} seqs)")
        fresh = iter(self.pool.allocate_many(len(distinct)))
        placed: dict[int, int] = {}
        for seq_id, (labels, num_tokens) in plan.items():
            table = self._tables[seq_id] = BlockTable(self.block_size, (), num_tokens)
            self._emit(tr.SequenceAdded, seq_id, num_tokens)
            for logical, label in enumerate(labels):
                if label == NULL_BLOCK:
                    b = NULL_BLOCK
                elif label in placed:
                    b = placed[label]
                    self._emit(tr.BlockShared, seq_id, b, self.pool.incref(b))
                else:
                    b = placed[label] = next(fresh)
                    self._emit(tr.BlockAllocated, seq_id, b, logical)
                table.blocks.append(b)
        for seq_id, state in states.items():
            self._restore_prefix_state(seq_id, state)
        self._end_step()
        return placed

    def prefix_state(self, seq_id: SeqId) -> Any:
        """What `restore_sequences` needs to go on hashing it after a swap (None here)."""
        self._table(seq_id)
        return None

    def fork(self, parent_id: SeqId, child_id: SeqId) -> None:
        """The child shares every block of the parent; each block's count goes up by one (v0)."""
        parent = self._table(parent_id)
        self._check_new(child_id)
        self._tables[child_id] = parent.copy()
        self._emit(tr.SequenceForked, parent_id, child_id)
        for b in parent.blocks:
            if b != NULL_BLOCK:
                count = self.pool.incref(b)
                self._emit(tr.BlockShared, child_id, b, count)
        self._end_step()

    def free_sequence(self, seq_id: SeqId) -> None:
        """Release a finished sequence's blocks, last block first."""
        table = self._table(seq_id)
        named = table.blocks[::-1]
        if self.drops_blocks and NULL_BLOCK in named:  # only such a manager holds NULL_BLOCK
            named = [b for b in named if b != NULL_BLOCK]
        self.pool.release(named)
        del self._tables[seq_id]
        if self._quiet_steps:
            self.step += 1
            return
        if self._tracing:
            self._emit(tr.SequenceFreed, seq_id, table.num_tokens)
            for b in named:
                self._emit(tr.BlockReleased, seq_id, b, self.pool.ref_count(b))
        self._end_step()

    # ---- hooks for subclasses ------------------------------------------------------
    def _before_tokens_appended(self, appends: list[tuple[SeqId, tuple[int, ...]]]) -> None:
        """Before a call given token ids changes anything; may raise."""

    def _on_tokens_appended(
        self, seq_id: SeqId, first_position: int, token_ids: tuple[int, ...]
    ) -> None:
        """Ids of tokens just placed at first_position.. (a prefix cache hashes blocks here)."""

    def _restore_states(
        self, plan: dict[SeqId, tuple[tuple[int, ...], int]], prefix_state: Any
    ) -> dict[SeqId, Any]:
        """Validate restore_sequences' prefix_state: {seq in plan: a state, or None}."""
        if prefix_state is None:
            return {}
        if not isinstance(prefix_state, dict):
            raise TypeError(f"prefix_state must be a dict, got {type(prefix_state).__name__}")
        for seq_id, state in prefix_state.items():
            if seq_id not in plan:
                raise ValueError(f"prefix_state names seq {seq_id!r}, which is not restored")
            if state is not None:
                self._check_prefix_state(seq_id, plan[seq_id][1], state)
        return {s: state for s, state in prefix_state.items() if state is not None}

    def _check_prefix_state(self, seq_id: SeqId, num_tokens: int, state: Any) -> None:
        raise ValueError(f"seq {seq_id!r}: this manager keeps no prefix state, got {state!r}")

    def _restore_prefix_state(self, seq_id: SeqId, state: Any) -> None:
        """Called for each restored sequence with a prefix state, inside the same step."""

    # ---- lookups ---------------------------------------------------------------
    def _table(self, seq_id: SeqId) -> BlockTable:
        try:
            return self._tables[seq_id]
        except (KeyError, TypeError):
            raise SequenceError(f"unknown sequence {seq_id!r}") from None

    def _check_new(self, seq_id: object) -> None:
        try:
            exists = seq_id in self._tables
        except TypeError:
            raise TypeError(f"sequence id must be hashable, got {type(seq_id).__name__}") from None
        if exists:
            raise SequenceError(f"sequence {seq_id!r} already exists")

    def _id_list(self, seq_ids: Iterable[SeqId]) -> list[SeqId]:
        """seq_ids as a list; a string is refused."""
        if type(seq_ids) is list:
            return seq_ids
        if isinstance(seq_ids, (str, bytes)) or not hasattr(seq_ids, "__iter__"):
            raise TypeError(
                f"seq_ids must be an iterable of sequence ids, got {type(seq_ids).__name__}"
            )
        return list(seq_ids)

    def _tables_of(self, seq_ids: list[SeqId]) -> list[BlockTable]:
        """The tables of seq_ids (SequenceError for the first unknown id)."""
        try:
            return list(map(self._tables.__getitem__, seq_ids))
        except (KeyError, TypeError):
            missing = next(s for s in seq_ids if s not in self)
            raise SequenceError(f"unknown sequence {missing!r}") from None

    def _take_back(self, seq_ids: list[SeqId]) -> None:
        """Undo a decode pass that stopped at an unknown id, then raise SequenceError."""
        for s in seq_ids:
            try:
                table = self._tables[s]
            except (KeyError, TypeError):
                raise SequenceError(f"unknown sequence {s!r}") from None
            table.num_tokens -= 1
        raise AssertionError("a decode pass stopped, but every sequence is known")

    # ---- steps, snapshots, invariants ----------------------------------------------
    def _emit(self, kind: Callable[..., tr.Event], *fields: Any) -> None:
        """Record `kind(step, *fields)` in the current step (nothing built untraced)."""
        if self._tracing:
            self._sink.emit(kind(self.step + 1, *fields))

    def _end_step(self) -> None:
        self.step += 1
        if self._tracing:
            self._sink.end_step(self.snapshot)

    def snapshot(self, events: Iterable[tr.Event] = (), caption: str | None = None) -> tr.Snapshot:
        """The whole state as frozen data (for pictures, the tour and time travel)."""
        events = tuple(events)
        return tr.Snapshot(
            step=self.step,
            custom_caption=caption,
            events=events,
            num_gpu_blocks=self.num_gpu_blocks,
            block_size=self.block_size,
            free_list=tuple(self.pool.free_list()),
            ref_counts=tuple(self.pool.ref_counts()),
            block_fill=tuple(
                block_fill(self._tables.values(), self.num_gpu_blocks, self.block_size)
            ),
            sequences=tuple(
                tr.SeqState(s, tuple(t.blocks), t.num_tokens) for s, t in self._tables.items()
            ),
            pending_copies=tuple(self._copies),
        )

    def check_invariants(self) -> None:
        references = self.table_references()
        if self.shares_pool:  # the owner of the pool sums every manager's references
            return
        self.pool.check_invariants()
        ref = self.pool.ref_counts()
        assert sum(ref) == references, (
            f"ref counts sum to {sum(ref)} but tables hold {references} references"
        )

    def table_references(self) -> int:
        """Check every table against the pool; the number of block references they hold."""
        ref = self.pool.ref_counts()
        references = 0
        for seq_id, table in self._tables.items():
            table.check()
            named = [b for b in table.blocks if b != NULL_BLOCK]
            assert len(set(named)) == len(named), f"seq {seq_id!r} names a block twice: {named}"
            assert self.drops_blocks or len(named) == len(table.blocks), (
                f"seq {seq_id!r} holds NULL_BLOCK but nothing here drops blocks"
            )
            for b in named:
                assert ref[b] > 0, f"seq {seq_id!r} names block {b}, which is free"
            references += len(named)
        return references

    # ---- planning and recording -------------------------------------------------
    def _plan_decode(self, seq_ids: list[SeqId], with_slots: Any, token_ids: Any) -> DecodePlan:
        """A decode step's checks, room, positions and copies, before its pass."""
        batch = self._tables_of(seq_ids)
        bool_arg("with_slots", with_slots)
        if token_ids is not None:
            token_ids = token_ids_arg("token_ids", token_ids, len(seq_ids))
            self._before_tokens_appended(
                [(s, (token,)) for s, token in zip(seq_ids, token_ids, strict=True)]
            )
        pool, bs = self.pool, self.block_size
        if len(batch) > pool.num_free_blocks:  # each entry needs at most one block: count exactly
            self._reserve(
                lambda: decode_need(batch, pool, bs),
                set(seq_ids),
                f"decode_step({len(batch)} seqs)",
            )
        positions = None
        if with_slots or self._tracing or token_ids is not None:
            positions = start_positions(batch)
        copied = []  # (table, shared block, its private copy, the shared block's count after)
        if pool.num_shared:
            copies = plan_copies(batch, pool, bs)
            for (t, src), dst in zip(copies, pool.allocate_many(len(copies)), strict=True):
                t.blocks[-1] = dst  # copy-on-write: the writer lets go of the shared block
                self._copies.append((src, dst))
                copied.append((t, src, dst, pool.free(src)))
        return DecodePlan(batch, token_ids, positions, copied)

    def _reserve(self, need: int | Callable[[], int], protect: Any, what: str) -> None:
        """Return once `need` (an int or a recounting plan) blocks are free, asking the
        reclaimer for the shortfall until it frees nothing; else record it, OutOfBlocks."""
        plan = need if callable(need) else (lambda: need)
        if not isinstance(protect, (set, frozenset)):
            protect = {protect}
        blocks, available = plan(), self.pool.num_free_blocks
        # more than the whole pool never fits: nobody is preempted for it (as v1)
        while self.pool.num_gpu_blocks >= blocks > available and self.reclaimer is not None:
            self.reclaimer(self, blocks - available, set(protect))
            if self.pool.num_free_blocks <= available:  # nothing freed: give up
                break
            blocks, available = plan(), self.pool.num_free_blocks
        if blocks <= available:
            return
        seq_id = next(iter(protect)) if len(protect) == 1 else "batch"
        self._emit(tr.AllocationFailed, seq_id, what, blocks, available)
        self._end_step()
        raise OutOfBlocks(blocks, available, f"seq {seq_id!r} {what}")

    def _make_room(self, seq_id: SeqId, table: BlockTable, n: int) -> None:
        """Give `table` the blocks for `n` more tokens: a private last block, then new ones."""
        if self._room_needed(table, n) > self.pool.num_free_blocks:
            self._reserve(lambda: self._room_needed(table, n), {seq_id}, f"append_tokens({n})")
        pool, bs, blocks = self.pool, self.block_size, table.blocks
        if table.num_tokens % bs and pool.num_shared and pool.is_shared(blocks[-1]):
            src = blocks[-1]
            dst = pool.allocate()
            count = pool.free(src)  # the writer lets go of the shared block (count >= 1 stays)
            blocks[-1] = dst
            self._copies.append((src, dst))
            self._emit(tr.CopyOnWrite, seq_id, src, dst, count + 1)
            self._emit(tr.BlockAllocated, seq_id, dst, len(blocks) - 1)
            self._emit(tr.BlockReleased, seq_id, src, count)
        first = len(blocks)
        blocks += pool.allocate_many(-(-(table.num_tokens + n) // bs) - first)
        if self._tracing:
            for logical in range(first, len(blocks)):
                self._emit(tr.BlockAllocated, seq_id, blocks[logical], logical)

    def _room_needed(self, table: BlockTable, n: int) -> int:
        """Free blocks `n` more tokens take: new blocks, plus one if the last must be copied."""
        bs, pool = self.block_size, self.pool
        copy = bool(table.num_tokens % bs and pool.num_shared and pool.is_shared(table.blocks[-1]))
        return -(-(table.num_tokens + n) // bs) - len(table.blocks) + copy

    def _grow(self, seq_id: SeqId, table: BlockTable, logical: int) -> None:
        b = self.pool.allocate()
        table.blocks.append(b)
        self._emit(tr.BlockAllocated, seq_id, b, logical)

    def _trace_decode(
        self,
        seq_ids: list[SeqId],
        batch: list[BlockTable],
        positions: list[int],
        slots: list[int],
        copied: list[tuple[BlockTable, int, int, int]],
        grown: Iterable[tuple[BlockTable, int]],
    ) -> None:
        owner = {id(t): s for s, t in zip(seq_ids, batch, strict=True)}
        for s, p, slot in zip(seq_ids, positions, slots, strict=True):
            self._sink.emit(tr.TokensAppended(self.step + 1, s, p, (slot,)))
        for t, src, dst, count in copied:
            self._emit(tr.CopyOnWrite, owner[id(t)], src, dst, count + 1)
            self._emit(tr.BlockAllocated, owner[id(t)], dst, t.blocks.index(dst))
            self._emit(tr.BlockReleased, owner[id(t)], src, count)
        for t, b in grown:
            self._emit(tr.BlockAllocated, owner[id(t)], b, t.blocks.index(b))


# ---- planning one decode step (before anything changes) ------------------------------
class DecodePlan(NamedTuple):
    """What `_plan_decode` found and did."""

    batch: list[BlockTable]  # each entry's table
    token_ids: tuple[int, ...] | None  # one id per entry, validated (None: not given)
    positions: list[int] | None  # each entry's position (None: nobody reads them)
    copied: list[tuple[BlockTable, int, int, int]]  # (table, shared block, copy, count after)


def start_positions(batch: list[BlockTable]) -> list[int]:
    """The position each entry's token is written to, in entry order."""
    positions = [t.num_tokens for t in batch]
    if len(set(map(id, batch))) != len(batch):  # a table listed more than once
        seen: dict[int, int] = {}
        for i, t in enumerate(batch):
            k = seen.get(id(t), 0)
            positions[i] += k
            seen[id(t)] = k + 1
    return positions


def plan_copies(
    batch: list[BlockTable], pool: BlockPool, block_size: int
) -> list[tuple[BlockTable, int]]:
    """[(table, shared block)], in entry order, for every table whose first write must copy."""
    out: list[tuple[BlockTable, int]] = []
    if not pool.num_shared:
        return out
    seen: set[int] = set()
    drops: dict[int, int] = {}  # drops: shared block -> earlier writers that copied away from it
    for t in batch:
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t.num_tokens % block_size:
            src = t.blocks[-1]
            if pool.ref_count(src) - drops.get(src, 0) > 1:
                out.append((t, src))
                drops[src] = drops.get(src, 0) + 1
    return out


def decode_need(batch: list[BlockTable], pool: BlockPool, block_size: int) -> int:
    """Free blocks the step takes: a new block at each boundary, one per copy-on-write."""
    boundaries = sum(1 for p in start_positions(batch) if not p % block_size)
    return boundaries + len(plan_copies(batch, pool, block_size))
