"""Paged prefill attention: a ragged batch of new tokens attends to its paged K/V.

FlashInfer's BatchPrefillWithPagedKVCache, vLLM's context attention (prefix prefill)
and nano-vllm's varlen flash attention with a block_table do this: each sequence brings
`query_len` new tokens, the last of its `context_len` tokens, whose K/V `write_kv` already
scattered into the cache; the earlier tokens (a cached prefix, earlier chunks) are only
*read*, never recomputed -- which is why a prefix-cache hit saves compute.

Query token i of a sequence sits at position p = context_len - query_len + i and, when
causal, sees the positions < p + 1 (else the whole context). A sliding window applies to
that per-token length L as decode applies it to context_len: the first min(sinks, L)
positions plus [max(L - window, kept), L) (`primitives.window_span`). Decode is the case
query_len = 1. The ragged batch's own checks are in `_prefill_checks`.

Grid: (num_work, num_kv_heads). A work item is (sequence, first query token) for a tile
of QT query tokens; the host lists only non-empty tiles (FlashInfer's request/tile
indices), so a batch of decodes plus one long prompt launches no idle blocks. One thread
block serves the QT x G query rows of one KV head's group: each K/V element is read once
per group (GQA). The CTA's rows and span come from `fast.prefill_work.cta_span`. Per KV
tile of T attended positions, the block (NT threads):
  1. `map_tile`: maps the tile's positions to (physical block, offset) through the table;
  2. `load_tile`: loads K and V into shared memory as float32, one 16-byte vector
     (`primitives.load16`) or, with scalar loaders, one element per thread;
  3. `scores`: the R x T scores (R = QT * G rows), -inf where a row may not attend;
  4. `softmax`: one thread per row: the online softmax of `primitives` in base 2 (q
     pre-multiplied by scale * log2 e, decode's lazy SLACK);
  5. `accumulate`: each thread owns head_dim elements d = tid, tid + NT, ... of all R rows
     in registers; each v[t, d] read from shared memory serves the R rows.
q (pre-scaled) stays in shared memory: unlike decode's one row per head, a K/V tile here
serves QT x G rows.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import cuda, float32, int32, uint32

from . import _backend
from . import _checks as ck
from ._prefill_checks import PrefillBatch, check_batch, choose_path
from .attention import _empty, usable_loaders
from .fast import prefill_tc, prefill_wgmma
from .fast.decode import LOG2E, SLACK
from .fast.prefill_work import make_work, position
from .layout import BLOCK_MAJOR, Loaders, check_kv_cache
from .mask import CAUSAL, ScoreMask, checked
from .primitives import exp2_or_zero, load16, softmax_rescale, unpack16, vec_width, window_span

SHARED_LIMIT = 48 * 1024  # static shared memory per thread block
LAST_PATH = {"path": None}  # the kernel the last paged_prefill call ran: "tensor"/"wgmma"/...
_kernels: dict = {}


def _tile_loader(loaders: Loaders, D: int, NT: int, dtype):
    """load_tile(cache, seq, kv_head, count, blk_s, off_s, k_s, v_s, tid): k_s[t, 0:D],
    v_s[t, 0:D] <- float32 K/V rows of the tile's `count` tokens (step 2)."""
    load_k, load_v = loaders.load_k, loaders.load_v
    VEC, FP16 = vec_width(dtype), np.dtype(dtype).itemsize == 2  # values per 16 bytes
    if loaders.vector and D % VEC:
        raise ValueError(f"vector loaders need head_dim % {VEC} == 0, got {D}")
    if loaders.vector:
        NVEC = D // VEC

        @cuda.jit(device=True)
        def put16(cache, index, raw, vals, dst, t, d0):
            """dst[t, d0 : d0 + VEC] <- float32 of the 16 bytes at element `index`."""
            word = load16(cache, index)  # one ld.global.nc.v4.u32
            for w in range(4):
                raw[w] = word[w]
            unpack16(raw, vals, FP16)
            for i in range(VEC):
                dst[t, d0 + i] = vals[i]

        @cuda.jit(device=True)
        def load_tile(cache, seq, kv_head, count, blk_s, off_s, k_s, v_s, tid):
            raw = cuda.local.array(4, uint32)
            vals = cuda.local.array(VEC, float32)
            for e in range(tid, count * NVEC, NT):
                t = e // NVEC
                d0 = (e - t * NVEC) * VEC
                k_at = load_k(cache, seq, blk_s[t], kv_head, off_s[t]) + d0
                v_at = load_v(cache, seq, blk_s[t], kv_head, off_s[t]) + d0
                put16(cache, k_at, raw, vals, k_s, t, d0)
                put16(cache, v_at, raw, vals, v_s, t, d0)
    else:

        @cuda.jit(device=True)
        def load_tile(cache, seq, kv_head, count, blk_s, off_s, k_s, v_s, tid):
            for e in range(tid, count * D, NT):
                t = e // D
                d = e - t * D
                k_s[t, d] = load_k(cache, blk_s[t], kv_head, off_s[t], d)
                v_s[t, d] = load_v(cache, blk_s[t], kv_head, off_s[t], d)

    return load_tile


