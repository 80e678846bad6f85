"""Request traces: seeded synthetic ShareGPT/Alpaca workloads and CSV traces (vLLM paper, Fig. 11).

The vLLM paper (Sec. 6.1) reports the datasets' mean lengths; we do not ship the datasets.
`synthetic` draws each length from a log-normal, rounded and clipped to [1, cap], with `mu`
solved by bisection so that the *clipped* mean equals the paper's (`DATASETS`).

A CSV trace (UTF-8, a BOM allowed) has the header `prompt_len,output_len` and optional
columns `n`, `beam_width` and `arrival_step`, within MAX_SEQ_LEN, MAX_SAMPLES, MAX_REQUESTS
and MAX_ARRIVAL (a typo never exhausts memory or overflows int64).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .errors import count_arg

MAX_SEQ_LEN = 1 << 24
MAX_SAMPLES = 256
MAX_REQUESTS = 1_000_000
MAX_ARRIVAL = (1 << 31) - 1

StrPath = str | os.PathLike[str]  # a file name, as open() takes it


@dataclass(frozen=True)
class Request:
    prompt_len: int  # tokens in the prompt (prefilled at admission)
    output_len: int  # tokens each sequence decodes, one per step
    n: int = 1  # parallel samples that share the prompt (fork after the prompt)
    beam_width: int = 1  # beams that share the prompt and, pairwise, their history
    arrival_step: int = 0  # the scheduler step at which the request becomes waiting

    def __post_init__(self) -> None:
        for name, low, high in (
            ("prompt_len", 1, MAX_SEQ_LEN),
            ("output_len", 1, MAX_SEQ_LEN),
            ("n", 1, MAX_SAMPLES),
            ("beam_width", 1, MAX_SAMPLES),
            ("arrival_step", 0, MAX_ARRIVAL),
        ):
            object.__setattr__(
                self, name, count_arg(f"Request.{name}", getattr(self, name), low, high)
            )
        if self.n > 1 and self.beam_width > 1:
            raise ValueError("a request uses either parallel sampling (n) or beam search, not both")

    @property
    def total_len(self) -> int:
        """L = prompt + output: each sequence's final length."""
        return self.prompt_len + self.output_len

    @property
    def num_seqs(self) -> int:
        return max(self.n, self.beam_width)


# name -> ((mean, sigma, cap) for the input, (mean, sigma, cap) for the output); the caps:
# ShareGPT's prompt + output <= 2048 (OPT's context), Alpaca's where the paper's histograms end
DATASETS = {
    "sharegpt": ((161.31, 1.0, 1024), (337.99, 0.9, 1024)),
    "alpaca": ((19.31, 0.6, 256), (58.45, 0.8, 512)),
}


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _clipped_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X ~ LogNormal(mu, sigma)."""
    z = math.log(cap)
    return math.exp(mu + sigma * sigma / 2) * _phi((z - mu - sigma * sigma) / sigma) + cap * (
        1.0 - _phi((z - mu) / sigma)
    )


def _solve_mu(mean: float, sigma: float, cap: float) -> float:
    lo, hi = -10.0, math.log(cap) + 10.0
    for _ in range(80):  # the clipped mean is increasing in mu
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _clipped_mean(mid, sigma, cap) < mean else (lo, mid)
    return (lo + hi) / 2


def lengths(name: str, num_requests: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The prompt and output lengths of `synthetic`, as two int64 arrays."""
    if not isinstance(name, str):
        raise TypeError(f"workload name must be a str, got {type(name).__name__}")
    if name not in DATASETS:
        raise ValueError(f"unknown workload {name!r}; choose one of {sorted(DATASETS)}")
    num_requests = count_arg("num_requests", num_requests, 0, MAX_REQUESTS)
    seed = count_arg("seed", seed, 0, (1 << 64) - 1)
    rng = np.random.default_rng(seed)
    out = []
    for mean, sigma, cap in DATASETS[name]:
        draw = rng.lognormal(_solve_mu(mean, sigma, cap), sigma, num_requests)
        out.append(np.clip(np.rint(draw), 1, cap).astype(np.int64))
    return out[0], out[1]


def synthetic(
    name: str, num_requests: int, seed: int = 0, *, n: int = 1, beam_width: int = 1
) -> list[Request]:
    """`num_requests` seeded requests with the dataset's length statistics, arriving at step 0."""
    prompts, outputs = lengths(name, num_requests, seed)
    return [Request(int(p), int(o), n, beam_width) for p, o in zip(prompts, outputs, strict=True)]


