"""Two paged engines served side by side, a step each in turn, and the first place they part.

`pagedsim generate --pool NAME` serves the model from another block manager (`workspace`:
a student's free list and copy-on-write, course/ch03_kv_block/capstone.py) beside
pagedsim's own, the reference pool; the same block ids make the same floats, so every token
must be equal. After each engine step `Lockstep` compares the managers call by call (block
tables, ref counts, sequences and token counts, the free list in order, its count) and the
tokens, keeping the first block difference, named by step and manager call, and the first
differing token (`Divergence`). A manager that raises stops with its one-line error
(`PoolFailed`); after a block difference serving goes on, so the report says whether it
cost a token. Forks and copy-on-write are vLLM v0's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import trace as tr
from ..policies.hybrid import HybridManager
from .requests import Request, seq_key

if TYPE_CHECKING:
    from ..manager import KVCacheManager
    from .paged import PagedEngine, Run


@dataclass
class Divergence:
    """Where the pool under test first parted from the reference pool (None: it never did)."""

    name: str = "tested"  # the pool under test, as the lines call it
    blocks: str | None = None  # the first difference in tables, ref counts or the free list
    token: str | None = None  # the first token that differs
    error: str | None = None  # the pool under test raised: its step and one-line message

    @property
    def matches(self) -> bool:
        return self.blocks is None and self.token is None and self.error is None

    def summary(self) -> dict[str, Any]:
        """The finding as `pagedsim generate --json` reports it."""
        return dict(
            name=self.name,
            matches=self.matches,
            blocks=self.blocks,
            token=self.token,
            error=self.error,
            lines=self.lines(),
        )

    def lines(self) -> list[str]:
        """The report: what matched, else each first difference, one line each."""
        if self.matches:
            return [f"the {self.name} pool matches the reference pool: every block and token"]
        out = []
        if self.blocks:
            out.append(f"first block difference, {self.blocks}")
        if self.error:
            out.append(f"the {self.name} pool failed, {self.error}")
        elif self.token:
            out.append(f"first wrong token, {self.token}")
        else:
            out.append("every token is still equal to the reference pool's")
        return out


@dataclass(frozen=True)
class Pool:
    """A block manager under test (`generate --pool`, `LLM(pool=)`): `manager(num_gpu_blocks,
    block_size)` makes an empty KVCacheManager."""

    manager: Callable[[int, int], KVCacheManager]
    name: str = "tested"


class PoolFailed(RuntimeError):
    """The pool under test raised while serving; `divergence` says where and what came before."""

    def __init__(self, divergence: Divergence):
        super().__init__("; ".join(divergence.lines()))
        self.divergence = divergence


@dataclass(frozen=True)
class View:
    """What a block manager holds, as compared: from a live manager or a trace snapshot."""

    # seq -> (its table's physical blocks, its number of tokens)
    seqs: dict[Any, tuple[list[int], int]]
    ref_counts: list[int]  # [num_gpu_blocks]
    free_list: list[int]  # head first
    num_free: int  # the pool's own count of free blocks

    @classmethod
    def of(cls, manager: KVCacheManager) -> View:
        seqs = {
            s: (list(manager.block_table(s).blocks), manager.num_tokens(s))
            for s in manager.seq_ids()
        }
        pool = manager.pool
        return cls(seqs, pool.ref_counts(), pool.free_list(), manager.num_free_blocks)

    @classmethod
    def of_snapshot(cls, snap: tr.Snapshot) -> View:
        seqs = {q.seq_id: (list(q.blocks), q.num_tokens) for q in snap.sequences}
        return cls(seqs, list(snap.ref_counts), list(snap.free_list), len(snap.free_list))


def seq_name(seq: Any) -> str:
    """A manager's sequence id as the engine names it: (1, 0) -> "r1.0"."""
    return seq_key(seq) if isinstance(seq, tuple) else str(seq)


def blocks_difference(reference: View, tested: View, name: str = "tested") -> str | None:
    """The first difference between two managers' sequences, tables, counts and free lists."""
    ref, got = reference.seqs, tested.seqs
    for s, (table, num) in ref.items():
        if s not in got:
            continue
        mine, n = got[s]
        seq = seq_name(s)
        for i, (b, c) in enumerate(zip(mine, table, strict=False)):
            if b != c:
                return (
                    f"seq {seq}'s table maps logical {i} -> {b} in the {name} pool, -> {c} in "
                    f"the reference pool"
                )
        if len(mine) != len(table):
            return (
                f"seq {seq}'s table has {len(mine)} blocks {mine} in the {name} pool, "
                f"{len(table)} {table} in the reference pool"
            )
        if n != num:
            return f"seq {seq} holds {n} tokens in the {name} pool, {num} in the reference pool"
    for b, (c, m) in enumerate(zip(reference.ref_counts, tested.ref_counts, strict=True)):
        if c != m:
            return f"block {b}'s ref count is {m} in the {name} pool, {c} in the reference pool"
    if set(ref) != set(got):
        return (
            f"the {name} pool holds sequences {sorted(map(seq_name, got))}, the reference pool "
            f"{sorted(map(seq_name, ref))}"
        )
    free, mine_free = reference.free_list, tested.free_list
    if free != mine_free:
        at = next(
            (i for i, (a, b) in enumerate(zip(free, mine_free, strict=False)) if a != b),
            min(len(free), len(mine_free)),
        )
        shown = max(8, at + 3)  # enough to see the difference, not a whole large pool

        def head(blocks: list[int]) -> str:
            return str(blocks[:shown])[:-1] + (", ...]" if len(blocks) > shown else "]")

        return (
            f"the free list (head first) differs at position {at}: the {name} pool's is "
            f"{head(mine_free)}, the reference pool's {head(free)}"
        )
    if tested.num_free != reference.num_free:
        return (
            f"the {name} pool counts {tested.num_free} free blocks, the reference pool "
            f"{reference.num_free} (its free list holds {len(tested.free_list)})"
        )
    return None