# The CTA's query tokens, as the score step reads them: how many are real (rows <= QT), the
# position of the first (past), the context length, and the mask each applies to its row
# (causal: token i sees past + i + 1 positions; else ctx; then the window and its sinks).
Queries = namedtuple("Queries", "rows past ctx causal window sinks")
# One KV tile in shared memory: each token's position, physical block and offset in it
# [T], K [T, D+1] (padded: consecutive tokens in different banks), V [T, D], the scores,
# then the probabilities [R, T].
Tile = namedtuple("Tile", "pos_s blk_s off_s k_s v_s p_s")
# The running state of the R rows: q (pre-scaled) [R, D], the online softmax's max, sum
# and this tile's rescale factor [R] each, and the thread's accumulators acc[r * DPT + j]
# = out[r, tid + j * NT] (registers).
Running = namedtuple("Running", "q_s m_s l_s a_s acc")


def _tile_steps(D: int, G: int, NT: int, T: int, R: int):
    """(map_tile, scores, softmax): steps 1, 3 and 4 of a KV tile (the module doc)."""

    @cuda.jit(device=True)
    def map_tile(block_tables, seq, base, count, kept_hi, gap, block_size, tile, tid):
        """tile's pos_s, blk_s, off_s <- each of its `count` tokens' position (span index
        base + t, the window's seam skipped), physical block and offset."""
        for t in range(tid, count, NT):
            pos = position(base + t, kept_hi, gap)
            logical = pos // block_size
            tile.pos_s[t] = pos
            tile.blk_s[t] = block_tables[seq, logical]
            tile.off_s[t] = pos - logical * block_size

    @cuda.jit(device=True)
    def scores(q_s, tile, qs, count, tid):
        """tile.p_s[r, t] <- q . k of the R x count pairs, -inf where row r may not attend."""
        for e in range(tid, R * count, NT):
            r = e // count
            t = e - r * count
            i = r // G
            length = qs.ctx
            if qs.causal:
                length = qs.past + i + 1
            kept, start = window_span(length, qs.window, qs.sinks)
            pos = tile.pos_s[t]
            score = -math.inf
            if i < qs.rows and pos < length and (pos < kept or pos >= start):
                score = float32(0)
                for d in range(D):
                    score += q_s[r, d] * tile.k_s[t, d]
            tile.p_s[r, t] = score

    @cuda.jit(device=True)
    def softmax(p_s, run, count, tid):
        """One thread per row: the running max, sum and rescale factor after this tile,
        and p_s's scores turned into exp2(score - max)."""
        for r in range(tid, R, NT):
            top = float32(-math.inf)
            for t in range(count):
                top = max(top, p_s[r, t])
            # a row with nothing attended yet keeps m = -inf, alpha = 1 and p = 0
            m_new, alpha = softmax_rescale(run.m_s[r], top, SLACK)
            total = float32(0)
            for t in range(count):
                score = p_s[r, t]
                e = exp2_or_zero(score, m_new)
                total += e
                # a masked token's weight is -0.0: see `accumulate`
                p_s[r, t] = e if score != -math.inf else float32(-0.0)
            run.a_s[r] = alpha
            run.l_s[r] = run.l_s[r] * alpha + total
            run.m_s[r] = m_new

    return map_tile, scores, softmax


