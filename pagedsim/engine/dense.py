"""The reference engine: no blocks, no kernels, one request at a time.

Each sequence keeps its K and V as contiguous arrays per layer ([L, H_kv, D], grown by
concatenation) under plain causal softmax(q K^T / sqrt(D)) V. Whatever the paged engine
does with blocks, its tokens must equal these and its logits agree to float32 rounding.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from ..errors import count_arg
from .model import Attention, Transformer
from .requests import Request, RequestState

Floats = npt.NDArray[np.float32]
KV = tuple[Floats, Floats]  # one layer's keys and values [L, H_kv, D] of one sequence


def dense_attention(q: Floats, k: Floats, v: Floats, spec: Attention | None = None) -> Floats:
    """q [T, H, D] for the last T of L positions; k, v [L, H_kv, D] -> [T, H, D] (causal).
    `spec` (model.Attention): the scale (default 1/sqrt(D)), a soft-cap, a window."""
    t, heads, d = q.shape
    length, kv_heads = len(k), k.shape[1]
    group = heads // kv_heads
    scale = np.float32(d**-0.5 if spec is None else spec.scale)
    # batched GEMMs per KV head, its `group` query heads' rows stacked (no repeated K/V)
    qg = q.reshape(t, kv_heads, group, d).transpose(1, 2, 0, 3).reshape(kv_heads, group * t, d)
    scores = (qg @ k.transpose(1, 2, 0)).reshape(heads, t, length) * scale  # [H, T, L]
    if spec is not None and spec.logits_soft_cap is not None:
        cap = np.float32(spec.logits_soft_cap)
        scores = np.tanh(scores / cap) * cap
    query_pos = length - t + np.arange(t)  # [T]
    masked = np.arange(length)[None, :] > query_pos[:, None]  # [T, L]: the future
    if spec is not None and spec.sliding_window is not None:  # and what the window left behind
        masked |= np.arange(length)[None, :] <= query_pos[:, None] - spec.sliding_window
    scores = np.where(masked[None], -np.inf, scores)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    out = p.reshape(kv_heads, group * t, length) @ v.transpose(1, 0, 2)  # [H_kv, G*T, D]
    return np.ascontiguousarray(
        out.reshape(kv_heads, group, t, d).transpose(2, 0, 1, 3).reshape(t, heads, d),
        dtype=np.float32,
    )


def sequence_logits(model: Transformer, tokens: Sequence[int]) -> Floats:
    """Logits [T, V] at every position of one sequence (a whole-sequence causal forward)."""
    h = model.embed_tokens(tokens, np.arange(len(tokens)))
    for layer in range(model.config.layers):
        q, k, v = model.qkv(layer, h, np.arange(len(h)), np.full(len(h), len(h)))
        h = model.finish(layer, h, dense_attention(q, k, v, model.attention[layer]))
    return model.logits(h)


class DenseEngine:
    def __init__(
        self, model: Transformer, *, max_num_seqs: int = 256, max_model_len: int = 1 << 16
    ):
        """`max_num_seqs`: sequences one request may run at once (n or beams); `max_model_len`:
        prompt + max_tokens. A request past either is refused before it runs."""
        if not isinstance(model, Transformer):
            raise TypeError(
                f"model must be a Transformer (TinyModel or hf.load_model), got "
                f"{type(model).__name__}"
            )
        self.model = model
        self.max_num_seqs = count_arg("max_num_seqs", max_num_seqs, 1)
        self.max_model_len = count_arg("max_model_len", max_model_len, 1)

    def refuse(self, request: Request) -> None:
        """Raise if `request` could never be served; changes nothing."""
        if not isinstance(request, Request):
            raise TypeError(f"a request must be a Request, got {type(request).__name__}")
        self.model.check_tokens(request.prompt)
        self.model.check_length(len(request.prompt), request.max_tokens)
        if request.width > self.max_num_seqs:
            raise ValueError(
                f"request runs {request.width} sequences; max_num_seqs is {self.max_num_seqs}"
            )
        if len(request.prompt) + request.max_tokens > self.max_model_len:
            raise ValueError(
                f"prompt + max_tokens = {len(request.prompt) + request.max_tokens} "
                f"exceeds max_model_len {self.max_model_len}"
            )

    def forward(self, cache: list[KV], tokens: Sequence[int], start: int) -> Floats:
        """Run tokens at positions start.. of one sequence; extend its per-layer (K, V)."""
        m = self.model
        h = m.embed_tokens(tokens, np.arange(start, start + len(tokens)))
        for layer in range(m.config.layers):
            end = start + len(tokens)
            q, k, v = m.qkv(layer, h, np.arange(start, end), np.full(len(tokens), end))
            keys, values = cache[layer]
            keys, values = np.concatenate([keys, k]), np.concatenate([values, v])
            cache[layer] = (keys, values)
            h = m.finish(layer, h, dense_attention(q, keys, values, m.attention[layer]))
        last: Floats = m.logits(h[-1:])[0]
        return last

    def run_request(self, rid: int, request: Request) -> RequestState:
        c = self.model.config
        self.refuse(request)
        state = RequestState(rid, request, keep_logits=True)  # for comparisons
        empty = np.zeros((0, c.kv_heads, c.head_dim), np.float32)
        caches: dict[str, list[KV]] = {state.key(0): [(empty, empty)] * c.layers}
        logits = {state.key(0): self.forward(caches[state.key(0)], request.prompt, 0)}
        while True:
            for action in state.advance(logits):
                if action[0] == "fork":
                    caches[action[2]] = list(caches[action[1]])  # arrays are never changed in place
                else:
                    del caches[action[1]]
            if state.done:
                return state
            logits = {
                s: self.forward(caches[s], state.tokens[s][-1:], len(state.tokens[s]) - 1)
                for s in state.seq_keys()
            }

    def generate(self, requests: Iterable[Request]) -> list[RequestState]:
        """RequestState per request (outputs(), logits), in request order (all refused if
        one is bad)."""
        if isinstance(requests, Request) or not hasattr(requests, "__iter__"):
            raise TypeError(f"requests must be a list of Request, got {type(requests).__name__}")
        requests = list(requests)
        for r in requests:
            self.refuse(r)
        return [self.run_request(i, r) for i, r in enumerate(requests)]
