"""The playground's state: a real block manager, a timeline of commands, and time travel.

A `Session` owns one manager and the commands (*moments*) that built its state. `back` and
`forward` move a cursor over them; a command typed in the past cuts the future off and
replays the kept commands (the simulator is deterministic), like undo in an editor.
A refused command changes nothing (`Refused` carries the one-line reason); a pool that
runs dry is a kept step; copy-on-write pairs are drained after every command. With a
preemption policy (v0's scheduler, vLLM paper Sec. 4.5) a short pool preempts the newest
other sequence: `recompute` frees it, `swap` keeps its table on the host for `resume`.
"""

from __future__ import annotations

import zlib
from collections.abc import Hashable
from dataclasses import dataclass, field

from ..captions_en import EN
from ..errors import BlockError, OutOfBlocks, SequenceError
from ..io import tables
from ..manager import KVCacheManager, SeqId
from ..policies.hybrid import HybridManager
from ..policies.preemption import PREEMPTION, PREEMPTION_POLICIES
from ..policies.prefix_cache import PrefixCachingManager
from ..text.captions import ZH, caption
from ..text.lang import t
from ..trace import Snapshot

POLICIES = ("none",) + PREEMPTION_POLICIES  # none: a short pool fails the step


class Refused(ValueError):
    """A command the session did not run; the message is one line for the user."""


# command -> (argument pattern, what it does). SEQ: a name; N: a count; [x]: optional.
STEPS = {
    "alloc": (
        "SEQ N [WORD]",
        "admit SEQ with an N-token prompt (--enable-prefix-caching: equal WORDs, shared prefix)",
    ),
    "append": ("SEQ [N]", "SEQ decodes N more tokens (default 1)"),
    "fork": ("SEQ CHILD", "CHILD shares every block of SEQ (beam search); counts go up"),
    "free": ("SEQ", "SEQ finishes: its blocks go back, last first"),
    "evict": (
        "[SEQ]",
        "preempt SEQ (default: the newest) by --preemption-mode: recompute, or swap to the host",
    ),
    "resume": ("SEQ", "bring a preempted SEQ back (swap in, or recompute its tokens)"),
}


def parse(text: str) -> tuple[str, list[str | int]]:
    """`alloc A 6` -> ("alloc", ["A", 6]) (N as an int); a Refused names what is wrong."""
    op, *words = text.split()
    if op not in STEPS:
        raise Refused(f"unknown command {op!r} (`help` lists them)")
    pattern = STEPS[op][0].split()
    required = [p for p in pattern if not p.startswith("[")]
    if not len(required) <= len(words) <= len(pattern):
        raise Refused(f"usage: {op} {STEPS[op][0]}")
    args: list[str | int] = []
    for spec, word in zip(pattern, words, strict=False):
        if spec.strip("[]") == "N":
            if not word.isdigit():
                raise Refused(f"{op}: {word!r} is not a whole number of tokens")
            args.append(int(word))
        else:
            args.append(word)
    return op, args


def prompt_tokens(word: str, n: int) -> list[int]:
    """n token ids that depend only on `word`: equal words give equal prefixes (prefix caching)."""
    base = zlib.crc32(word.encode()) % 100_000 * 10_000
    return [base + i for i in range(n)]


