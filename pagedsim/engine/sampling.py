"""vLLM's SamplingParams, with vLLM's names, defaults and semantics (vLLM v1, 0.34).

The next-token distribution is made from the model's logits in vLLM v1's order:

    1. min_tokens      while fewer than min_tokens are generated, the stop token ids (and
                       EOS unless ignore_eos) are masked to -inf
    2. penalties       repetition_penalty r over the prompt and output tokens: a logit > 0
                       is divided by r, any other multiplied by r; then frequency_penalty
                       x (times the token was generated) and presence_penalty (if it was)
                       are subtracted -- output tokens only, as vLLM does
    3. temperature     logits / temperature; temperature 0 is greedy (argmax), and one
                       below float32's smallest normal keeps only the top logits
    4. min_p           tokens whose probability is below min_p x the top probability go
    5. top_k           the k largest logits stay (0 or -1: all; ties at the k-th stay)
    6. top_p           the smallest set of top tokens whose probability reaches top_p stays

A token is then drawn from softmax(processed) with a stream seeded by (seed, sample
index, step), so batching never changes a token. `logprobs` are of the raw logits (vLLM's
"raw_logprobs").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    """vLLM's SamplingParams (the fields pagedsim serves), checked as vLLM checks them."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: no top-k (vLLM); transformers' generate defaults to 50
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    include_stop_str_in_output: bool = False

    def __post_init__(self) -> None:
        _check(self)
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        object.__setattr__(self, "stop", stop)
        object.__setattr__(self, "stop_token_ids", [int(t) for t in self.stop_token_ids or []])


@dataclass(frozen=True)
class BeamSearchParams:
    """vLLM's BeamSearchParams, served as v0 served beam search: beside sampled prompts in
    one batch, beams forking and sharing blocks (beam_search.py). `repetition_penalty` is
    pagedsim's (transformers') addition; beams rank raw log-probabilities, so
    `temperature` stays 0."""

    beam_width: int
    max_tokens: int
    ignore_eos: bool = False
    temperature: float = 0.0
    length_penalty: float = 1.0
    include_stop_str_in_output: bool = False
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        _int("beam_width", self.beam_width, 1)
        _int("max_tokens", self.max_tokens, 1)
        _number("temperature", self.temperature, 0.0, 0.0)
        _number("length_penalty", self.length_penalty, -math.inf, math.inf)
        _number("repetition_penalty", self.repetition_penalty, 0.0, math.inf, low_open=True)


