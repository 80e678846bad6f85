"""`manager_machine`: a Hypothesis state machine that drives any block manager next to
pagedsim's `KVCacheManager` (the model) and checks it after every step.

Conformance is the chapter's observable behaviour (3.3, 3.4; vLLM v0's BlockSpaceManager):
the same free count, out of blocks on the same calls, and every live sequence reading back
its own tokens through a shadow memory (block ids stay the manager's own choice). The
checks, one by one: docs/testing-kit.md, "What is checked after every call".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn, TypedDict, TypeVar

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from ..block_table import blocks_needed
from ..errors import OutOfBlocks
from ..manager import KVCacheManager
from .contract import Managed, describe
from .messages import PoolState, diff, hint, took
from .strategies import Op

FREE_ORDERS = (None, "lifo", "fifo")
NUM_GPU_BLOCKS = st.integers(1, 32)  # pools shrink towards one block
BLOCK_SIZES = st.sampled_from([1, 2, 4, 8])  # tokens per block; shrinks towards 1

Tables = dict[int, list[int]]  # live seq -> its block table
Writes = tuple[int, int, int]  # (seq, first position, tokens): what a call writes
T = TypeVar("T")


class MachineOptions(TypedDict, total=False):
    """`manager_machine`'s keywords, as check_manager passes them on."""

    block_size: int | st.SearchStrategy[int] | None
    num_gpu_blocks: int | st.SearchStrategy[int] | None
    check_free_order: str | None
    invalid_ids: bool
    call_timeout: float | None
    extra_check: Callable[[object], object] | None


