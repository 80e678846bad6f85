"""The cases of the SDPA campaign (`sdpa_campaign`) and of test_sdpa_oracle*.py: a case
is a JSON-able dict; `arrays` makes its inputs from its seed, `masks` says which
positions each query row attends, `sdpa` and `numpy_reference` are the two oracles.

The space (`draw_decode`, `draw_prefill`): head_dim in HEAD_DIMS, 1-3 KV heads, group G
in GROUPS, block_size in BLOCK_SIZES, float16 or float32 cache and query; decode batches
of 1-3 sequences of 1..300 tokens; prefill batches of 1-4 sequences, each a chunk of
0..70 new tokens behind a cached prefix of 0..200; causal or not, a sliding window with
0-3 sinks on a third of the cases; the physical blocks shuffled, unused trailing table
columns set to -1 or to a huge id, and (windowed cases) the blocks no query reads set to
-1; on three cases in five a "needle" key sits on the edge of a mask (`plant_needle`).
A case too slow for the simulator is shrunk (`shrink`): the longest chunk or prefix
is halved until `cost` (simulated warp x 16-token tiles) fits the budget.
"""

from __future__ import annotations

import math

import numpy as np

HEAD_DIMS = (16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 160, 192, 256)
GROUPS = tuple(range(1, 17))  # every query-heads-per-KV-head count up to 16
BLOCK_SIZES = (1, 2, 3, 5, 7, 8, 16, 32, 64, 100, 128, 256)
NEEDLE_SCORE = 12.0  # a planted key's score: weight ~0.99 against 300 random ones
BUDGET = 40  # warp x tile units per case (about 30-40 s of the simulator)


def log_uniform(rng, hi: int) -> int:
    """An int in [1, hi], small values as likely as large ones on a log scale."""
    return int(min(hi, max(1, round(math.exp(rng.uniform(0, math.log(hi + 1)))))))


def draw_common(rng) -> dict:
    window = None
    if rng.random() < 1 / 3:
        window = log_uniform(rng, 64)
    return dict(
        head_dim=int(rng.choice(HEAD_DIMS)),
        kv_heads=int(rng.integers(1, 4)),
        group=int(rng.choice(GROUPS)),
        block_size=int(rng.choice(BLOCK_SIZES)),
        cache_dtype=str(rng.choice(["float16", "float16", "float32"])),
        query_dtype=str(rng.choice(["float16", "float32"])),
        window=window,
        sinks=int(rng.integers(0, 4)) if window else 0,
        scale=None if rng.random() < 0.7 else float(rng.uniform(0.02, 0.4)),
        fill=int(rng.choice([-1, 10**6])),
        extra_cols=int(rng.integers(0, 3)),
        blank_skipped=bool(rng.random() < 0.5),
        seed=int(rng.integers(2**31)),
        needle=[None, None, "first", "last", "outside"][int(rng.integers(5))],
    )


def draw_decode(rng, max_ctx: int = 300) -> dict:
    case = draw_common(rng)
    case.update(
        kind="decode",
        lens=[log_uniform(rng, max_ctx) for _ in range(int(rng.integers(1, 4)))],
        mode=str(rng.choice(["auto", "auto", "single", "split"])),
    )
    case["partition_size"] = (
        int(rng.choice([16, 32, 48, 64, 100])) if case["mode"] == "split" else None
    )
    return shrink(case)


def draw_prefill(rng, max_prefix: int = 200, max_chunk: int = 70) -> dict:
    case = draw_common(rng)
    seqs = int(rng.integers(1, 5))
    chunks = [0 if rng.random() < 0.1 else log_uniform(rng, max_chunk) for _ in range(seqs)]
    if not any(chunks):
        chunks[0] = 1
    prefixes = [0 if rng.random() < 0.3 else log_uniform(rng, max_prefix) for _ in range(seqs)]
    prefixes = [max(p, 1) if c == 0 else p for p, c in zip(prefixes, chunks, strict=True)]
    case.update(kind="prefill", prefixes=prefixes, chunks=chunks, causal=bool(rng.random() < 0.8))
    return shrink(case)