def _row_steps(D: int, G: int, NT: int, R: int, DPT: int):
    """(load_q, accumulate, store): the rows' state set up, step 5 of a tile, the end."""

    @cuda.jit(device=True)
    def load_q(query, q_at, head0, rows, scale2, run, tid):
        """q_s <- the tile's queries times scale2 (0 past `rows`); m = -inf, l = 0, acc = 0."""
        for e in range(tid, R * D, NT):
            r = e // D
            d = e - r * D
            i = r // G
            value = float32(0)
            if i < rows:
                value = float32(query[q_at + i, head0 + r - i * G, d]) * scale2
            run.q_s[r, d] = value
        for r in range(tid, R, NT):
            run.m_s[r] = -math.inf
            run.l_s[r] = float32(0)
        for k in range(R * DPT):
            run.acc[k] = float32(0)

    @cuda.jit(device=True)
    def accumulate(run, v_s, p_s, count, tid):
        """acc[r, d] = acc[r, d] * alpha[r] + sum_t p[r, t] v[t, d] for the thread's d."""
        acc = run.acc
        for j in range(DPT):
            d = tid + j * NT
            if d < D:
                for r in range(R):
                    acc[r * DPT + j] *= run.a_s[r]
                finite = True
                for t in range(count):
                    finite = finite and v_s[t, d] - v_s[t, d] == 0  # no NaN, no inf
                for t in range(count):
                    v = v_s[t, d]  # one shared load, reused by the R rows
                    for r in range(R):
                        p = p_s[r, t]
                        # 0 x NaN is NaN: a NaN/inf value a row does not attend
                        # (weight -0.0) must not reach it, as in the reference
                        if finite or p != 0 or math.copysign(float32(1), p) > 0:
                            acc[r * DPT + j] += p * v

    @cuda.jit(device=True)
    def store(out, run, q_at, head0, rows, tid):
        """out[q_at + i, head0 + h, d] <- acc / l for the tile's real rows."""
        for j in range(DPT):
            d = tid + j * NT
            if d < D:
                for r in range(R):
                    i = r // G
                    if i < rows:
                        total = run.l_s[r]
                        value = float32(0)
                        if total != 0:  # NaN stays NaN
                            value = run.acc[r * DPT + j] / total
                        out[q_at + i, head0 + r - i * G, d] = value

    return load_q, accumulate, store


