"""Hypothesis strategies for workloads (`requests`) and manager calls (`operations`);
`paged_caches()` lives in caches.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from ..workloads import Request


@dataclass(frozen=True)
class PromptedRequest:
    request: Request  # lengths, n / beam width
    prompt: tuple[int, ...]  # token ids, len == request.prompt_len
    shared_prefix: int = 0  # leading tokens drawn from a prefix other requests may share


@st.composite
def requests(
    draw: st.DrawFn,
    *,
    max_requests: int = 4,
    max_prompt: int = 24,
    max_output: int = 16,
    max_samples: int = 4,
    num_prefixes: int = 2,
    vocab: int = 50,
) -> list[PromptedRequest]:
    """A list of PromptedRequest. Each uses parallel sampling (n) or beam search, not both;
    prompts start with one of `num_prefixes` shared prefixes (or none)."""
    prefixes = draw(
        st.lists(
            st.lists(st.integers(0, vocab - 1), min_size=1, max_size=max(1, max_prompt // 2)),
            min_size=num_prefixes,
            max_size=num_prefixes,
        )
    )
    out: list[PromptedRequest] = []
    for _ in range(draw(st.integers(1, max_requests))):
        which = draw(st.integers(-1, num_prefixes - 1))  # -1: no shared prefix
        prefix = prefixes[which] if which >= 0 else []
        tail = draw(
            st.lists(
                st.integers(0, vocab - 1),
                min_size=0 if prefix else 1,
                max_size=max(1, max_prompt - len(prefix)),
            )
        )
        samples = draw(st.integers(1, max_samples))
        beam = draw(st.booleans()) and samples > 1
        request = Request(
            prompt_len=len(prefix) + len(tail),
            output_len=draw(st.integers(1, max_output)),
            n=1 if beam else samples,
            beam_width=samples if beam else 1,
        )
        out.append(PromptedRequest(request, tuple(prefix + tail), len(prefix)))
    return out


@dataclass(frozen=True)
class Op:
    """One manager call. str(op) is the Python line; op.apply(m) makes the call."""

    name: str  # add_sequence, append_tokens, fork or free_sequence
    args: tuple[int, ...]

    def apply(self, manager: object) -> object:
        return getattr(manager, self.name)(*self.args)

    def __str__(self) -> str:
        return f"m.{self.name}({', '.join(map(repr, self.args))})"


def operations(
    *, max_ops: int = 20, max_id: int = 4, max_tokens: int = 12
) -> st.SearchStrategy[list[Op]]:
    """Lists of Ops with ids in 0..max_id. Nothing tracks which ids are live, so some
    calls name unknown sequences, add an id twice or fork into a live id: a manager
    must reject those (and change nothing), and accept the rest."""
    ids = st.integers(0, max_id)
    counts = st.integers(1, max_tokens)
    op = st.one_of(
        st.builds(lambda s, n: Op("add_sequence", (s, n)), ids, counts),
        st.builds(lambda s, n: Op("append_tokens", (s, n)), ids, counts),
        st.builds(lambda p, c: Op("fork", (p, c)), ids, ids),
        st.builds(lambda s: Op("free_sequence", (s,)), ids),
    )
    return st.lists(op, max_size=max_ops)