# the event that names a manager call -> how the report names the call
_CALLS: dict[str, Callable[[Any], str]] = {
    "SequenceAdded": lambda e: f"add_sequence({seq_name(e.seq_id)}, {e.num_tokens} tokens)",
    "TokensAppended": lambda e: (
        f"append_tokens({seq_name(e.seq_id)}) at position {e.first_position}"
    ),
    "SequenceForked": lambda e: f"fork({seq_name(e.parent)} -> {seq_name(e.child)})",
    "SequenceFreed": lambda e: f"free_sequence({seq_name(e.seq_id)})",
    "AllocationFailed": lambda e: f"{e.what} for {seq_name(e.seq_id)}, refused",
}


def describe(events: Sequence[tr.Event]) -> str:
    """The manager call a snapshot's events record, e.g. 'append_tokens(r1.1) at position 67,
    copy-on-write 11 -> 15 for r1.1' or 'decode_step(r0.0, r1.0)'."""
    appended = [seq_name(e.seq_id) for e in events if isinstance(e, tr.TokensAppended)]
    if len(appended) > 1:
        call = f"decode_step({', '.join(appended)})"
    else:
        call = next((_CALLS[type(e).__name__](e) for e in events if type(e).__name__ in _CALLS), "")
    cow = [
        f"copy-on-write {e.src} -> {e.dst} for {seq_name(e.seq_id)}"
        for e in events
        if isinstance(e, tr.CopyOnWrite)
    ]
    return ", ".join([call, *cow] if call else cow) or "a call"


def _every(run: Run) -> dict[str, list[int]]:
    state = run.state
    return {**state.tokens, **state.finished}


class Lockstep:
    """Serve the same requests on `tested` and `reference`, comparing after every step."""

    def __init__(
        self,
        tested: PagedEngine,
        reference: PagedEngine,
        name: str = "tested",
        decode: Callable[[Iterable[int]], str] | None = None,
    ) -> None:
        self.tested, self.reference = tested, reference
        self.decode = decode  # token id -> text, or None
        self.divergence = Divergence(name)
        self.steps = 0  # engine steps of the reference so far
        self.compared = 0  # manager snapshots compared so far (when both managers trace)
        # (reference run, tested run) of each request still served by either engine
        self._pairs: list[tuple[Run, Run]] = []

    def submit(self, request: Request, keep_logits: bool = False) -> Run:
        """Submit to both engines; the tested engine's Run (submit's keep_logits)."""
        ref = self.reference.submit(request)
        run = self.tested.submit(request, keep_logits)
        self._pairs.append((ref, run))
        return run

    def step(self) -> None:
        """One step of each engine that still serves, then compare; PoolFailed when the
        tested engine raises."""
        self.steps += 1
        if self.reference.runs:
            self.reference.step()
        if self.tested.runs:
            try:
                self.tested.step()
            except Exception as e:  # noqa: BLE001 - any error of the tested pool is the finding
                text = " ".join(str(e).split())
                if not isinstance(e, RuntimeError) or not text:
                    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
                self.divergence.error = f"at step {self.steps}: {text}"
                if self.divergence.blocks is None:  # the calls it finished may differ already
                    found = self._calls_difference()
                    if found:
                        self.divergence.blocks = f"at step {self.steps}, {found}"
                raise PoolFailed(self.divergence) from e
        self._compare()
        self._pairs = [(a, b) for a, b in self._pairs if (a.status, b.status) != ("done",) * 2]

    def _compare(self) -> None:
        d = self.divergence
        if d.blocks is None:
            reference, tested = self.reference.manager, self.tested.manager
            assert not isinstance(reference, HybridManager), "lockstep serves v0"
            assert not isinstance(tested, HybridManager), "lockstep serves v0"
            try:
                found = self._calls_difference() or blocks_difference(
                    View.of(reference), View.of(tested), d.name
                )
            except Exception as e:  # noqa: BLE001 - a state too broken to read is the finding
                found = f"the {d.name} pool's state could not be read ({type(e).__name__}: {e})"
            if found:
                d.blocks = f"at step {self.steps}, {found}"
        if d.token is None:
            d.token = self._token_difference()

    def _calls_difference(self) -> str | None:
        """The first manager call after which the two pools differ, when both keep a trace:
        the same calls in the same order leave the same state, call by call."""
        ref, got = self.reference.manager.trace, self.tested.manager.trace
        if ref is None or got is None:
            return None
        a, b = ref.snapshots, got.snapshots
        for k in range(self.compared, min(len(a), len(b))):
            found = blocks_difference(
                View.of_snapshot(a[k]), View.of_snapshot(b[k]), self.divergence.name
            )
            if found:
                return f"manager call {k} ({describe(b[k].events)}): {found}"
        self.compared = min(len(a), len(b))
        return None

    def _token_difference(self) -> str | None:
        for ref_run, run in self._pairs:
            ref, got = _every(ref_run), _every(run)
            prompt = len(ref_run.state.request.prompt)
            for s in sorted(set(ref) & set(got)):
                a, b = ref[s], got[s]
                at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
                if at is not None:
                    return (
                        f"at step {self.steps}: seq {s}'s token at position {at} (generated token "
                        f"{at - prompt + 1}) is {self._show(b[at])} in the "
                        f"{self.divergence.name} pool, {self._show(a[at])} in the reference pool"
                    )
        return None

    def _show(self, token: int) -> str:
        return f"{token} {self.decode([token])!r}" if self.decode else str(token)