def request_list(requests: Iterable[object]) -> list[Request]:
    """`requests` as a list, every item a Request (TypeError otherwise)."""
    if isinstance(requests, (str, bytes)) or not hasattr(requests, "__iter__"):
        raise TypeError(f"requests must be an iterable of Request, got {type(requests).__name__}")
    checked: list[Request] = []
    for i, r in enumerate(list(requests)):
        if not isinstance(r, Request):
            raise TypeError(f"requests[{i}] must be a Request, got {type(r).__name__} {r!r}")
        checked.append(r)
    return checked


COLUMNS = ("prompt_len", "output_len", "n", "beam_width", "arrival_step")
REQUIRED = COLUMNS[:2]


def as_arrays(requests: Iterable[Request]) -> dict[str, np.ndarray]:
    """Columns of a request list as int64 arrays (for the vectorised labs)."""
    requests = request_list(requests)
    return {
        f: np.fromiter((getattr(r, f) for r in requests), np.int64, len(requests)) for f in COLUMNS
    }


def write_csv(requests: Iterable[Request], path: StrPath) -> None:
    """Write a trace; optional columns are written only if some request uses them."""
    requests = request_list(requests)
    cols = list(REQUIRED) + [
        c
        for c in COLUMNS[2:]
        if any(getattr(r, c) != Request.__dataclass_fields__[c].default for r in requests)
    ]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in requests:
            w.writerow([getattr(r, c) for c in cols])


def read_csv(path: StrPath) -> list[Request]:
    """Read a trace; ValueError names the file, line and column of a bad row."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            return _read_rows(csv.reader(f), path)
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise ValueError(f"{path}: not a CSV file ({e})") from None


def _read_rows(reader: Iterator[list[str]], path: StrPath) -> list[Request]:
    """The requests of a CSV reader positioned at the header."""
    header = next(reader, None)
    if header is None:
        raise ValueError(f"{path}: empty file; expected the header {','.join(REQUIRED)}")
    header = [h.strip() for h in header]
    missing = [c for c in REQUIRED if c not in header]
    unknown = [c for c in header if c not in COLUMNS]
    if missing or unknown or len(set(header)) != len(header):
        raise ValueError(
            f"{path}: bad header {header}: needs {list(REQUIRED)}, may add "
            f"{list(COLUMNS[2:])}, each once"
        )
    out: list[Request] = []
    for line, row in enumerate(reader, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(out) == MAX_REQUESTS:
            raise ValueError(f"{path}: more than {MAX_REQUESTS:,} requests")
        if len(row) != len(header):
            raise ValueError(f"{path}:{line}: expected {len(header)} fields, got {len(row)}")
        values: dict[str, int] = {}
        for col, cell in zip(header, row, strict=True):
            try:
                values[col] = int(cell.strip())
            except ValueError:
                raise ValueError(
                    f"{path}:{line}: {col} must be an integer, got {cell[:20]!r}"
                ) from None
        try:
            out.append(Request(**values))
        except ValueError as e:
            raise ValueError(f"{path}:{line}: {e}") from None
    return out


def prompt_tokens(
    requests: Iterable[Request],
    seed: int = 0,
    *,
    num_prefixes: int = 8,
    vocab: int = 32000,
    prefix_lens: Sequence[int] = (16, 512),
) -> list[np.ndarray]:
    """Token ids for each prompt, for prefix caching: one of `num_prefixes` shared system
    prompts (length in `prefix_lens`, prefix k with weight 1/(k+1)), then at least one
    fresh random token."""
    requests = request_list(requests)
    seed = count_arg("seed", seed, 0, (1 << 64) - 1)
    num_prefixes = count_arg("num_prefixes", num_prefixes, 1, 1 << 16)
    vocab = count_arg("vocab", vocab, 1, 1 << 62)
    if not isinstance(prefix_lens, (tuple, list)) or len(prefix_lens) != 2:
        raise TypeError(f"prefix_lens must be a (low, high) pair, got {prefix_lens!r}")
    lo, hi = (count_arg("prefix_lens", x, 1, MAX_SEQ_LEN) for x in prefix_lens)
    if lo > hi:
        raise ValueError(f"prefix_lens must have low <= high, got {prefix_lens}")
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(0, vocab, int(rng.integers(lo, hi + 1))) for _ in range(num_prefixes)]
    weights = 1.0 / np.arange(1, num_prefixes + 1)
    choice = rng.choice(num_prefixes, size=len(requests), p=weights / weights.sum())
    out = []
    for r, k in zip(requests, choice, strict=True):
        shared = prefixes[k][: max(0, r.prompt_len - 1)]
        out.append(np.concatenate([shared, rng.integers(0, vocab, r.prompt_len - len(shared))]))
    return out