def _strategy(value: T | st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    return value if isinstance(value, st.SearchStrategy) else st.just(value)


class ManagerConformance(RuleBasedStateMachine):
    """The rules and checks; `manager_machine` makes a subclass bound to one factory."""

    # factory(num_gpu_blocks, block_size) -> the manager under test; manager_machine binds it
    factory: Callable[[int, int], object] | None = None
    sizes = st.tuples(NUM_GPU_BLOCKS, BLOCK_SIZES)  # (num_gpu_blocks, block_size)
    free_order: str | None = None  # None, "lifo" or "fifo": compare tables with the model's
    invalid_ids = False  # also call with unknown / duplicate ids; expect an exception
    call_timeout: float | None = None  # seconds per call into the manager, or None
    # extra_check(manager) after every step, e.g. its check_invariants
    extra_check: Callable[[object], object] | None = None
    steps_run = 0  # rules run, over all examples (for the summary line)
    examples_run = 0

    @initialize(data=st.data())
    def make(self, data: st.DataObject) -> None:
        num_gpu_blocks, block_size = data.draw(self.sizes, label="num_gpu_blocks, block_size")
        type(self).examples_run += 1
        self.num_gpu_blocks, self.block_size = num_gpu_blocks, block_size
        self.script: list[str] = []  # the calls so far, as Python
        self.m = Managed(self.script, self.call_timeout)
        factory = type(self).factory
        assert factory is not None, "manager_machine binds a factory"
        self.m.build(factory, num_gpu_blocks, block_size)
        self.model = KVCacheManager(
            num_gpu_blocks, block_size, free_order=self.free_order or "lifo", trace=False
        )
        # [num_gpu_blocks * block_size] shadow KV: the value each slot holds, -1 if none
        self.memory = np.full(num_gpu_blocks * block_size, -1, np.int64)
        self.writer: dict[int, tuple[int, int]] = {}  # value -> (seq, position) that wrote it
        self.tokens: dict[int, list[int]] = {}  # live seq -> its values, in order
        self.next_id = 0
        self.next_value = 0
        self._check(self.script[0], (num_gpu_blocks, num_gpu_blocks), [])

    # ---- rules ----------------------------------------------------------------------
    @rule(n=st.integers(1, 12))
    def add(self, n: int) -> None:
        seq = self.next_id
        if self._step("add_sequence", (seq, n), writes=(seq, 0, n)):
            self.next_id += 1  # a refused id is tried again: it must not be half-registered

    @precondition(lambda self: self.tokens)
    @rule(i=st.integers(0, 7), n=st.integers(1, 6))
    def append(self, i: int, n: int) -> None:
        seq = self._live(i)
        self._step("append_tokens", (seq, n), writes=(seq, len(self.tokens[seq]), n))

    @precondition(lambda self: self.tokens)
    @rule(i=st.integers(0, 7))
    def fork(self, i: int) -> None:
        parent = self._live(i)
        child = self.next_id
        self.next_id += 1
        self._step(
            "fork",
            (parent, child),
            lambda: self.tokens.__setitem__(child, list(self.tokens[parent])),
        )

    @precondition(lambda self: self.tokens)
    @rule(i=st.integers(0, 7), n=st.integers(1, 6), child_writes=st.booleans())
    def fork_then_append(self, i: int, n: int, child_writes: bool) -> None:
        """Beam search's pattern, and where copy-on-write happens: fork, then one side writes."""
        parent, child = self._live(i), self.next_id
        self.fork(i)
        if child in self.tokens:
            self.append(sorted(self.tokens).index(child if child_writes else parent), n)

    @precondition(lambda self: self.tokens)
    @rule(i=st.integers(0, 7))
    def free(self, i: int) -> None:
        self._free(self._live(i))

    @precondition(lambda self: self.invalid_ids)
    @rule(which=st.integers(0, 4), i=st.integers(0, 7))
    def misuse(self, which: int, i: int) -> None:
        """A call with a bad id must raise (any exception) and change nothing."""
        unknown = self.next_id  # never used yet
        calls: list[tuple[str, tuple[int, ...]]] = [
            ("append_tokens", (unknown, 1)),
            ("free_sequence", (unknown,)),
            ("fork", (unknown, unknown + 1)),
        ]
        if self.tokens:
            some = self._live(i)
            calls += [("add_sequence", (some, 1)), ("fork", (some, some))]
        name, args = calls[which % len(calls)]
        text = str(Op(name, args))  # e.g. m.fork(0, 1)
        before = self._observe()
        outcome, value = self.m.call(text, getattr(self.m.obj, name), *args)
        try:
            getattr(self.model, name)(*args)
        except Exception:  # noqa: BLE001 -- the model rejects every call drawn here
            pass
        self.script[-1] += "  # must raise"
        if outcome == "ok":
            self._fail(f"{text} returned normally: a bad sequence id must raise")
        if self._observe() != before:
            self._fail(f"{text} raised {describe(value)} but changed the state")

    def teardown(self) -> None:
        if not hasattr(self, "m") or self.m.broken or self.m.obj is None:
            return  # nothing built, or a failure is already on its way out
        for seq in sorted(self.tokens):
            self._free(seq)
        free = self.m.num_free()
        if free != self.num_gpu_blocks:
            self._fail(
                f"after every sequence is freed, num_free_blocks is {free} of "
                f"{self.num_gpu_blocks}: {self.num_gpu_blocks - free} block(s) leaked"
            )

    # ---- one step -------------------------------------------------------------------
    def _live(self, i: int) -> int:
        """The i-th live sequence (modulo): plain ints shrink towards the oldest sequence."""
        return sorted(self.tokens)[i % len(self.tokens)]

    def _free(self, seq: int) -> None:
        self._step("free_sequence", (seq,), lambda: self.tokens.pop(seq))

    def _step(
        self,
        name: str,
        args: tuple[int, ...],
        on_success: Callable[[], object] | None = None,
        writes: Writes | None = None,
    ) -> bool:
        """Call `name(*args)` on the manager and the model; True when the call went through."""
        type(self).steps_run += 1
        text = str(Op(name, args))  # e.g. m.fork(0, 1)
        before = self._observe()
        model_before = self.model.num_free_blocks
        refusal: OutOfBlocks | None = None
        try:
            getattr(self.model, name)(*args)
        except OutOfBlocks as exc:  # the model raises only this
            refusal = exc
        outcome, value = self.m.call(text, getattr(self.m.obj, name), *args)
        if outcome == "error":
            self._fail(f"{text} raised {describe(value)}")
        if refusal is not None:
            if outcome == "ok":
                self._fail(
                    f"{text} succeeded, but it needs {refusal.needed} free block(s) and "
                    f"only {refusal.available} are free: it must raise OutOfBlocks or "
                    f"MemoryError (the model does){self._cowhint(name, args)}"
                )
            after = self._observe()
            if after != before:
                self._fail(
                    f"{text} ran out of blocks, as it should, but changed the state "
                    f"(all-or-nothing broken): {diff(before, after)}"
                )
            return False
        if outcome == "ran_out":
            need = model_before - self.model.num_free_blocks
            self._fail(
                f"{text} raised {describe(value)}, but the call needs {need} block(s) "
                f"and {before[0]} are free (the model succeeds)"
            )
        model_copies = self.model.drain_copies()
        if on_success is not None:
            on_success()
        self._check(text, (before[0], model_before), model_copies, writes, before[1])
        return True

    def _cowhint(self, name: str, args: tuple[int, ...]) -> str:
        """Why the model needs a block here, when the reason is copy-on-write."""
        if name != "append_tokens":
            return ""
        seq = args[0]
        table = list(self.model.block_table(seq))
        if len(self.tokens[seq]) % self.block_size == 0 or self.model.pool.ref_count(table[-1]) < 2:
            return ""
        sharers = [s for s in self.tokens if s != seq and table[-1] in self.model.block_table(s)]
        return (
            f". In the model its last block is partly full and shared with seq {sharers} "
            f"(fork counted the child's reference), so writing into it needs a private "
            f"copy first (copy-on-write)"
        )

    def _observe(self) -> PoolState:
        """(num_free, tables of live sequences): what a refused call must leave alone."""
        return self.m.num_free(), {s: tuple(self.m.table(s)) for s in self.tokens}

    # ---- checks -----------------------------------------------------------------------
    def _check(
        self,
        text: str,
        free_before: tuple[int, int],
        model_copies: list[tuple[int, int]],
        writes: Writes | None = None,
        tables_before: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        nb, bs = self.num_gpu_blocks, self.block_size
        for src, dst in self.m.drain():  # the copy kernel runs before new tokens are written
            if not (0 <= src < nb and 0 <= dst < nb):
                self._fail(f"m.drain_copies() gave ({src}, {dst}); block ids are 0..{nb - 1}")
            self.memory[dst * bs : (dst + 1) * bs] = self.memory[src * bs : (src + 1) * bs]
        if writes is not None:  # each new token gets a fresh value
            seq, start, n = writes
            values = range(self.next_value, self.next_value + n)
            self.next_value += n
            self.tokens.setdefault(seq, []).extend(values)
        tables = {seq: self._table(seq) for seq in self.tokens}
        if tables_before and not hasattr(self.m.obj, "drain_copies"):
            self._infer_copies(tables_before, tables, writes)
        if writes is not None:
            for p, value in zip(range(start, start + n), values, strict=True):
                self.memory[tables[seq][p // bs] * bs + p % bs] = value
                self.writer[value] = (seq, p)
        free = self.m.num_free()
        model_free = self.model.num_free_blocks
        if free != model_free:
            cow = f", {len(model_copies)} of them for copy-on-write" if model_copies else ""
            used, model_used = free_before[0] - free, free_before[1] - model_free
            self._fail(
                f"after {text}, num_free_blocks is {free} but the model has {model_free} "
                f"free: this call {took(used)}; the model {took(model_used)}{cow}"
                f"{hint(text, used - model_used)}"
            )
        held = set().union(*tables.values()) if tables else set()
        if len(held) + free != nb:
            self._fail(
                f"after {text}, tables hold {len(held)} distinct block(s) and {free} "
                f"are free, but the pool has {nb}"
            )
        if self.free_order:
            for seq, table in tables.items():
                want = list(self.model.block_table(seq))
                if table != want:
                    self._fail(
                        f"after {text}, block_table({seq}) is {table}; with "
                        f"{self.free_order} free order the model gives {want}"
                    )
        for seq, table in tables.items():
            self._read_back(text, seq, table, tables)
        if self.extra_check is not None:
            self.extra_check(self.m.obj)

    def _infer_copies(
        self, tables_before: Mapping[int, Sequence[int]], tables: Tables, writes: Writes | None
    ) -> None:
        """No drain_copies(): a written logical block that moved to a new physical block is
        taken to have been copied (the manager's engine must do that copy itself)."""
        bs = self.block_size
        for seq, old in tables_before.items():
            new = tables.get(seq, [])
            written = len(self.tokens.get(seq, ()))
            if writes is not None and writes[0] == seq:
                written -= writes[2]
            for i in range(min(len(old), len(new), -(-written // bs))):
                if old[i] != new[i]:
                    src, dst = old[i], new[i]
                    self.memory[dst * bs : (dst + 1) * bs] = self.memory[src * bs : (src + 1) * bs]

    def _table(self, seq: int) -> list[int]:
        table, n, nb = self.m.table(seq), len(self.tokens[seq]), self.num_gpu_blocks
        want = blocks_needed(n, self.block_size)
        if len(table) != want:
            self._fail(
                f"block_table({seq}) has {len(table)} entries for {n} tokens; "
                f"expected ceil({n}/{self.block_size}) = {want}"
            )
        if any(not 0 <= b < nb for b in table) or len(set(table)) != len(table):
            self._fail(f"block_table({seq}) is {table}: ids must be distinct, in 0..{nb - 1}")
        return table

    def _read_back(self, text: str, seq: int, table: list[int], tables: Tables) -> None:
        bs = self.block_size
        for p, want in enumerate(self.tokens[seq]):
            block = table[p // bs]
            slot = block * bs + p % bs
            got = int(self.memory[slot])
            if got == want:
                continue
            if got < 0:
                holds = "nothing was ever written there (or it was never copied)"
            else:
                who, at = self.writer[got]
                holds = f"it holds the token seq {who} wrote at position {at}"
            sharers = [s for s, t in tables.items() if s != seq and block in t]
            also = f"; block {block} is also in the table of seq {sharers}" if sharers else ""
            self._fail(
                f"after {text}, seq {seq} does not read back its own tokens: position "
                f"{p} lives in block {block} (slot {slot}), and {holds}{also}"
            )

    def _fail(self, problem: str) -> NoReturn:
        self.m.fail(problem)


def manager_machine(
    factory: Callable[[int, int], object],
    *,
    block_size: int | st.SearchStrategy[int] | None = None,
    num_gpu_blocks: int | st.SearchStrategy[int] | None = None,
    check_free_order: str | None = None,
    invalid_ids: bool = False,
    call_timeout: float | None = None,
    extra_check: Callable[[object], object] | None = None,
) -> type[ManagerConformance]:
    """A `RuleBasedStateMachine` class checking `factory(num_gpu_blocks, block_size)` managers:
    `TestX = manager_machine(MyManager).TestCase`, or through `check_manager`. The keywords
    (ints or strategies for the sizes): docs/testing-kit.md, "From Python and pytest"."""
    if check_free_order not in FREE_ORDERS:
        raise ValueError(f"check_free_order must be one of {FREE_ORDERS}, got {check_free_order!r}")
    if not callable(factory):
        raise TypeError(f"factory must be callable, got {factory!r}")
    name = getattr(factory, "__name__", "manager")
    return type(
        f"{name}Conformance",
        (ManagerConformance,),
        {
            "factory": staticmethod(factory),
            "sizes": st.tuples(
                _strategy(NUM_GPU_BLOCKS if num_gpu_blocks is None else num_gpu_blocks),
                _strategy(BLOCK_SIZES if block_size is None else block_size),
            ),
            "free_order": check_free_order,
            "invalid_ids": invalid_ids,
            "call_timeout": call_timeout,
            "extra_check": staticmethod(extra_check) if extra_check else None,
        },
    )
