"""The capstone on your own code: your 3.4a free list and 3.4b copy-on-write serve the model.

`pagedsim generate --pool workspace` (and lesson 3.8) loads your 3.4a and 3.4b files from the
workspace `pagedsim check` uses (course/workspace.py) and puts them where the engine's block
manager has its own: `YourPool(BlockPool)` sends every pool call to your FreeListPool, and
`WorkspaceManager(KVCacheManager)` runs your fork, slot_for_append and free_table for fork,
append_tokens and free_sequence (add_sequence and swap-in are the manager's own code, on your
pool). pagedsim's own manager serves the same requests beside it and the two are compared after
every engine step (pagedsim/engine/lockstep.py). Your free list is the chapter's (LIFO), so this
runs with prefix caching off; forks, copy-on-write and swapping are vLLM v0's.

An exception in your code becomes one line naming the exercise, the function and the line of
your file (`YourCodeFailed`). Your files are imported into this process: they are your own
code, run by you (the grader's boundary, course/isolation.py, is for other people's).
"""

from __future__ import annotations

import importlib.util
import traceback
from pathlib import Path
from typing import Any

from pagedsim import trace as tr
from pagedsim.block_pool import BlockPool
from pagedsim.block_table import BlockTable, blocks_needed
from pagedsim.errors import OutOfBlocks, SequenceError, token_ids_arg
from pagedsim.errors import count_arg as _count
from pagedsim.manager import KVCacheManager, decode_need

from .. import curriculum, workspace

WHAT = {"3.4a": "free list", "3.4b": "copy-on-write"}


class YourCodeFailed(RuntimeError):
    """Your 3.4a or 3.4b code raised, or is still the stub: one line that says which."""


def _where(e: BaseException, path: Path | None) -> str:
    """' (line N of FILE)' for the last frame of the traceback inside `path`."""
    if path is None:
        return ""
    line = None
    for frame in traceback.extract_tb(e.__traceback__):
        if Path(frame.filename).resolve() == path.resolve():
            line = frame.lineno
    return f" (line {line} of {path.name})" if line else ""


def _stub(exercise: str, method: str, e: NotImplementedError) -> YourCodeFailed:
    """The stub's own `raise NotImplementedError("name")` names the function still to write."""
    named = e.args[0] if e.args and isinstance(e.args[0], str) and e.args[0].isidentifier() else ""
    return YourCodeFailed(
        f"your {exercise} {WHAT[exercise]} is still the stub ({named or method} raises "
        f"NotImplementedError): run `pagedsim check {exercise}` first"
    )


def call(exercise: str, method: str, path: Path | None, fn, *args):
    """fn(*args), with any exception turned into one line naming the exercise and method."""
    try:
        return fn(*args)
    except (YourCodeFailed, OutOfBlocks):
        raise
    except NotImplementedError as e:
        raise _stub(exercise, method, e) from e
    except Exception as e:  # noqa: BLE001 - whatever your code raised, named in one line
        text = " ".join(str(e).split())
        raise YourCodeFailed(
            f"your {exercise} {method} raised {type(e).__name__}"
            f"{': ' + text if text else ''}{_where(e, path)}"
        ) from e