def make_prefill_kernel(
    head_dim: int,
    group_size: int,
    threads: int,
    tile: int,
    q_tile: int,
    loaders: Loaders = BLOCK_MAJOR,
    dtype=np.float16,
):
    """The prefill kernel for compile-time D, G, NT, T (KV tile), QT (query tile), loaders
    and cache dtype; launched as kernel[(num_work, num_kv_heads), NT](...)."""
    D, G, NT, T, QT = int(head_dim), int(group_size), int(threads), int(tile), int(q_tile)
    R = QT * G  # query rows per thread block
    DPT = (D + NT - 1) // NT  # head_dim elements per thread in the output
    DP, ACC = D + 1, R * DPT  # a padded key row (tokens in other banks); acc per thread
    load_tile = _tile_loader(loaders, D, NT, dtype)
    cta_span, _, _ = make_work(QT, G, R, T)
    map_tile, scores, softmax = _tile_steps(D, G, NT, T, R)
    load_q, accumulate, store = _row_steps(D, G, NT, R, DPT)

    @cuda.jit
    def paged_prefill_kernel(
        cache,  # [N, 2, H_kv, B, D] float32/float16
        query,  # [total_q, H, D] float32/float16, H = H_kv * G
        block_tables,  # [S, max_blocks] int32
        context_lens,  # [S] int32
        query_start_loc,  # [S + 1] int32
        work_seq,  # [num_work] int32: each CTA's sequence
        work_first,  # [num_work] int32: and the first query token it serves
        block_size,  # int32
        scale,  # float32
        causal,  # int32 (0 / 1)
        window,  # int32 (0: full attention)
        sinks,  # int32
        out,  # [total_q, H, D] float32/float16
    ):
        work, kv_head, tid = cuda.blockIdx.x, cuda.blockIdx.y, cuda.threadIdx.x
        q_s = cuda.shared.array((R, D), float32)  # the tile's queries, times scale
        k_s = cuda.shared.array((T, DP), float32)  # [T, D+1] key tile
        v_s = cuda.shared.array((T, D), float32)  # [T, D] value tile
        p_s = cuda.shared.array((R, T), float32)  # scores, then exp(score - max)
        pos_s = cuda.shared.array(T, int32)  # position of each tile token
        blk_s = cuda.shared.array(T, int32)  # its physical block
        off_s = cuda.shared.array(T, int32)  # its offset inside that block
        m_s = cuda.shared.array(R, float32)  # running max per row
        l_s = cuda.shared.array(R, float32)  # running sum of exp per row
        a_s = cuda.shared.array(R, float32)  # this tile's rescale factor per row
        acc = cuda.local.array(ACC, float32)  # acc[r*DPT + j] is [r, tid + j*NT] of [R, D]
        seq, first, q0, rows, past, ctx, _, _, kept_hi, _, gap, span = cta_span(
            work_seq, work_first, query_start_loc, context_lens, work, causal, window, sinks
        )
        qs = Queries(rows, past, ctx, causal, window, sinks)
        tile_s = Tile(pos_s, blk_s, off_s, k_s, v_s, p_s)
        run = Running(q_s, m_s, l_s, a_s, acc)
        scale2 = float32(scale * LOG2E)  # scores in log2 units: exp(x) = 2^(x log2 e)
        load_q(query, q0 + first, kv_head * G, rows, scale2, run, tid)
        cuda.syncthreads()  # q_s, m_s, l_s initialised before any tile uses them
        for base in range(0, span, T):
            count = min(T, span - base)
            map_tile(block_tables, seq, base, count, kept_hi, gap, block_size, tile_s, tid)
            # the tile map is visible; the previous tile's readers of v_s, p_s, a_s are done
            cuda.syncthreads()
            load_tile(cache, seq, kv_head, count, blk_s, off_s, k_s, v_s, tid)
            cuda.syncthreads()  # the K/V tile is in shared memory before scores read it
            scores(q_s, tile_s, qs, count, tid)
            cuda.syncthreads()  # all R x count scores are written before the softmax
            softmax(p_s, run, count, tid)
            cuda.syncthreads()  # probabilities and alpha are visible before accumulation
            accumulate(run, v_s, p_s, count, tid)
        store(out, run, q0 + first, kv_head * G, rows, tid)  # l_s: written before a barrier

    return paged_prefill_kernel


def shared_bytes(head_dim: int, rows: int, tile: int) -> int:
    floats = rows * head_dim + tile * (head_dim + 1) + tile * head_dim + rows * tile + 3 * rows
    return 4 * floats + 3 * 4 * tile