def _number(name: str, value: object, low: float, high: float, low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or value < low or value > high or (low_open and value == low):
        bound = "(" if low_open else "["
        raise ValueError(f"{name} must be in {bound}{low:g}, {high:g}], got {value}")


def _int(name: str, value: object, low: int, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be at least {low}, got {value}")


def _check(p: SamplingParams) -> None:
    """vLLM's SamplingParams._verify_args, for these fields: one line per bad value."""
    _int("n", p.n, 1)
    _number("presence_penalty", p.presence_penalty, -2.0, 2.0)
    _number("frequency_penalty", p.frequency_penalty, -2.0, 2.0)
    _number("repetition_penalty", p.repetition_penalty, 0.0, math.inf, low_open=True)
    _number("temperature", p.temperature, 0.0, math.inf)
    _number("top_p", p.top_p, 0.0, 1.0, low_open=True)
    _int("top_k", p.top_k, -1)
    _number("min_p", p.min_p, 0.0, 1.0)
    _int("seed", p.seed, 0, allow_none=True)
    _int("max_tokens", p.max_tokens, 1, allow_none=True)
    _int("min_tokens", p.min_tokens, 0)
    if p.max_tokens is not None and p.min_tokens > p.max_tokens:
        raise ValueError(
            f"min_tokens must be at most max_tokens ({p.max_tokens}), got {p.min_tokens}"
        )
    _int("logprobs", p.logprobs, 0, allow_none=True)
    if not (p.stop is None or isinstance(p.stop, str)) and not (
        isinstance(p.stop, (list, tuple)) and all(isinstance(s, str) and s for s in p.stop)
    ):
        raise ValueError("stop must be a string or a list of non-empty strings")
    if isinstance(p.stop, str) and not p.stop:
        raise ValueError("stop must not be an empty string")
    ids = p.stop_token_ids or []
    if not isinstance(ids, (list, tuple)) or any(
        isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in ids
    ):
        raise ValueError("stop_token_ids must be a list of token ids (ints >= 0)")


def process(
    logits: np.ndarray,
    prompt: Sequence[int],
    output: Sequence[int],
    params: SamplingParams,
    eos: tuple[int, ...] = (),
) -> np.ndarray:
    """The processed logits (float32 [V], -inf where a token cannot be drawn), steps 1-6."""
    x = np.array(logits, np.float32)
    if len(output) < params.min_tokens:
        banned = set(params.stop_token_ids or ()) | (set() if params.ignore_eos else set(eos))
        banned_ids = [t for t in banned if 0 <= t < len(x)]
        x[banned_ids] = -np.inf
    x = penalize(x, prompt, output, params)
    if params.temperature == 0:
        return x
    if np.float32(params.temperature) < np.finfo(np.float32).tiny:  # x / T would overflow:
        top: np.ndarray = np.where(x == x.max(), np.float32(0), np.float32(-np.inf))
        return top  # only the maxima stay
    x = x / np.float32(params.temperature)
    if params.min_p > 0:
        x = np.where(x < x.max() + np.float32(math.log(params.min_p)), -np.inf, x)
    if 0 < params.top_k < len(x):
        x = np.where(x < np.partition(x, -params.top_k)[-params.top_k], -np.inf, x)
    if params.top_p < 1:
        x = _top_p(x, params.top_p)
    return x.astype(np.float32)


def penalize(
    x: np.ndarray, prompt: Sequence[int], output: Sequence[int], params: SamplingParams
) -> np.ndarray:
    """Repetition (prompt and output), frequency and presence (output) penalties."""
    r, f, pres = params.repetition_penalty, params.frequency_penalty, params.presence_penalty
    if r == 1 and f == 0 and pres == 0:
        return x
    out = np.asarray(output, np.int64)
    seen = np.unique(np.concatenate([np.asarray(prompt, np.int64), out]))
    seen = seen[(seen >= 0) & (seen < len(x))]
    if r != 1:
        row = x[seen]
        x[seen] = np.where(row > 0, row / np.float32(r), row * np.float32(r))
    if len(out) and (f != 0 or pres != 0):
        ids, counts = np.unique(out[(out >= 0) & (out < len(x))], return_counts=True)
        x[ids] -= np.float32(f) * counts.astype(np.float32) + np.float32(pres)
    return x


def _top_p(x: np.ndarray, top_p: float) -> np.ndarray:
    """vLLM's top-p: sort ascending, drop the tokens whose cumulative probability stays at
    or below 1 - top_p (the most likely token always stays)."""
    order = np.argsort(x, kind="stable")
    ranked = x[order].astype(np.float64)
    p = np.exp(ranked - ranked.max())
    cumulative = np.cumsum(p / p.sum())
    drop = cumulative <= 1 - top_p
    drop[-1] = False
    out: np.ndarray = x.copy()
    out[order[drop]] = -np.inf
    return out


def distribution(processed: np.ndarray) -> np.ndarray:
    """softmax of processed logits, float64 (a greedy request: one-hot at the argmax)."""
    x = np.asarray(processed, np.float64)
    p = np.exp(x - x.max())
    out: np.ndarray = p / p.sum()
    return out


def draw(processed: np.ndarray, params: SamplingParams, index: int, step: int) -> int:
    """The next token: argmax when temperature is 0, else a draw from the distribution
    seeded by (seed, sample index, step) (Gumbel-max, so -inf tokens never win)."""
    if params.temperature == 0:
        return int(np.argmax(processed))
    seed = 0 if params.seed is None else params.seed
    u = np.random.default_rng([seed, index, step]).random(len(processed))
    gumbel = -np.log(-np.log(np.clip(u, 1e-300, 1.0)))
    with np.errstate(invalid="ignore"):
        return int(np.argmax(np.asarray(processed, np.float64) + gumbel))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 log-probabilities of logits [V]."""
    x = np.asarray(logits, np.float64)
    x = x - x.max()
    return np.asarray(x - np.log(np.exp(x).sum()))


def top_logprobs(logits: np.ndarray, token: int, n: int) -> dict[int, float]:
    """{token id: log-probability} of the n most likely tokens and the chosen one, from
    the raw logits (vLLM's raw_logprobs)."""
    lp = log_softmax(logits)
    best = np.argsort(-lp, kind="stable")[:n]
    return {int(t): float(lp[t]) for t in [token, *best.tolist()]}