class YourPool(BlockPool):
    """A BlockPool whose state is your FreeListPool: the manager's pool calls go to your code.
    Its bulk calls (`allocate_many`, `release`) are your `allocate` and `free` in turn."""

    __slots__ = ("mine", "path")

    def __init__(self, free_list_module, num_gpu_blocks: int, block_size: int, path=None):
        # BlockPool's own lists are never made: every method that would read them is replaced
        self.num_gpu_blocks, self.block_size, self.free_order = num_gpu_blocks, block_size, "lifo"
        self.path = path
        self.mine = call(
            "3.4a",
            "FreeListPool(num_gpu_blocks)",
            path,
            free_list_module.FreeListPool,
            num_gpu_blocks,
        )
        free = self.free_list()
        if self.num_free_blocks != num_gpu_blocks or free != list(range(num_gpu_blocks)):
            raise YourCodeFailed(
                f"your 3.4a FreeListPool({num_gpu_blocks}) starts with num_free "
                f"{self.num_free_blocks} and free list {free}: expected {num_gpu_blocks} and "
                f"[0, 1, ..., {num_gpu_blocks - 1}] (check _push)"
            )

    def _call(self, method: str, *args):
        return call("3.4a", method, self.path, getattr(self.mine, method), *args)

    # ---- queries: your lists --------------------------------------------------------
    @property  # type: ignore[override]
    def num_free_blocks(self) -> int:  # your counter, as the manager reads the reference's
        return self.mine.num_free

    @property  # type: ignore[override]
    def num_shared(self) -> int:
        return sum(1 for c in self.mine.ref if c > 1)

    def ref_count(self, block_id: int) -> int:
        return self.mine.ref[self._check_id(block_id)]

    def is_shared(self, block_id: int) -> bool:
        return self.ref_count(block_id) > 1

    def is_free(self, block_id: int) -> bool:
        return self.ref_count(block_id) == 0

    def head(self) -> int | None:
        free = self.free_list()
        return free[0] if free else None

    def free_list(self) -> list[int]:
        return self._call("free_list")

    def ref_counts(self) -> list[int]:
        return list(self.mine.ref)

    # ---- mutations: your methods ---------------------------------------------------------
    def allocate(self) -> int:
        try:
            return self._call("allocate")
        except YourCodeFailed as e:  # what your pool held when it refused: the cause is there
            try:
                held = f"num_free {self.mine.num_free}, free list {self.mine.free_list()}"
            except Exception:  # noqa: BLE001 - too broken to show: the first line is enough
                raise e from None
            raise YourCodeFailed(f"{e} -- your pool held {held}") from e

    def allocate_many(self, k: int) -> list[int]:
        k = _count("k", k)
        if k > self.num_free_blocks:
            raise OutOfBlocks(k, self.num_free_blocks, f"allocate_many({k})")
        return [self.allocate() for _ in range(k)]

    def take(self, block_id: int) -> int:
        return self._call("take", block_id)

    def incref(self, block_id: int) -> int:
        return self._call("incref", block_id)

    def free(self, block_id: int) -> int:
        return self._call("free", block_id)

    def release(self, blocks: Any) -> None:
        for b in list(blocks):
            self.free(b)

    def check_invariants(self) -> None:
        free = self.free_list()
        assert len(free) == self.num_free_blocks, (
            f"your free list holds {len(free)} blocks but num_free is {self.num_free_blocks}"
        )
        for b, count in enumerate(self.mine.ref):
            assert (count == 0) == (b in free), f"block {b} has count {count} and is " + (
                "on the free list" if b in free else "not on the free list"
            )


