"""The paged decode-attention kernel, built by a factory from two address functions.

One query token per sequence attends to its cached K/V through its block table
(PagedAttention, Kwon et al. 2023; vLLM csrc/attention/paged_attention_v1/v2.cu).
The same kernel body serves the single-pass kernel (one partition covering the whole
context) and the split-K kernel (FlashDecoding, Dao et al. 2023; vLLM's v2), whose
partial results `merge.py` combines with log-sum-exp.

GQA: one thread block handles one (sequence, KV head, partition) and *all* G query
heads of that KV head's group, so each K/V element is read from global memory once
per group (FlashInfer's grouping), not once per query head (vLLM's v1).

Per tile of T tokens the block (NT threads):
  1. maps tile tokens to (physical block, offset) through the block table;
  2. loads the K and V tile into shared memory, flat over (token, d): consecutive
     threads read consecutive head_dim elements (coalesced), converted to float32;
  3. computes the G x T scores q_h . k_t, each thread taking one token and HPT heads
     so a key element read from shared memory serves HPT dot products (K rows are
     padded to D+1 floats: consecutive tokens hit different banks);
  4. one thread per head updates the running max m, the running sum l and the
     rescale factor alpha = exp(m_old - m_new) (safe online softmax);
  5. each thread owns output elements d = tid, tid + NT, ... for all G heads: it
     rescales them by alpha and adds p[h, t] * v[t, d]; each v[t, d] is read from
     shared memory once and used by the G heads.
The end writes acc / l (normalised), m and l for the partition.

Sliding window (window > 0): the attended tokens are the first `kept = min(sinks, L)`
positions plus positions [start, L), start = max(L - window, kept). Attended index j
maps to position j (j < kept) or start + j - kept; dropped blocks are never read.
"""

from __future__ import annotations

import math

from numba import cuda, float32, int32