def cost(case: dict) -> float:
    """Simulated work: warps x 16-token tiles, weighted by head_dim / 64."""
    heads, group, width = case["kv_heads"], case["group"], case["head_dim"] / 64
    if case["kind"] == "decode":
        chunks = -(-group // 16)
        tiles = sum(-(-n // 16) for n in case["lens"])
        if case["mode"] == "split":
            tiles += sum(-(-n // case["partition_size"]) for n in case["lens"])
        return heads * chunks * tiles * width
    q_tile = max(1, 16 // group)
    work = sum(
        -(-c // q_tile) * (-(-(p + c) // 16))
        for p, c in zip(case["prefixes"], case["chunks"], strict=True)
    )
    return heads * work * width


def shrink(case: dict, budget: float = BUDGET) -> dict:
    """Halve the largest context or chunk until the case fits the simulator budget; a
    context of one 16-token tile is never cut (it costs no more than a shorter one)."""
    while cost(case) > budget:
        if case["kind"] == "decode":
            i = int(np.argmax(case["lens"]))
            if case["lens"][i] <= 16:
                break
            case["lens"][i] //= 2
            continue
        ctx = [p + c for p, c in zip(case["prefixes"], case["chunks"], strict=True)]
        i = int(np.argmax(ctx))
        if ctx[i] <= 16:
            break
        if case["chunks"][i] > 1 and (
            case["chunks"][i] * case["group"] > 16 or case["prefixes"][i] <= 1
        ):
            case["chunks"][i] //= 2
        elif case["prefixes"][i] > 1:
            case["prefixes"][i] //= 2
        else:
            break
    return case


def tables_for(rng, case: dict, lens, needed) -> tuple[np.ndarray, int]:
    """Shuffled physical blocks; trailing columns and (blank_skipped) blocks holding no
    needed position get the case's garbage. needed: per sequence, the positions read."""
    size = case["block_size"]
    blocks = [-(-int(n) // size) for n in lens]
    num_blocks = sum(blocks) + 2
    ids = rng.permutation(num_blocks)
    width = max(blocks) + case["extra_cols"]
    tables = np.full((len(lens), width), case["fill"], np.int32)
    at = 0
    for s, n in enumerate(blocks):
        tables[s, :n] = ids[at : at + n]
        at += n
        if case["blank_skipped"] and case["window"]:
            used = np.zeros(n, bool)
            used[np.asarray(needed[s], np.int64) // size] = True
            tables[s, :n][~used] = -1
    return tables, num_blocks


def seen_mask(length: int, ctx: int, window, sinks: int) -> np.ndarray:
    """bool [ctx]: the positions a query seeing the first `length` positions attends."""
    pos = np.arange(ctx)
    mask = pos < length
    if window:
        kept = min(sinks, length)
        mask &= (pos < kept) | (pos >= max(length - window, kept))
    return mask


def masks(case: dict) -> list[np.ndarray]:
    """Per sequence, bool [rows, ctx]: which positions each query row attends."""
    if case["kind"] == "decode":
        return [seen_mask(n, n, case["window"], case["sinks"])[None] for n in case["lens"]]
    out = []
    for p, c in zip(case["prefixes"], case["chunks"], strict=True):
        lengths = [p + i + 1 if case["causal"] else p + c for i in range(c)]
        rows = [seen_mask(n, p + c, case["window"], case["sinks"]) for n in lengths]
        out.append(np.array(rows, bool).reshape(c, p + c))
    return out


def arrays(case: dict) -> dict:
    """The case's inputs, made from its seed: query, kv_cache, block_tables, context_lens
    (and query_start_loc for prefill)."""
    rng = np.random.default_rng(case["seed"])
    lens = (
        case["lens"]
        if case["kind"] == "decode"
        else [p + c for p, c in zip(case["prefixes"], case["chunks"], strict=True)]
    )
    needed = [np.flatnonzero(m.any(axis=0)) for m in masks(case)]
    tables, num_blocks = tables_for(rng, case, lens, needed)
    shape = (num_blocks, 2, case["kv_heads"], case["block_size"], case["head_dim"])
    cache = rng.standard_normal(shape).astype(case["cache_dtype"])
    rows = len(lens) if case["kind"] == "decode" else sum(case["chunks"])
    query = rng.standard_normal((rows, case["kv_heads"] * case["group"], case["head_dim"]))
    query = query.astype(case["query_dtype"])
    plant_needle(case, query, cache, tables)
    out = dict(
        query=query, kv_cache=cache, block_tables=tables, context_lens=np.array(lens, np.int32)
    )
    if case["kind"] == "prefill":
        out["query_start_loc"] = np.concatenate([[0], np.cumsum(case["chunks"])]).astype(np.int32)
    return out


def plant_needle(case: dict, query, cache, tables) -> None:
    """case["needle"] "first" | "last" | "outside": per sequence and KV head, one key is
    the direction of the sequence's last query row (its head h * G), scaled so that its
    score is NEEDLE_SCORE: that row puts almost all its weight there. "first" and "last"
    are the first and last positions the row attends, "outside" the position just before
    its window (seen by earlier rows of a causal chunk, not by this one). A mask one
    position off then fails by O(max |V|), at any context length: random data alone would
    hide it under the fp16 tolerance once the context is long."""
    mode = case.get("needle")
    if not mode:
        return
    scale = case["scale"] or 1 / math.sqrt(case["head_dim"])
    size, row = case["block_size"], 0
    for s, mask in enumerate(masks(case)):
        row += mask.shape[0]
        if mask.shape[0] == 0:
            continue
        seen = np.flatnonzero(mask[-1])
        pos = int(seen[0] if mode == "first" else seen[-1])
        if mode == "outside":
            before = int(seen[-1]) - int(case["window"] or 10**9)
            if before >= 0 and not mask[-1, before] and tables[s, before // size] >= 0:
                pos = before
        for h in range(case["kv_heads"]):
            q = query[row - 1, h * case["group"]].astype(np.float64)
            key = q * (NEEDLE_SCORE / max(scale * float(q @ q), 1e-6))
            cache[tables[s, pos // size], 0, h, pos % size] = key


def gathered(cache: np.ndarray, table: np.ndarray, ctx: int, needed) -> tuple:
    """K, V [H_kv, ctx, D] float64 of one sequence; positions not needed stay zero (their
    table entries may be garbage)."""
    size = cache.shape[3]
    k = np.zeros((cache.shape[2], ctx, cache.shape[4]))
    v = np.zeros_like(k)
    for pos in needed:
        block = cache[int(table[pos // size])]  # [2, H_kv, B, D]
        k[:, pos] = block[0, :, pos % size]
        v[:, pos] = block[1, :, pos % size]
    return k, v


def sdpa(case: dict, data: dict) -> np.ndarray:
    """torch.nn.functional.scaled_dot_product_attention in float64, per sequence, on the
    gathered K/V with the mask of `masks`; [rows, H, D]."""
    import torch
    import torch.nn.functional as F

    group = case["group"]
    query = np.asarray(data["query"], np.float64)
    out = np.empty(query.shape)
    row = 0
    for s, mask in enumerate(masks(case)):
        n, ctx = mask.shape
        k, v = gathered(
            data["kv_cache"], data["block_tables"][s], ctx, np.flatnonzero(mask.any(axis=0))
        )
        k = torch.from_numpy(k).repeat_interleave(group, dim=0)  # head h reads KV head h // G
        v = torch.from_numpy(v).repeat_interleave(group, dim=0)
        q = torch.from_numpy(query[row : row + n]).transpose(0, 1)  # [H, n, D]
        o = F.scaled_dot_product_attention(
            q, k, v, attn_mask=torch.from_numpy(mask), scale=case["scale"]
        )
        out[row : row + n] = o.transpose(0, 1).numpy()
        row += n
    return out


def score_mask(case: dict):
    """The case's scale, causality (decode: causal), window and sinks as a ScoreMask."""
    from cuda_kernels import ScoreMask

    causal = case["causal"] if case["kind"] == "prefill" else True
    return ScoreMask(case["scale"], causal, case["window"], case["sinks"])


def numpy_reference(case: dict, data: dict) -> np.ndarray:
    """cuda_kernels.reference in float64 (for CI, where torch is absent)."""
    from cuda_kernels import reference

    common = (data["query"], data["kv_cache"], data["block_tables"], data["context_lens"])
    if case["kind"] == "decode":
        return reference.paged_attention(*common, score_mask(case))
    return reference.reference_prefill(*common, data["query_start_loc"], score_mask(case))


def servable(case: dict) -> bool:
    """Can path="tensor" serve the case? float16 cache, head_dim % 16 == 0, <= 256 (the
    arrays made here are always 16-byte aligned)."""
    return (
        case["cache_dtype"] == "float16" and case["head_dim"] % 16 == 0 and case["head_dim"] <= 256
    )


def expected_auto(case: dict) -> str:
    if not servable(case):
        return "cuda_core"
    if case["kind"] == "decode" and case["group"] < 4:
        return "cuda_core"
    return "tensor"