class WorkspaceManager(KVCacheManager):
    """The engine's block manager with your pool inside, and your fork, slot_for_append and
    free_table where its own sharing code would run (see the module docstring)."""

    def __init__(
        self, num_gpu_blocks: int, block_size: int, code: Workspace, *, trace: bool = True
    ):
        self.code = code
        pool = YourPool(code.free_list, num_gpu_blocks, block_size, code.paths.get("3.4a"))
        super().__init__(num_gpu_blocks, block_size, trace=trace, pool=pool)

    def _b(self, method: str, *args):
        return call(
            "3.4b", method, self.code.paths.get("3.4b"), getattr(self.code.cow, method), *args
        )

    def fork(self, parent_id, child_id) -> None:
        parent = self._table(parent_id)
        self._check_new(child_id)
        blocks = self._b("fork", self.pool, list(parent.blocks))
        if not isinstance(blocks, list) or blocks != parent.blocks:
            raise YourCodeFailed(
                f"your 3.4b fork returned {blocks!r} for the table {parent.blocks}: it must "
                f"return a new list of the same blocks"
            )
        self._tables[child_id] = BlockTable(self.block_size, blocks, parent.num_tokens)
        self._emit(tr.SequenceForked, parent_id, child_id)
        for b in blocks:
            self._emit(tr.BlockShared, child_id, b, self.pool.ref_count(b))
        self._end_step()

    def append_tokens(self, seq_id, n: int = 1, token_ids: Any = None) -> list[int]:
        table = self._table(seq_id)
        n = _count("n", n)
        if token_ids is not None:
            token_ids = token_ids_arg("token_ids", token_ids, n)
            self._before_tokens_appended([(seq_id, token_ids)])
        if self._room_needed(table, n) > self.pool.num_free_blocks:
            self._reserve(lambda: self._room_needed(table, n), {seq_id}, f"append_tokens({n})")
        slots = []
        for _ in range(n):
            slot, before, copies = self._your_append(table)
            slots.append(slot)
            self._record_append(seq_id, table, before, copies)
        if token_ids is not None:
            self._on_tokens_appended(seq_id, table.num_tokens - n, token_ids)
        if self._tracing:
            self._sink.emit(
                tr.TokensAppended(self.step + 1, seq_id, table.num_tokens - n, tuple(slots)), True
            )
        self._end_step()
        return slots

    def _your_append(self, table) -> tuple[int, list, list]:
        """One token appended by your slot_for_append, checked: (slot, blocks before, copies)."""
        pos, before, copies = table.num_tokens, list(table.blocks), []
        slot = self._b("slot_for_append", self.pool, table.blocks, pos, self.block_size, copies)
        self._check_append(table, before, pos, slot, copies)
        table.num_tokens = pos + 1
        return slot, before, copies

    def _check_append(self, table, before: list, pos: int, slot, copies: list) -> None:
        """What slot_for_append must leave: the table grown to hold `pos`, the slot it names,
        and one (src, dst) pair exactly when the last block was replaced."""
        bs, blocks = self.block_size, table.blocks
        if len(blocks) != blocks_needed(pos + 1, bs):
            raise YourCodeFailed(
                f"your 3.4b slot_for_append left the table with {len(blocks)} blocks for "
                f"{pos + 1} tokens (it must change `table` in place, not rebind it)"
            )
        want = blocks[pos // bs] * bs + pos % bs
        if slot != want:
            raise YourCodeFailed(
                f"your 3.4b slot_for_append returned slot {slot!r} for position {pos}: the "
                f"table puts it in block {blocks[pos // bs]} at offset {pos % bs}, slot {want}"
            )
        replaced = pos % bs and len(before) == len(blocks) and before[-1] != blocks[-1]
        expected = [(before[-1], blocks[-1])] if replaced else []
        if copies != expected:
            raise YourCodeFailed(
                f"your 3.4b slot_for_append recorded copies {copies} at position {pos}, expected "
                f"{expected} (the table's last block went {before[-1:]} -> {blocks[-1:]})"
            )

    def _record_append(self, seq_id, table, before: list, copies: list) -> None:
        for src, dst in copies:
            self._copies.append((src, dst))
            count = self.pool.ref_count(src)
            self._emit(tr.CopyOnWrite, seq_id, src, dst, count + 1)
            self._emit(tr.BlockAllocated, seq_id, dst, len(table.blocks) - 1)
            self._emit(tr.BlockReleased, seq_id, src, count)
        for logical in range(len(before), len(table.blocks)):
            self._emit(tr.BlockAllocated, seq_id, table.blocks[logical], logical)

    def free_sequence(self, seq_id) -> None:
        table = self._table(seq_id)
        named = table.blocks[::-1]
        self._b("free_table", self.pool, table.blocks)
        del self._tables[seq_id]
        self._emit(tr.SequenceFreed, seq_id, table.num_tokens)
        for b in named:
            self._emit(tr.BlockReleased, seq_id, b, self.pool.ref_count(b))
        self._end_step()

    def decode_step(self, seq_ids, with_slots: bool = True, token_ids: Any = None):
        """One token for each running sequence (SchedulerV0's decode), in the reference's order
        (KVCacheManager.decode_step): those writing into a partly filled block (and their
        copies) first, then those starting a block, so the free list is taken in its order."""
        seq_ids = self._id_list(seq_ids)
        batch = self._tables_of(seq_ids)
        if len(set(map(id, batch))) != len(batch):
            raise SequenceError("the workspace manager decodes each sequence once a step")
        if token_ids is not None:
            token_ids = token_ids_arg("token_ids", token_ids, len(seq_ids))
            self._before_tokens_appended(
                [(s, (t,)) for s, t in zip(seq_ids, token_ids, strict=True)]
            )
        bs = self.block_size
        if decode_need(batch, self.pool, bs) > self.pool.num_free_blocks:
            need = lambda: decode_need(batch, self.pool, bs)  # noqa: E731 - counted again
            self._reserve(need, set(seq_ids), f"decode_step({len(batch)} seqs)")
        positions = [t.num_tokens for t in batch]
        order = sorted(range(len(batch)), key=lambda i: positions[i] % bs == 0)
        slots: list = [None] * len(batch)
        records = []
        for i in order:  # partly filled blocks (and their copies) first, then new blocks
            slots[i], before, copies = self._your_append(batch[i])
            records.append((seq_ids[i], batch[i], before, copies))
        for i, s in enumerate(seq_ids):
            if token_ids is not None:
                self._on_tokens_appended(s, positions[i], (token_ids[i],))
            self._emit(tr.TokensAppended, s, positions[i], (slots[i],))
        for record in records:
            self._record_append(*record)
        self._end_step()
        return slots if with_slots else None


class Workspace:
    """Your two modules and the files they came from."""

    def __init__(self, free_list, cow, paths: dict | None = None):
        self.free_list, self.cow = free_list, cow  # modules: 3.4a's and 3.4b's
        self.paths = dict(paths or {})  # exercise id -> Path of the file

    def preflight(self) -> None:
        """Raise YourCodeFailed now for a stub, before any request is served."""
        YourPool(self.free_list, 4, 4, self.paths.get("3.4a"))
        probe = BlockPool(4, 4)  # the reference pool: 3.4b alone, on a pool known to be right
        path = self.paths.get("3.4b")
        table: list = []
        call("3.4b", "slot_for_append", path, self.cow.slot_for_append, probe, table, 0, 4, [])
        call("3.4b", "fork", path, self.cow.fork, probe, list(table))
        call("3.4b", "free_table", path, self.cow.free_table, probe, table)

    def manager(self, num_gpu_blocks: int, block_size: int) -> WorkspaceManager:
        return WorkspaceManager(num_gpu_blocks, block_size, self)


def load_module(exercise: str, path: Path):
    """Import your file for `exercise` as a fresh module; YourCodeFailed if it cannot be."""
    name = f"_capstone_{exercise.replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise YourCodeFailed(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise YourCodeFailed(
            f"your {exercise} file {path} does not parse: line {e.lineno}: {e.msg}"
        ) from e
    except Exception as e:  # noqa: BLE001 - named in one line
        raise YourCodeFailed(
            f"importing your {exercise} file {path} raised {type(e).__name__}: {e}{_where(e, path)}"
        ) from e
    return module


def find_workspace() -> Workspace:
    """Your 3.4a and 3.4b files, from the workspace `pagedsim check` uses."""
    modules, paths = {}, {}
    for exercise in ("3.4a", "3.4b"):
        ex = curriculum.find(exercise)
        path = workspace.find_upwards(ex)
        if path is None:
            raise YourCodeFailed(
                f"no {Path(ex.stub).name} in a workspace: run `pagedsim workspace`, solve "
                f"{exercise}, or set PAGEDSIM_WORKSPACE to your folder"
            )
        paths[exercise], modules[exercise] = path, load_module(exercise, path)
    return Workspace(modules["3.4a"], modules["3.4b"], paths)


def workspace_pool():
    """`pagedsim generate --pool workspace`: the factory (num_gpu_blocks, block_size) -> manager,
    after checking that neither file is still the stub."""
    code = find_workspace()
    code.preflight()
    return code.manager