@dataclass
class Options:
    """The pool `play`'s flags ask for, under vLLM's engine-argument names."""

    num_gpu_blocks: int = 12  # --num-gpu-blocks-override
    block_size: int = 4
    enable_prefix_caching: bool = False
    sliding_window: int | None = None  # --sliding-window, in tokens (None: full attention)
    # what a short pool does: none (the step fails), recompute, swap
    preemption_mode: str = "none"
    hybrid: bool = False  # two KV cache groups: full attention + the sliding_window group

    def manager(self) -> KVCacheManager | HybridManager:
        if self.preemption_mode not in POLICIES:
            raise Refused(
                f"--preemption-mode must be one of {', '.join(POLICIES)}, "
                f"got {self.preemption_mode!r}"
            )
        if type(self.hybrid) is not bool:  # an old Options(hybrid=N): N is now sliding_window
            raise Refused(f"hybrid must be True or False, got {self.hybrid!r}")
        if self.hybrid:
            return self._hybrid()
        if self.enable_prefix_caching and self.sliding_window:
            raise Refused("choose --enable-prefix-caching or --sliding-window, not both")
        if self.enable_prefix_caching:
            return PrefixCachingManager(self.num_gpu_blocks, self.block_size)
        if self.sliding_window:
            from ..policies.sliding_window import SlidingWindowManager

            return SlidingWindowManager(
                self.num_gpu_blocks, self.block_size, sliding_window=self.sliding_window
            )
        return KVCacheManager(self.num_gpu_blocks, self.block_size, free_order="lifo")

    def _hybrid(self) -> HybridManager:
        """vLLM v1's hybrid allocator: both groups' tables are shown (A:full, A:window)."""
        if self.enable_prefix_caching or self.preemption_mode != "none":
            raise Refused(
                "--hybrid already caches prefixes; it takes no --enable-prefix-caching "
                "or --preemption-mode"
            )
        window = self.sliding_window
        if type(window) is not int or window < 1:
            raise Refused(f"--hybrid needs --sliding-window N (tokens >= 1), got {window!r}")
        return HybridManager(self.num_gpu_blocks, self.block_size, sliding_window=window)


# A note's English template -> its Chinese (same {fields}); `Note.said(lang)` picks one.
NOTES_ZH: dict[str, str] = tables.beside(__file__)["notes_zh"]

PREEMPTING = (
    "swapped seq {seq} out to the host ({n} blocks)",
    "preempted seq {seq}: {n} tokens to recompute",
)


def _preempted(said: str, m: Moment, lang: str) -> str:
    """`said` with "seq X finishes" told as "seq X is preempted" for each X that the moment
    preempted (the manager freed it, so the step's story calls it a finish)."""
    for note in m.notes:
        if isinstance(note, Note) and note.template in PREEMPTING:
            seq = note.fields["seq"]
            table = ZH if lang == "zh" else EN
            was = table["finish"].format(seq_id=seq)
            now = f"序列 {seq} 被抢占" if lang == "zh" else f"seq {seq} is preempted"
            said = said.replace(was, now)
    return said


class Note(str):
    """A note, in English as a str, that keeps its template and fields for `said(lang)`."""

    template: str  # the English template (NOTES_ZH's key)
    fields: dict[str, object]  # what fills it in

    def __new__(cls, template: str, **fields: object) -> Note:
        note = super().__new__(cls, template.format(**fields))
        note.template, note.fields = template, fields
        return note

    def said(self, lang: str) -> str:
        return t(self.template, lang, NOTES_ZH, **self.fields)


@dataclass
class Moment:
    command: str  # the command as typed
    snapshot: int  # index of the last snapshot it produced
    notes: list[str] = field(default_factory=list)  # what happened besides the manager's caption


