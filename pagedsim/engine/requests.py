"""Requests and what happens after each forward pass: sampling, parallel samples, beams.

Both engines (dense and paged) drive the same `RequestState`, so they differ only in how
attention reads K/V. Given the logits at the last token of each live sequence, `advance`
picks tokens and returns the storage actions the engine must mirror:

    ("fork", parent, child)  the child starts as a copy of the parent (KV shared: v0 fork)
    ("free", seq)            the sequence is gone (a beam that fell out, or the request ended)

Sampling (sampling.py) depends only on (seed, sample index, step), never on the batch, so
preemption cannot change a token. n > 1 (v0 style) forks n - 1 children after the prompt;
beam search keeps the W best (beam, token) (beam_search.py). A sampled sequence ends after
one of `stop_token_ids`, kept as in vLLM's output ids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import count_arg, token_ids_arg
from . import beam_search as bs
from . import sampling

Logits = np.ndarray[Any, np.dtype[Any]]  # [V] one position's logits
Pick = tuple[str, int, float, int]  # (parent seq, token, cumulative log-prob, sample index)


@dataclass(frozen=True)
class Request:
    prompt: tuple[int, ...]  # token ids
    max_tokens: int  # tokens generated per sequence (fewer if a stop token comes first)
    n: int = 1  # parallel samples (ignored with beam search)
    beam_width: int = 0  # 0: sampling; W >= 1: beam search with W beams
    temperature: float = 0.0  # 0: greedy
    seed: int = 0  # with (sample index, step): the sampling stream
    top_p: float = 1.0  # nucleus sampling: 1 keeps every token
    stop_token_ids: tuple[int, ...] = ()  # a sequence (sampled, or a beam) ends after emitting one
    length_penalty: float = 1.0  # beam search: hypotheses score log-prob / length ** this
    repetition_penalty: float = 1.0  # > 1 discourages tokens already in the sequence
    top_k: int = 0  # keep the k most likely tokens when sampling; 0 keeps all
    params: sampling.SamplingParams | None = None  # vLLM sampling: replaces the fields above

    def __post_init__(self) -> None:
        prompt = token_ids_arg("prompt", self.prompt)
        if not prompt:
            raise ValueError("prompt must hold at least one token id")
        object.__setattr__(self, "prompt", prompt)
        object.__setattr__(
            self, "stop_token_ids", token_ids_arg("stop_token_ids", self.stop_token_ids)
        )
        count_arg("max_tokens", self.max_tokens, 1)
        count_arg("n", self.n, 1)
        count_arg("beam_width", self.beam_width, 0)
        count_arg("seed", self.seed, 0, 2**63 - 1)
        object.__setattr__(self, "temperature", _real("temperature", self.temperature))
        object.__setattr__(self, "top_p", _real("top_p", self.top_p, 1.0))
        if self.top_p == 0:
            raise ValueError("top_p must be in (0, 1], got 0")
        penalty = _real("length_penalty", self.length_penalty, low=-math.inf)
        object.__setattr__(self, "length_penalty", penalty)
        object.__setattr__(
            self, "repetition_penalty", _real("repetition_penalty", self.repetition_penalty)
        )
        if self.repetition_penalty == 0:
            raise ValueError("repetition_penalty must be > 0, got 0")
        count_arg("top_k", self.top_k, 0)

    @property
    def width(self) -> int:
        """Sequences the request runs at once after its prompt."""
        return self.beam_width or self.n


def _real(name: str, value: object, high: float = math.inf, low: float = 0.0) -> float:
    """A finite real number in [low, high] (a bool, a string or NaN is refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if not (math.isfinite(value) and low <= value <= high):
        bounds = "" if low == -math.inf else f" in [{low:g}, {high:g}]"
        raise ValueError(f"{name} must be a finite number{bounds}, got {value}")
    return value


def seq_key(seq_id: tuple[int, int]) -> str:
    """A scheduler's sequence id (request, sample) as RequestState names it: (1, 0) -> "r1.0"."""
    return f"r{seq_id[0]}.{seq_id[1]}"


def seq_id(key: str) -> tuple[int, int]:
    """The scheduler's sequence id of a RequestState key: "r1.0" -> (1, 0)."""
    request, sample = key[1:].split(".")
    return int(request), int(sample)


class RequestState:
    """One request's live sequences: seq key -> token list, plus scores and sample ids."""

    def __init__(self, rid: int, request: Request, keep_logits: bool = False):
        self.rid, self.request = rid, request
        # a Request's own fields as SamplingParams (a beam search ranks the raw log-probs)
        self.params = request.params or sampling.SamplingParams(
            temperature=0.0 if request.beam_width else request.temperature,
            top_p=request.top_p,
            top_k=int(request.top_k),
            repetition_penalty=request.repetition_penalty,
            seed=int(request.seed),
        )
        # keep every position's logits: the dense comparison, or the request's logprobs
        self.keep_logits = keep_logits or self.params.logprobs is not None
        self.tokens = {self.key(0): list(request.prompt)}  # seq key -> all tokens so far
        self.score = {self.key(0): 0.0}  # cumulative log-probability (beam search)
        self.index = {self.key(0): 0}  # sample index: the sampling stream of the sequence
        # seq key -> all tokens, for sequences that hit a stop token
        self.finished: dict[str, list[int]] = {}
        # beam search: (score, order, all tokens), best first
        self.hypotheses: list[bs.Hypothesis] = []
        self.generated = 0  # tokens generated per sequence so far
        # tuple(tokens) -> logits at their last token (only with keep_logits)
        self.logits: dict[tuple[int, ...], Logits] = {}
        self._next = 1

    def key(self, k: int) -> str:
        return seq_key((self.rid, k))

    @property
    def done(self) -> bool:
        return self.generated >= self.request.max_tokens or not self.tokens

    def seq_keys(self) -> list[str]:
        return list(self.tokens)

    def outputs(self) -> list[list[int]]:
        """Generated tokens of each sequence: the finished hypotheses, best first (beams),
        or every sample by sample index."""
        start = len(self.request.prompt)
        if self.request.beam_width:
            return [tokens[start:] for _, _, tokens in self.hypotheses]
        every = {**self.tokens, **self.finished}
        return [every[s][start:] for s in sorted(every, key=lambda s: self.index[s])]

    def advance(self, logits: dict[str, Logits]) -> list[tuple[str, ...]]:
        """Consume logits {seq: [V]} for every live sequence; append tokens; return actions."""
        assert set(logits) == set(self.tokens), "logits must cover exactly the live sequences"
        if self.keep_logits:
            for s, row in logits.items():
                self.logits[tuple(self.tokens[s])] = np.asarray(row, np.float32).copy()
        if self.request.beam_width:
            picks = self._beam_picks(logits)
        else:
            picks = self._sample_picks(logits)
        actions: list[tuple[str, ...]] = []
        used, appends = set(), []
        for parent, token, score, index in picks:  # parents in key order, best first
            if parent not in used:
                used.add(parent)
                appends.append((parent, token, score, index))
                continue
            child = self.key(self._next)
            self._next += 1
            self.tokens[child] = list(self.tokens[parent])
            actions.append(("fork", parent, child))
            used.add(child)
            appends.append((child, token, score, index))
        for s in [s for s in list(self.tokens) if s not in used]:
            del self.tokens[s], self.score[s], self.index[s]
            actions.append(("free", s))
        for s, token, score, index in appends:
            self.tokens[s].append(token)
            self.score[s], self.index[s] = score, index
            if token in self.request.stop_token_ids and not self.request.beam_width:
                self.finished[s] = self.tokens.pop(s)
                actions.append(("free", s))
        self.generated += 1
        return actions

    def _sample_picks(self, logits: dict[str, Logits]) -> list[Pick]:
        r, step, prompt = self.request, self.generated, self.request.prompt
        picks = []
        for s in sorted(logits, key=lambda s: self.index[s]):
            output = self.tokens[s][len(prompt) :]
            processed = sampling.process(logits[s], prompt, output, self.params, r.stop_token_ids)
            # the prompt's logits serve all n samples
            indices = range(r.n) if step == 0 and r.n > 1 else [self.index[s]]
            picks += [(s, sampling.draw(processed, self.params, i, step), 0.0, i) for i in indices]
        return picks

    def _beam_picks(self, logits: dict[str, Logits]) -> list[Pick]:
        """The surviving beams as picks (none when the search ends early); this step's
        hypotheses join self.hypotheses. See beam_search.py for the rules."""
        r, p = self.request, self.request.prompt
        width, length = r.beam_width, self.generated + 1
        last = length >= r.max_tokens
        beams = sorted(logits, key=lambda s: self.index[s])
        cand = bs.top_candidates(
            [self.score[s] for s in beams],
            [  # the repetition-penalised logits (temperature 0: nothing else)
                sampling.log_softmax(
                    sampling.process(logits[s], p, self.tokens[s][len(p) :], self.params)
                )
                for s in beams
            ],
            bs.num_candidates(width, r.stop_token_ids),
        )
        picks: list[tuple[str, int, float, int]] = []
        found = list(self.hypotheses)
        for rank, (b, token, score) in enumerate(cand):
            if last or token in r.stop_token_ids:
                if rank < width:
                    found.append(
                        (
                            bs.hypothesis_score(score, length, r.length_penalty),
                            (self.generated, rank),
                            [*self.tokens[beams[b]], token],
                        )
                    )
            if token not in r.stop_token_ids and len(picks) < width:
                # the k-th best keeps beam slot k: a stable sample index per rank
                picks.append((beams[b], token, score, len(picks)))
        self.hypotheses = bs.keep_best(found, width)
        if last:
            return picks
        best = bs.hypothesis_score(picks[0][2], length, r.length_penalty) if picks else None
        if best is None or bs.cannot_improve(self.hypotheses, width, best):
            return []  # no beam can beat the hypotheses: every beam is freed, the request ends
        return picks
