"""Requests and what happens after each forward pass: sampling, parallel samples, beams.

Both engines (dense and paged) drive the same `RequestState`, so they cannot differ in
*what* is generated, only in how attention reads K/V. After a forward pass gives the
logits at the last token of every live sequence of a request, `advance` picks tokens
and returns the storage actions the engine must mirror:

    ("fork", parent, child)  the child starts as a copy of the parent (KV shared: v0 fork)
    ("free", seq)            the sequence is gone (a beam that fell out, or the request ended)

Sampling depends only on (request seed, sample index, step), never on batch
composition, so preemption and scheduling cannot change a token:
    temperature 0  -> argmax (ties: lowest id)
    temperature >0 -> argmax(logits / T + Gumbel noise from rng(seed, index, step))
n > 1 (parallel sampling, v0 style) forks n - 1 children after the prompt; beam search
(beam_width W, vLLM v0's beam search) keeps the W best (beam, token) by cumulative
log-probability, forking a beam that wins twice and freeing beams that win nothing.
Every request generates exactly max_tokens tokens (no end-of-sequence token).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Request:
    prompt: tuple  # token ids
    max_tokens: int  # tokens generated per sequence
    n: int = 1  # parallel samples (ignored with beam search)
    beam_width: int = 0  # 0: sampling; W >= 1: beam search with W beams
    temperature: float = 0.0  # 0: greedy
    seed: int = 0

    def __post_init__(self):
        if len(self.prompt) < 1 or self.max_tokens < 1 or self.n < 1 or self.beam_width < 0:
            raise ValueError(f"bad request {self}: need a prompt, max_tokens >= 1, n >= 1")

    @property
    def width(self) -> int:
        """Sequences the request runs at once after its prompt."""
        return self.beam_width or self.n


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, np.float64)
    x = x - x.max()
    return x - np.log(np.exp(x).sum())


def sample(logits: np.ndarray, temperature: float, seed: int, index: int, step: int) -> int:
    if temperature == 0:
        return int(np.argmax(logits))
    u = np.random.default_rng([seed, index, step]).random(len(logits))
    gumbel = -np.log(-np.log(np.clip(u, 1e-300, 1.0)))
    return int(np.argmax(np.asarray(logits, np.float64) / temperature + gumbel))


class RequestState:
    """One request's live sequences: seq key -> token list, plus scores and sample ids."""

    def __init__(self, rid: int, request: Request):
        self.rid, self.request = rid, request
        self.tokens = {self.key(0): list(request.prompt)}  # seq key -> all tokens so far
        self.score = {self.key(0): 0.0}  # cumulative log-probability (beam search)
        self.index = {self.key(0): 0}  # sample index: the sampling stream of the sequence
        self.generated = 0  # tokens generated per sequence so far
        self.logits: dict = {}  # tuple(tokens) -> logits at their last token (for comparisons)
        self._next = 1

    def key(self, k: int) -> str:
        return f"r{self.rid}.{k}"

    @property
    def done(self) -> bool:
        return self.generated >= self.request.max_tokens

    def seq_keys(self) -> list:
        return list(self.tokens)

    def outputs(self) -> list:
        """Generated tokens of each sequence: by score (beams) or by sample index."""
        order = sorted(self.tokens, key=lambda s: (-self.score[s], self.index[s])
                       if self.request.beam_width else self.index[s])
        return [self.tokens[s][len(self.request.prompt):] for s in order]

    def advance(self, logits: dict) -> list:
        """Consume logits {seq: [V]} for every live sequence; append tokens; return actions."""
        assert set(logits) == set(self.tokens), "logits must cover exactly the live sequences"
        for s, row in logits.items():
            self.logits[tuple(self.tokens[s])] = np.asarray(row, np.float32).copy()
        if self.request.beam_width:
            picks = self._beam_picks(logits)
        else:
            picks = self._sample_picks(logits)
        actions, used, appends = [], set(), []
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
        self.generated += 1
        return actions

    def _sample_picks(self, logits: dict) -> list:
        r, step = self.request, self.generated
        if step == 0 and r.n > 1:  # the prompt's logits serve all n samples
            (s, row), = logits.items()
            return [(s, sample(row, r.temperature, r.seed, i, step), 0.0, i) for i in range(r.n)]
        return [(s, sample(row, r.temperature, r.seed, self.index[s], step), 0.0, self.index[s])
                for s, row in sorted(logits.items(), key=lambda kv: self.index[kv[0]])]

    def _beam_picks(self, logits: dict) -> list:
        beams = sorted(logits, key=lambda s: self.index[s])
        cand = np.stack([self.score[s] + log_softmax(logits[s]) for s in beams])  # [beams, V]
        flat = cand.ravel()
        order = np.lexsort((np.arange(len(flat)), -flat))[:self.request.beam_width]
        vocab = cand.shape[1]
        picks = [(beams[i // vocab], int(i % vocab), float(flat[i])) for i in order]
        # the k-th best keeps beam slot k: a stable sample index per rank
        return [(s, tok, score, k) for k, (s, tok, score) in enumerate(picks)]
