"""Request traces: seeded synthetic ShareGPT/Alpaca workloads and CSV traces (vLLM paper, Fig. 11).

The vLLM paper (Kwon et al., SOSP 2023, Sec. 6.1 and Fig. 11) samples requests from
two datasets and reports their mean lengths in tokens:

    sharegpt   input 161.31   output 337.99   (long multi-turn chats)
    alpaca     input  19.31   output  58.45   (short instructions)

We do not ship the datasets. `synthetic` draws each length from a log-normal
distribution (right-skewed, like the paper's histograms), rounds it to an int and
clips it to [1, cap]. The log-normal's `mu` is solved (by bisection on the closed-form
mean of a clipped log-normal) so that the *clipped* mean equals the paper's mean;
measured means land within a few percent for a few thousand requests.

    dataset    sigma in/out   cap in/out    why the caps
    sharegpt   1.0 / 0.9      1024 / 1024   prompt + output <= 2048, OPT's context length
    alpaca     0.6 / 0.8       256 /  512   the paper's Alpaca histograms end there

A trace is also a CSV file with the header `prompt_len,output_len` and optional
columns `n` (parallel samples), `beam_width` and `arrival_step`.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Request:
    prompt_len: int  # tokens in the prompt (prefilled at admission)
    output_len: int  # tokens each sequence decodes, one per step
    n: int = 1  # parallel samples that share the prompt (fork after the prompt)
    beam_width: int = 1  # beams that share the prompt and, pairwise, their history
    arrival_step: int = 0  # the scheduler step at which the request becomes waiting

    def __post_init__(self):
        for name, low in (("prompt_len", 1), ("output_len", 1), ("n", 1), ("beam_width", 1),
                          ("arrival_step", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"Request.{name} must be an int >= {low}, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.n > 1 and self.beam_width > 1:
            raise ValueError("a request uses either parallel sampling (n) or beam search, not both")

    @property
    def total_len(self) -> int:
        """L = prompt + output: the final length of each of its sequences."""
        return self.prompt_len + self.output_len

    @property
    def num_seqs(self) -> int:
        return max(self.n, self.beam_width)


# name -> ((mean, sigma, cap) for the input, (mean, sigma, cap) for the output)
DATASETS = {
    "sharegpt": ((161.31, 1.0, 1024), (337.99, 0.9, 1024)),
    "alpaca": ((19.31, 0.6, 256), (58.45, 0.8, 512)),
}


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _clipped_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X ~ LogNormal(mu, sigma)."""
    z = math.log(cap)
    return (math.exp(mu + sigma * sigma / 2) * _phi((z - mu - sigma * sigma) / sigma)
            + cap * (1.0 - _phi((z - mu) / sigma)))


def _solve_mu(mean: float, sigma: float, cap: float) -> float:
    lo, hi = -10.0, math.log(cap) + 10.0
    for _ in range(80):  # the clipped mean is increasing in mu
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _clipped_mean(mid, sigma, cap) < mean else (lo, mid)
    return (lo + hi) / 2


def lengths(name: str, num_requests: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The prompt and output lengths of `synthetic`, as two int64 arrays."""
    if name not in DATASETS:
        raise ValueError(f"unknown workload {name!r}; choose one of {sorted(DATASETS)}")
    if isinstance(num_requests, bool) or not isinstance(num_requests, int) or num_requests < 0:
        raise ValueError(f"num_requests must be a non-negative int, got {num_requests!r}")
    rng = np.random.default_rng(seed)
    out = []
    for mean, sigma, cap in DATASETS[name]:
        draw = rng.lognormal(_solve_mu(mean, sigma, cap), sigma, num_requests)
        out.append(np.clip(np.rint(draw), 1, cap).astype(np.int64))
    return out[0], out[1]


def synthetic(name: str, num_requests: int, seed: int = 0, *, n: int = 1,
              beam_width: int = 1) -> list[Request]:
    """`num_requests` seeded requests with the dataset's length statistics, all arriving at step 0."""
    prompts, outputs = lengths(name, num_requests, seed)
    return [Request(int(p), int(o), n, beam_width) for p, o in zip(prompts, outputs)]


def as_arrays(requests) -> dict[str, np.ndarray]:
    """Columns of a request list as int64 arrays (for the vectorised labs)."""
    fields = ("prompt_len", "output_len", "n", "beam_width", "arrival_step")
    return {f: np.fromiter((getattr(r, f) for r in requests), np.int64, len(requests))
            for f in fields}


COLUMNS = ("prompt_len", "output_len", "n", "beam_width", "arrival_step")
REQUIRED = COLUMNS[:2]


def write_csv(requests, path) -> None:
    """Write a trace; optional columns are written only if some request uses them."""
    requests = list(requests)
    cols = list(REQUIRED) + [c for c in COLUMNS[2:]
                             if any(getattr(r, c) != Request.__dataclass_fields__[c].default
                                    for r in requests)]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in requests:
            w.writerow([getattr(r, c) for c in cols])


def read_csv(path) -> list[Request]:
    """Read a trace. Raises ValueError naming the file, line and column of a bad row."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: empty file; expected the header {','.join(REQUIRED)}")
        header = [h.strip() for h in header]
        missing = [c for c in REQUIRED if c not in header]
        unknown = [c for c in header if c not in COLUMNS]
        if missing or unknown or len(set(header)) != len(header):
            raise ValueError(f"{path}: bad header {header}: needs {list(REQUIRED)}, may add "
                             f"{list(COLUMNS[2:])}, each once")
        out = []
        for line, row in enumerate(reader, start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise ValueError(f"{path}:{line}: expected {len(header)} fields, got {len(row)}")
            values = {}
            for col, cell in zip(header, row):
                try:
                    values[col] = int(cell.strip())
                except ValueError:
                    raise ValueError(f"{path}:{line}: {col} must be an integer, got {cell!r}") from None
            try:
                out.append(Request(**values))
            except ValueError as e:
                raise ValueError(f"{path}:{line}: {e}") from None
    return out


def prompt_tokens(requests, seed: int = 0, *, num_prefixes: int = 8, vocab: int = 32000,
                  prefix_lens=(16, 512)) -> list[np.ndarray]:
    """Token ids for each prompt, for prefix caching: shared system prompts, then unique text.

    There are `num_prefixes` shared prefixes, each of a seeded length in `prefix_lens`
    (inclusive); request i uses prefix k with probability proportional to 1/(k+1)
    (a few popular system prompts, many rare ones) and keeps at least one unique
    token at the end. The rest of the prompt is fresh random tokens.
    """
    rng = np.random.default_rng(seed)
    lo, hi = prefix_lens
    if num_prefixes < 1 or not 1 <= lo <= hi:
        raise ValueError(f"need num_prefixes >= 1 and 1 <= prefix_lens[0] <= prefix_lens[1], "
                         f"got {num_prefixes}, {prefix_lens}")
    prefixes = [rng.integers(0, vocab, int(rng.integers(lo, hi + 1))) for _ in range(num_prefixes)]
    weights = 1.0 / np.arange(1, num_prefixes + 1)
    choice = rng.choice(num_prefixes, size=len(requests), p=weights / weights.sum())
    out = []
    for r, k in zip(requests, choice):
        shared = prefixes[k][: max(0, r.prompt_len - 1)]
        out.append(np.concatenate([shared, rng.integers(0, vocab, r.prompt_len - len(shared))]))
    return out