def _heads_per_thread(group: int, tile: int, threads: int) -> int:
    """Largest divisor of the group size that still gives every thread a (token, heads) job."""
    return max(h for h in range(1, group + 1) if group % h == 0 and (group // h) * tile >= threads
               or h == 1)


def make_decode_kernel(load_k, load_v, head_dim: int, group_size: int,
                       threads: int = 128, tile: int = 32):
    """Build a decode kernel for one K/V layout.

    Contract for the address functions (both `@cuda.jit(device=True)`):
        load_k(k_src, block, kv_head, offset, d) -> float32
        load_v(v_src, block, kv_head, offset, d) -> float32
    return element `d` of the key (value) of the token at `offset` in physical block
    `block`, KV head `kv_head`, converted to float32. `k_src`/`v_src` are whatever
    arrays the caller launches with (the same array twice for the chapter's layout).
    Consecutive `d` should be consecutive addresses, for coalescing.

    head_dim (D), group_size (G = num_heads // num_kv_heads), threads (NT) and tile (T,
    tokens per shared-memory tile) are compile-time constants.

    The returned kernel is launched as
        kernel[(num_kv_heads, num_seqs, num_partitions), threads](
            k_src, v_src,
            query,          # [S, H, D] float32/float16, H = num_kv_heads * G
            block_tables,   # [S, max_blocks] int32, only attended blocks are read
            context_lens,   # [S] int32, >= 1
            block_size, scale, sinks, window, partition_size,   # int32, float32, int32 x3
            out,            # [S, H, num_partitions, D] float32: normalised partial outputs
            max_logits,     # [S, H, num_partitions] float32: max scaled score per partition
            exp_sums)       # [S, H, num_partitions] float32: sum of exp(score - max)
    window <= 0 means full attention. A partition covers attended indices
    [p * partition_size, (p + 1) * partition_size); an empty one writes l = 0, out = 0.
    The kernel trusts its arguments: the host launcher validates them.
    """
    D, G, NT, T = int(head_dim), int(group_size), int(threads), int(tile)
    DP = D + 1  # padded key row stride in shared memory
    GD = G * D
    HPT = _heads_per_thread(G, T, NT)
    DPT = (D + NT - 1) // NT  # head_dim elements per thread in the output
    ACC = G * DPT  # accumulators per thread: every head of the group, for those d

    @cuda.jit
    def paged_decode(k_src, v_src, query, block_tables, context_lens, block_size, scale,
                     sinks, window, partition_size, out, max_logits, exp_sums):
        kv_head = cuda.blockIdx.x
        seq = cuda.blockIdx.y
        part = cuda.blockIdx.z
        tid = cuda.threadIdx.x
        q_s = cuda.shared.array((G, D), float32)  # the group's queries, times scale
        k_s = cuda.shared.array((T, DP), float32)  # [T, D+1] key tile
        v_s = cuda.shared.array((T, D), float32)  # [T, D] value tile
        p_s = cuda.shared.array((G, T), float32)  # scores, then exp(score - max)
        blk_s = cuda.shared.array(T, int32)  # physical block of each tile token
        off_s = cuda.shared.array(T, int32)  # its offset inside that block
        m_s = cuda.shared.array(G, float32)  # running max per head
        l_s = cuda.shared.array(G, float32)  # running sum of exp per head
        a_s = cuda.shared.array(G, float32)  # this tile's rescale factor per head
        dots = cuda.local.array(HPT, float32)  # scores of one token for HPT heads
        acc = cuda.local.array(ACC, float32)  # acc[h*DPT + j] is [h, tid + j*NT] of [G, D]

        length = context_lens[seq]
        kept = 0
        start = 0
        if window > 0:
            kept = min(sinks, length)
            start = max(length - window, kept)
        lo = part * partition_size
        hi = min(lo + partition_size, kept + length - start)
        head0 = kv_head * G

        for i in range(tid, GD, NT):
            h = i // D
            q_s[h, i - h * D] = float32(query[seq, head0 + h, i - h * D]) * scale
        if tid < G:
            m_s[tid] = -math.inf
            l_s[tid] = float32(0)
        for k in range(ACC):
            acc[k] = float32(0)
        cuda.syncthreads()  # q_s, m_s, l_s initialised before any tile uses them

        for base in range(lo, hi, T):
            count = min(T, hi - base)
            if tid < count:
                j = base + tid
                pos = j if j < kept else start + (j - kept)
                logical = pos // block_size
                blk_s[tid] = block_tables[seq, logical]
                off_s[tid] = pos - logical * block_size
            # blk_s/off_s are visible; the previous tile's readers of v_s, p_s, a_s are done
            cuda.syncthreads()
            for i in range(tid, count * D, NT):
                t = i // D
                d = i - t * D
                k_s[t, d] = load_k(k_src, blk_s[t], kv_head, off_s[t], d)
                v_s[t, d] = load_v(v_src, blk_s[t], kv_head, off_s[t], d)
            cuda.syncthreads()  # the K/V tile is in shared memory before scores read it
            for i in range(tid, (G // HPT) * count, NT):
                h0 = (i // count) * HPT
                t = i - (i // count) * count
                for r in range(HPT):
                    dots[r] = float32(0)
                for d in range(D):
                    key = k_s[t, d]  # one shared load, reused by HPT heads
                    for r in range(HPT):
                        dots[r] += q_s[h0 + r, d] * key
                for r in range(HPT):
                    p_s[h0 + r, t] = dots[r]
            cuda.syncthreads()  # all G x count scores are written before the softmax
            if tid < G:
                m_old = m_s[tid]
                m_new = m_old
                for t in range(count):
                    m_new = max(m_new, p_s[tid, t])
                total = float32(0)
                for t in range(count):
                    e = math.exp(p_s[tid, t] - m_new)
                    p_s[tid, t] = e
                    total += e
                alpha = math.exp(m_old - m_new)
                a_s[tid] = alpha
                l_s[tid] = l_s[tid] * alpha + total
                m_s[tid] = m_new
            cuda.syncthreads()  # probabilities and alpha are visible before accumulation
            for j in range(DPT):
                d = tid + j * NT
                if d < D:
                    for h in range(G):
                        acc[h * DPT + j] *= a_s[h]
                    for t in range(count):
                        v = v_s[t, d]  # one shared load, reused by the G heads
                        for h in range(G):
                            acc[h * DPT + j] += p_s[h, t] * v

        # No barrier needed: l_s and m_s were last written before a barrier above.
        for j in range(DPT):
            d = tid + j * NT
            if d < D:
                for h in range(G):
                    total = l_s[h]
                    value = float32(0)
                    if total > 0:
                        value = acc[h * DPT + j] / total
                    out[seq, head0 + h, part, d] = value
        if tid < G:
            max_logits[seq, head0 + tid, part] = m_s[tid]
            exp_sums[seq, head0 + tid, part] = l_s[tid]

    return paged_decode