def launch_config(head_dim: int, group: int) -> tuple[int, int, int]:
    """(threads, kv tile, query tile): on a GPU 128 threads, ~16 query rows and the largest
    KV tile of 32/16/8 tokens that fits 48 KiB; under the simulator 4 threads, 16, 16."""
    if _backend.backend() != "gpu":
        return 4, 16, max(1, 16 // group)
    for q_tile in range(max(1, 16 // group), 0, -1):
        for tile in (32, 16, 8):
            if shared_bytes(head_dim, q_tile * group, tile) <= SHARED_LIMIT:
                return 128, tile, q_tile
    raise ValueError(
        f"head_dim={head_dim} with {group} query heads per KV head needs "
        f"{shared_bytes(head_dim, group, 8)} bytes of shared memory (> 48 KiB)"
    )


def kernel_for(head_dim: int, group: int, loaders: Loaders = BLOCK_MAJOR, dtype=np.float16):
    threads, tile, q_tile = launch_config(head_dim, group)
    dtype = np.dtype(dtype)
    key = (loaders.name, dtype.name, head_dim, group, threads, tile, q_tile)
    if key not in _kernels:
        _kernels[key] = make_prefill_kernel(
            head_dim, group, threads, tile, q_tile, loaders=loaders, dtype=dtype
        )
    return _kernels[key], threads, q_tile


def paged_prefill(
    query,
    kv_cache,
    block_tables,
    context_lens,
    query_start_loc,
    mask: ScoreMask = CAUSAL,
    *,
    path="auto",
    out_dtype=np.float32,
):
    """Prefill attention over kv_cache[N, 2, H_kv, B, D] -> [total_q, H, D] of out_dtype.

    query [total_q, H, D] float32/float16, packed by sequence; query_start_loc int32
    [S + 1]; block_tables int32 [S, max_blocks]; context_lens int32 [S], each >= its query
    length. mask: a `mask.ScoreMask`, causal by default. path: "auto" (tensor cores when
    the shape allows), "tensor" (`prefill_tc`), "wgmma" (`prefill_wgmma`, sm_90 only,
    opt-in: not yet run on a GPU) or "cuda_core"; LAST_PATH says what the last call ran.
    NumPy query -> NumPy result; device query -> device result. out_dtype: float32 or
    float16 (what SDPA writes), rounded once, on the store.
    """
    shape = check_kv_cache("kv_cache", kv_cache)
    out_dtype = ck.require_out_dtype(out_dtype)
    path = choose_path(path, kv_cache)
    mask = checked(mask, shape.head_dim)
    batch = check_batch(query, shape, block_tables, context_lens, query_start_loc, mask)
    out = _empty(ck.shape_of(query), out_dtype)  # [total_q, H, D]
    on_device = PrefillBatch(*map(ck.to_device, batch[:3]), batch.q_lens)  # tables, lens, starts
    cache = ck.to_device(kv_cache)
    launcher(cache, ck.to_device(query), on_device, mask=mask, out=out, path=path)()
    LAST_PATH["path"] = path
    return out if ck.is_device(query) else out.copy_to_host()


def launcher(cache, query, batch: PrefillBatch, *, mask: ScoreMask, out, path: str = "auto"):
    """launch() running the prefill kernel on checked device buffers into out (the GPU
    benchmark times it alone); launch.path names the kernel it runs."""
    num_kv_heads, head_dim = cache.shape[2], cache.shape[4]
    group = query.shape[1] // num_kv_heads
    path = choose_path(path, cache)
    if path == "tensor":
        kernel, threads, q_tile = prefill_tc.kernel_for(head_dim, group, cache.shape[3])
    elif path == "wgmma":
        kernel, threads, q_tile = prefill_wgmma.kernel_for(head_dim, group, cache.shape[3])
    else:
        loaders = usable_loaders(BLOCK_MAJOR, cache, cache, head_dim)  # 16-byte or scalar
        kernel, threads, q_tile = kernel_for(head_dim, group, loaders, cache.dtype)
    q_lens = np.asarray(batch.q_lens).tolist()
    work = [(s, f) for s, n in enumerate(q_lens) for f in range(0, n, q_tile)]
    work_seq = cuda.to_device(np.array([w[0] for w in work], np.int32))  # [num_work]
    work_first = cuda.to_device(np.array([w[1] for w in work], np.int32))  # [num_work]
    args = (
        cache,
        query,
        batch.tables,
        batch.lens,
        batch.starts,
        work_seq,
        work_first,
        np.int32(cache.shape[3]),
        np.float32(mask.scale),
        np.int32(bool(mask.causal)),
        np.int32(mask.sliding_window or 0),
        np.int32(mask.sinks),
        out,
    )
    ck.require_grid("paged_prefill", (len(work), num_kv_heads, 1), ("query tiles", "KV heads", ""))

    def launch():
        kernel[(len(work), num_kv_heads), threads](*args)

    launch.path = path
    return launch