class Session:
    cursor: int  # moments shown: 0 is the empty pool (set by _rebuild)

    def __init__(self, options: Options | None = None):
        self.options = options or Options()
        self._rebuild([])

    # ---- the timeline --------------------------------------------------------
    @property
    def snapshots(self) -> list[Snapshot]:
        assert self.manager.trace is not None, "a session's manager records a trace"
        return self.manager.trace.snapshots

    def current(self) -> Snapshot:
        """The snapshot the cursor shows (cursor 0: the empty pool)."""
        return self.snapshots[self.moments[self.cursor - 1].snapshot if self.cursor else 0]

    def back(self, n: int = 1) -> None:
        if self.cursor == 0:
            raise Refused("already at the start: nothing to go back to")
        self.cursor = max(0, self.cursor - n)

    def forward(self, n: int = 1) -> None:
        if self.cursor == len(self.moments):
            raise Refused("already at the newest step: nothing to go forward to")
        self.cursor = min(len(self.moments), self.cursor + n)

    def timeline(self, lang: str = "en") -> list[Snapshot]:
        """The snapshots up to the cursor, each captioned with the command that made it."""
        first = self.snapshots[0]
        out, k = [first.with_caption(caption(first, lang))], 0
        for m in self.moments[: self.cursor]:
            out += [self._captioned(m, i, lang) for i in range(k + 1, m.snapshot + 1)]
            k = m.snapshot
        return out

    def shown(self, lang: str = "en") -> Snapshot:
        """`timeline(lang)[-1]` without captioning every step before it."""
        if self.cursor == 0:
            return self.snapshots[0].with_caption(caption(self.snapshots[0], lang))
        m = self.moments[self.cursor - 1]
        return self._captioned(m, m.snapshot, lang)

    def _captioned(self, m: Moment, i: int, lang: str) -> Snapshot:
        """Snapshot i, made by moment m: the command, its notes and the step's caption (a
        sequence that m preempted "is preempted" there: it does not finish)."""
        snap = self.snapshots[i]
        said = _preempted(caption(snap, lang), m, lang)
        if i < m.snapshot:  # a step the command's preemption made on the way
            return snap.with_caption(
                t("`{command}` (preemption): {said}", lang, NOTES_ZH, command=m.command, said=said)
            )
        notes = [n.said(lang) if isinstance(n, Note) else n for n in m.notes]
        return snap.with_caption(f"`{m.command}`: " + "; ".join([*notes, said]))

    # ---- running commands ------------------------------------------------------
    def run(self, text: str) -> Moment:
        """Apply one step command (see STEPS); a refused one changes nothing and raises Refused."""
        op, args = parse(text)
        if self.cursor < len(self.moments):  # typing in the past: the future is cut off
            self._rebuild(self.moments[: self.cursor])
        before = len(self.snapshots)
        notes = self._apply(op, args)
        if len(self.snapshots) == before:  # the manager recorded no step
            raise Refused("nothing changed")
        self.manager.check_invariants()
        moment = Moment(
            " ".join(text.split()), len(self.snapshots) - 1, notes + self._pending_notes
        )
        self.moments.append(moment)
        self.cursor = len(self.moments)
        return moment

    def _rebuild(self, keep: list[Moment]) -> None:
        self.manager = self.options.manager()
        if self.options.preemption_mode != "none":
            self._preemptible().reclaimer = self._reclaim
        self.moments: list[Moment] = []
        self.cursor = 0
        self.host: dict[SeqId, tuple[list[int], int]] = {}  # swapped-out seq -> (table, tokens)
        self.preempted: dict[SeqId, int] = {}  # recompute-preempted seq -> tokens to prefill
        self.prompts: dict[SeqId, str] = {}  # seq -> prompt word (prefix caching)
        self._pending_notes: list[str] = []
        for m in keep:
            self.run(m.command)

    def _apply(self, op: str, args: list[str | int]) -> list[str]:
        m, notes = self.manager, []
        self._pending_notes = []
        try:
            if op == "alloc":
                seq, n = str(args[0]), int(args[1])
                if seq in self.host or seq in self.preempted:
                    raise Refused(f"seq {seq} is preempted: `resume {seq}` brings it back")
                if isinstance(m, (PrefixCachingManager, HybridManager)):  # ids for the cache
                    word = str(args[2]) if len(args) > 2 else seq
                    self.prompts[seq] = word
                    m.add_sequence(seq, n, prompt_tokens(word, n))
                else:
                    m.add_sequence(seq, n)
            elif op == "append":
                m.append_tokens(str(args[0]), int(args[1]) if len(args) > 1 else 1)
            elif op == "fork":
                if isinstance(m, HybridManager):
                    raise Refused(
                        "fork is vLLM v0's; the hybrid allocator is v1, which shares "
                        "blocks only through the prefix cache"
                    )
                m.fork(str(args[0]), str(args[1]))
            elif op == "free":
                m.free_sequence(str(args[0]))
            elif op == "evict":
                victim = str(args[0]) if args else self._victim(set())
                if victim is None:
                    raise Refused("no live sequence to evict")
                if victim not in m:
                    raise Refused(f"no live sequence {victim!r}")
                self._preempt(victim)
            elif op == "resume":
                notes.append(self._resume(str(args[0])))
        except Refused:
            raise
        except OutOfBlocks as e:
            notes.append(self._dry_note(e))
        except (SequenceError, BlockError, ValueError, TypeError) as e:  # refused before any change
            raise Refused(str(e)) from None
        finally:
            m.drain_copies()  # the copy kernel runs after every step: pairs show only where made
        return notes

    def _dry_note(self, e: OutOfBlocks) -> Note:
        if e.needed > self.manager.num_gpu_blocks:  # refused at admission: nobody was preempted
            return Note(
                "it needs {n} blocks, more than the whole pool of {m}: it can never "
                "fit, so nothing was preempted for it",
                n=e.needed,
                m=self.manager.num_gpu_blocks,
            )
        if self.options.preemption_mode != "none":
            return Note("the pool ran dry even after preempting")
        return Note(
            "the pool ran dry (with --preemption-mode recompute a sequence would be preempted)"
        )

    # ---- preemption (the chapter's evict_blocks) ------------------------------
    def _preemptible(self) -> KVCacheManager:
        """The manager, when a preemption policy runs it (--hybrid takes none)."""
        assert isinstance(self.manager, KVCacheManager), "--hybrid takes no --preemption-mode"
        return self.manager

    def _victim(self, protect: set[Hashable]) -> SeqId | None:
        live = [s for s in self.manager.seq_ids() if s not in protect]
        return live[-1] if live else None  # the newest, as vLLM's default scheduler picks

    def _reclaim(self, manager: KVCacheManager, short: int, protect: set[Hashable]) -> None:
        """The manager's reclaimer: preempt the newest unprotected sequences until `short`
        blocks are free."""
        while short > 0:
            seq = self._victim(protect)
            if seq is None:
                return
            before = manager.num_free_blocks
            self._preempt(seq)
            short -= manager.num_free_blocks - before

    def _preempt(self, seq: SeqId) -> None:
        if self.options.preemption_mode == "none":  # only `evict` gets here without one
            raise Refused(
                "evict needs a policy: start play with --preemption-mode recompute or swap"
            )
        m = self._preemptible()
        if PREEMPTION[self.options.preemption_mode].keeps_kv:  # swap: the table waits on the host
            table = m.block_table(seq)
            self.host[seq] = (list(table.blocks), table.num_tokens)
            self._pending_notes.append(
                Note("swapped seq {seq} out to the host ({n} blocks)", seq=seq, n=len(table))
            )
        else:
            self.preempted[seq] = m.num_tokens(seq)
            self._pending_notes.append(
                Note("preempted seq {seq}: {n} tokens to recompute", seq=seq, n=m.num_tokens(seq))
            )
        m.free_sequence(seq)

    def _resume(self, seq: str) -> str:
        if seq in self.host:
            labels, n = self.host[seq]
            self._preemptible().restore_sequences(
                {seq: (labels, n)}
            )  # the old ids are only labels here
            del self.host[seq]
            return Note("swapped seq {seq} back in", seq=seq)
        if seq in self.preempted:
            n, m = self.preempted[seq], self._preemptible()
            if isinstance(m, PrefixCachingManager):
                m.add_sequence(seq, n, prompt_tokens(self.prompts.get(seq, seq), n))
            else:
                m.add_sequence(seq, n)
            del self.preempted[seq]
            return Note("recomputed seq {seq}: its {n} tokens are prefilled again", seq=seq, n=n)
        raise Refused(f"seq {seq} was not preempted")
