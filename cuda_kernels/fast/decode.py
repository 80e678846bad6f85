"""The paged decode-attention kernel, built by a factory from a layout's loaders.

One query token per sequence attends to its cached K/V through its block table
(PagedAttention, Kwon et al. 2023; vLLM csrc/attention/paged_attention_v1/v2.cu). The
same body is the single-pass kernel (one partition spans the context) and the split-K
kernel (FlashDecoding; vLLM's v2), whose partials `merge.py` combines by log-sum-exp.
The thread mapping follows FlashInfer's decode kernel (vec_size x bdx lanes per row):

  * a lane owns 16-byte vectors of head_dim (VEC = 8 float16 or 4 float32 values); LPR
    lanes (a power of two) cover one K or V row, so a warp holds RPW = 32 / LPR rows and a
    CTA of NW warps R = NW * RPW; for groups of at most SMALL_GROUP heads a lane takes two
    vectors of a row (VPL = 2), halving the shuffle steps per byte;
  * each row takes its own tokens (token j of a step goes to row j % R, TPR per row per
    step) and scores them for the HPC query heads of its CTA: every K/V vector read serves
    HPC heads (GQA);
  * q (times scale * log2 e), each row's running max m and sum l and the HPC x head_dim
    slice of accumulators live in registers; K/V stay 16 raw bytes until unpacked there;
    the softmax is base 2 (one MUFU.EX2 per exp) and rescales lazily: the running max moves
    only when a score beats it by more than SLACK (FlashAttention-3);
  * a dot product is a per-lane partial sum finished over the row's lanes by xor shuffles:
    a reduce-scatter (`primitives.reduce_scatter`) leaves each lane its own of the step's
    TPR x HPC scores (`owned_index`), whose exp only that lane computes, and the
    probabilities are then broadcast (`broadcast`); no barrier and no shared-memory
    exchange inside the token loop;
  * whether a score moved a max is one warp vote: the rare step that must rescale leaves
    the hot loop (a warp-uniform `break`) for `regrow`, so the hot loop holds no rescale;
  * the block table is read once per token (one word, broadcast to the row's lanes);
  * cp.async staging, so that bytes in flight cost no registers: ONE 16-byte aligned
    shared ring of STAGES = 2 stages; in each a lane owns CPL = 2 x TPR x VPL chunks of
    16 bytes (K, then V), chunk c of lane l of warp w at word (w * CPL + c) * 128 + 4 l,
    so the read-back is one LDS.128 without bank conflicts. Step s + 1's copies and step
    s + 2's table reads are issued before step s's math; `cp_async_wait(1)` retires s's;
  * no barrier in the loop: a lane reads back only the chunks it copied itself (wait_group
    makes them visible to it); masked tokens copy zeros (src-size 0). One `syncthreads`
    at the end hands the ring to the merge of every row's softmax state (m, l, acc).
Without vector loaders, or where the ring would pass RING_BUDGET, or with staged=False,
K/V stay in registers instead: step s + 1's loads go into the other of two ping-pong
register buffers. Groups larger than HPC (e.g. 71 query heads on one KV head) are split
into chunks of heads across the grid's x dimension.

Sliding window (window > 0): attended index j maps to position j (j < kept) or
start + j - kept, kept = min(sinks, L), start = max(L - window, kept); dropped blocks are
never read. Everything is accumulated in float32. NaN propagates as in IEEE arithmetic:
only -inf is masked (`exp2_or_zero`), so a NaN score poisons the running sum and output.
"""

from __future__ import annotations

import math
from collections import namedtuple
from types import SimpleNamespace

import numpy as np
from numba import cuda, float32, int32, uint32

from ..primitives import (
    FULL_MASK,
    broadcast,
    cp_async_commit,
    cp_async_wait,
    exp2_or_zero,
    owned_index,
    reduce_scatter,
    softmax_rescale,
)
from .decode_geometry import RING_BUDGET, STAGES, geometry, ring_bytes
from .decode_loads import fetcher, make_locate, unpacker

LOG2E = 1.4426950408889634  # scores are kept in log2 units: exp(x) = 2^(x log2 e)
SLACK = float32(8.0)  # lazy rescaling: the running max moves only when exceeded by > 2^8


# The named tuples the kernel's device functions take, built once per CTA and passed whole.
# the sequence's K/V in this CTA's partition: the K and V sources, the table, which
# sequence and KV head, the partition's end `hi` and the window's (kept, start)
Src = namedtuple("Src", "k_src v_src block_tables seq kv_head hi kept start")
# the lane's place: its lane in the warp, its row in the CTA [0, R), its place in the row
Place = namedtuple("Place", "lane row col")
# where one step's raw K/V lie: the register buffers, or the ring stage at word `at`
Stage = namedtuple("Stage", "k_buf v_buf ring at")
# the table entries two steps ahead, per token of the row: block, offset, valid
Ahead = namedtuple("Ahead", "blk off ok")
# one step's scratch: the lane's partial dots (padded to NP), every p of the row, the
# lane's own p, the running max of their heads, the step base from which each is
# masked (`limits`), one unpacked K or V row slice
Scratch = namedtuple("Scratch", "dots s own_p m_own lim kv")
# the running softmax state: q (times scale log2 e), the accumulators, max and sum per head
State = namedtuple("State", "q acc m lsum")


def make_decode_kernel(
    loaders,
    head_dim: int,
    group_size: int,
    dtype,
    block_size: int,
    warps: int = 4,
    paged: bool = True,
    staged: bool | None = None,
):
    """Build a decode kernel for one layout (`layout.Loaders`, whose docstring gives the
    loader contracts) and one storage dtype. `block` is the physical block from the table,
    or with paged=False the logical one. staged: K/V through the cp.async ring (True), in
    registers (False), or None: the ring whenever it can serve.

    Launch with `warps * 32` threads and
        grid (num_kv_heads * chunks, num_seqs, num_partitions), chunks = geometry()["chunks"]
        kernel[grid, threads](k_src, v_src,
            query,          # [S, H, D] float32/float16, H = num_kv_heads * G
            block_tables,   # [S, max_blocks] int32, only attended blocks are read
            context_lens,   # [S] int32, >= 1
            scale, sinks, window, partition_size,   # float32, int32 x3
            out,            # [S, H, P, D] float32: normalised partial outputs
            max_logits,     # [S, H, P] float32: max scaled score per partition
            exp_sums)       # [S, H, P] float32: sum of exp(score - max)
    window <= 0 means full attention. A partition covers attended indices
    [p * partition_size, (p + 1) * partition_size); an empty one writes l = 0, out = 0,
    m = -inf. The kernel trusts its arguments: the host launcher validates them.
    """
    c = decode_shape(loaders, head_dim, group_size, dtype, warps, staged)
    return decode_kernel(c, loaders, make_locate(int(block_size), paged))


def decode_shape(loaders, head_dim, group_size, dtype, warps, staged):
    """The kernel's compile-time constants, checked."""
    VECTOR = bool(loaders.vector)
    g = geometry(head_dim, group_size, dtype, warps, staged=VECTOR and staged is not False)
    D, VEC, NVEC, LPR, VPL = int(head_dim), g["vec"], g["nvec"], g["lpr"], g["vpl"]
    NW = g["warps"]
    HPC, TPR = g["hpc"], g["tpr"]
    if VECTOR and D % VEC:
        raise ValueError(f"vector loaders need head_dim % {VEC} == 0, got {D}")
    STAGED = g["staged"] and ring_bytes(NW, TPR, VPL) <= RING_BUDGET
    if staged and not STAGED:
        raise ValueError(
            "staged=True needs vector loaders and a cp.async ring within "
            f"{RING_BUDGET} bytes, got {ring_bytes(NW, TPR, VPL)} bytes"
        )
    RAW_N = 4 if VECTOR else VEC  # words (u32) or floats per vector before unpacking
    SLOT = VPL * VEC  # floats of one head (or one K/V row) per lane
    TH = TPR * HPC
    NP = 1 << (TH - 1).bit_length()  # TH padded to a power of two for the reduce-scatter
    # A lane's raw K/V words live in the ring or in the ping-pong register buffers (BUF).
    CPL = 2 * TPR * VPL  # chunks a lane owns in each stage: K (token t, vector jv), then V
    STRIDE = 32 * 4 if STAGED else RAW_N  # words from one of a lane's vectors to the next
    return SimpleNamespace(
        D=D,
        G=int(group_size),
        VEC=VEC,
        NVEC=NVEC,
        LPR=LPR,
        VPL=VPL,
        RPW=g["rpw"],
        NW=NW,
        R=g["rows"],
        HPC=HPC,
        CHUNKS=g["chunks"],
        TPR=TPR,
        FP16=np.dtype(dtype).itemsize == 2,
        STAGED=STAGED,
        KIND="staged" if STAGED else "vector" if VECTOR else "scalar",
        RAW_T=uint32 if VECTOR else float32,
        SLOT=SLOT,
        HS=HPC * SLOT,
        TH=TH,
        DV=NVEC * VEC,
        NP=NP,
        OWN=max(1, NP // LPR),  # scores each lane finishes (and exponentiates) per step
        CPL=CPL,
        STRIDE=STRIDE,
        STAGE_W=NW * CPL * 32 * 4 if STAGED else 0,  # words of one stage
        V_AT=TPR * VPL * STRIDE if STAGED else 0,  # V after K within a stage
        BUF=1 if STAGED else TPR * VPL * RAW_N,
        RING_W=max(STAGES * NW * CPL * 32 * 4, g["rows"] * HPC * NVEC * VEC),  # then the merge's
    )


def make_loads(c, loaders, locate):
    """(prologue, issue): step 0's K/V and step 1's table entries, then each later step's."""
    TPR, VPL, STRIDE, V_AT, R, STAGED = c.TPR, c.VPL, c.STRIDE, c.V_AT, c.R, c.STAGED
    fetch_k, fetch_v = (
        fetcher(fn, c.KIND, VPL, c.LPR, c.VEC, c.NVEC, c.D, STRIDE)
        for fn in (loaders.load_k, loaders.load_v)
    )

    @cuda.jit(device=True)
    def issue(src, place, ahead, stage, nxt):
        """Load (or copy) the step `ahead` holds into `stage`; read the table at `nxt`."""
        blk, off, ok = ahead
        for t in range(TPR):
            at = stage.at + t * VPL * STRIDE
            token = (blk[t], off[t], ok[t] != 0)
            fetch_k(src.k_src, src.seq, src.kv_head, token, place.col, stage.k_buf, stage.ring, at)
            fetch_v(
                src.v_src,
                src.seq,
                src.kv_head,
                token,
                place.col,
                stage.v_buf,
                stage.ring,
                at + V_AT,
            )
            blk[t], off[t], ok[t] = locate(
                nxt + t * R + place.row, src.hi, src.kept, src.start, src.seq, src.block_tables
            )
        if STAGED:
            cp_async_commit()

    @cuda.jit(device=True)
    def prologue(src, place, ahead, stage, lo):
        """Step 0's K/V in flight (from base lo), step 1's table entries read."""
        for t in range(TPR):
            ahead.blk[t], ahead.off[t], ahead.ok[t] = locate(
                lo + t * R + place.row, src.hi, src.kept, src.start, src.seq, src.block_tables
            )
        issue(src, place, ahead, stage, lo + R * TPR)

    return prologue, issue


def make_score(c):
    """(limits, score): one step's scores, each lane finishing its own, and their masks."""
    TPR, HPC, SLOT, TH, NP, LPR, OWN, R = c.TPR, c.HPC, c.SLOT, c.TH, c.NP, c.LPR, c.OWN, c.R
    STAGED, VPL, STRIDE = c.STAGED, c.VPL, c.STRIDE
    to_float = unpacker(c.KIND, VPL, c.VEC, c.FP16, STRIDE)

    @cuda.jit(device=True)
    def limits(lim, lane, row, hi):
        """lim[j] <- the first step base at which the lane's own score j (token k // HPC) is
        masked (-1 for a padding slot), so the hot loop compares one int32 per score."""
        for j in range(OWN):
            k = owned_index(lane, j, NP, LPR)
            t = k // HPC
            lim[j] = int32(hi - row - t * R) if k < TH else int32(-1)

    @cuda.jit(device=True)
    def score(stage, q, x, place, base, hi):
        """q . k for the row's TPR tokens and the CTA's heads, each lane keeping OWN, masked
        (the register path, at its register limit at G = 8, recomputes the mask); own_p <-
        2^(s - m); returns the warp vote "a score beats its head's max by > SLACK"."""
        dots, kv, m_own, lane = x.dots, x.kv, x.m_own, place.lane
        for t in range(TPR):  # this lane's part of q . k
            to_float(stage.k_buf, stage.ring, stage.at + t * VPL * STRIDE, kv)
            for h in range(HPC):
                dot = float32(0)
                for i in range(SLOT):
                    dot += q[h * SLOT + i] * kv[i]
                dots[t * HPC + h] = dot
        for i in range(TH, NP):
            dots[i] = float32(0)
        reduce_scatter(dots, NP, LPR, lane)
        grow = False
        for j in range(OWN):  # the lane's own totals
            if STAGED:
                masked = base >= x.lim[j]
            else:
                k = owned_index(lane, j, NP, LPR)
                masked = k >= TH or base + place.row + (k // HPC) * R >= hi
            if masked:
                dots[j] = -math.inf  # a masked token or a padding slot
            grow = grow or dots[j] > m_own[j] + SLACK
            x.own_p[j] = exp2_or_zero(dots[j], m_own[j])
        return cuda.any_sync(FULL_MASK, grow)

    return limits, score


def make_softmax(c):
    """(settle, regrow, accumulate): the online softmax's common and rare case, then P V."""
    TPR, HPC, SLOT, NP, LPR, OWN = c.TPR, c.HPC, c.SLOT, c.NP, c.LPR, c.OWN
    VPL, STRIDE, V_AT = c.VPL, c.STRIDE, c.V_AT
    to_float = unpacker(c.KIND, VPL, c.VEC, c.FP16, STRIDE)

    @cuda.jit(device=True)
    def settle(x, lsum, lane):
        """The common case: the max stays; s[0:NP] <- every p of the row, l += p."""
        broadcast(x.own_p, NP, LPR, lane, x.s)
        for t in range(TPR):
            for h in range(HPC):
                lsum[h] += x.s[t * HPC + h]

    @cuda.jit(device=True)
    def regrow(x, st, lane):
        """The rare case (warp-uniform): move the maxima, rescale, s[0:NP] <- p, l += p."""
        s, acc, m, lsum = x.s, st.acc, st.m, st.lsum
        broadcast(x.dots, NP, LPR, lane, s)
        for h in range(HPC):
            top = s[h]
            for t in range(1, TPR):
                top = max(top, s[t * HPC + h])
            m_new, alpha = softmax_rescale(m[h], top, SLACK)
            m[h] = m_new
            lsum[h] *= alpha
            for i in range(SLOT):
                acc[h * SLOT + i] *= alpha
            for t in range(TPR):
                p = exp2_or_zero(s[t * HPC + h], m_new)
                s[t * HPC + h] = p
                lsum[h] += p
        for j in range(OWN):  # the maxima of the lane's own scores' heads, for `score`
            k = owned_index(lane, j, NP, LPR)
            h = k - (k // HPC) * HPC
            for hh in range(HPC):
                x.m_own[j] = m[hh] if h == hh else x.m_own[j]

    @cuda.jit(device=True)
    def accumulate(stage, x, acc):
        """acc += p * v for the row's TPR tokens and the CTA's heads."""
        for t in range(TPR):
            to_float(stage.v_buf, stage.ring, stage.at + V_AT + t * VPL * STRIDE, x.kv)
            for h in range(HPC):
                p = x.s[t * HPC + h]
                for i in range(SLOT):
                    acc[h * SLOT + i] += p * x.kv[i]

    return settle, regrow, accumulate


def make_walk(c, loaders, locate):
    """walk: every step of the partition from base lo, step s + 1's K/V in flight while
    step s computes; stages = (A, B) of the even and odd steps."""
    PER_STEP, STAGED = c.R * c.TPR, c.STAGED
    prologue, issue = make_loads(c, loaders, locate)
    limits, score = make_score(c)
    settle, regrow, accumulate = make_softmax(c)

    @cuda.jit(device=True)
    def walk(src, place, ahead, stages, st, x, lo, steps):
        a, b = stages
        limits(x.lim, place.lane, place.row, src.hi)
        prologue(src, place, ahead, a, lo)
        step = int32(0)
        while step < steps:
            while step < steps:  # the hot loop; ping-pong: A and B swap roles, no copies
                base = int32(lo + step * PER_STEP)
                if step % 2 == 0:
                    issue(src, place, ahead, b, base + 2 * PER_STEP)
                    if STAGED:
                        cp_async_wait(1)  # this lane's copies of step s have landed
                    if score(a, st.q, x, place, base, src.hi):
                        break  # warp-uniform: the whole warp leaves to move the max
                    settle(x, st.lsum, place.lane)
                    accumulate(a, x, st.acc)
                else:
                    issue(src, place, ahead, a, base + 2 * PER_STEP)
                    if STAGED:
                        cp_async_wait(1)
                    if score(b, st.q, x, place, base, src.hi):
                        break
                    settle(x, st.lsum, place.lane)
                    accumulate(b, x, st.acc)
                step = int32(step + 1)
            if step < steps:  # finish the step whose scores moved a max (rare)
                regrow(x, st, place.lane)
                if step % 2 == 0:
                    accumulate(a, x, st.acc)
                else:
                    accumulate(b, x, st.acc)
                step = int32(step + 1)
        if STAGED:
            cp_async_wait(0)  # the last (masked, zero-fill) copies land before ...
            cuda.syncthreads()  # ... the ring, read by every warp, becomes the merge's

    return walk


def make_ends(c):
    """(begin, merge): the CTA's first state; its rows' states merged into its outputs."""
    D, HPC, SLOT, VEC, LPR, OWN = c.D, c.HPC, c.SLOT, c.VEC, c.LPR, c.OWN
    NVEC, R, NT, DV = c.NVEC, c.R, c.NW * 32, c.DV
    merge_states = make_merge(R, HPC, DV, D, NT)

    @cuda.jit(device=True)
    def begin(st, x, query, seq, head0, heads, col, scale2):
        """q <- query * scale * log2 e (the lane's slice), acc = 0, l = 0, m = -inf."""
        q, acc = st.q, st.acc
        for h in range(HPC):
            head = head0 + min(h, heads - 1)  # padded heads compute a copy, never written
            for i in range(SLOT):
                d = (col + (i // VEC) * LPR) * VEC + i % VEC
                q[h * SLOT + i] = float32(query[seq, head, d]) * scale2 if d < D else float32(0)
                acc[h * SLOT + i] = float32(0)
            st.m[h] = -math.inf
            st.lsum[h] = float32(0)
        for j in range(OWN):
            x.m_own[j] = -math.inf

    @cuda.jit(device=True)
    def merge(outs, ring, st, place, where, tid):
        """Each head's max, sum and normalised output over the CTA's rows into outs =
        (out, max_logits, exp_sums) at where = (seq, head0, heads, part)."""
        row, col = place.row, place.col
        acc_s = ring.view(np.float32)  # [R, HPC, DV] on the ring
        m_s = cuda.shared.array((R, HPC), float32)  # row maxima, then the rows' weights
        l_s = cuda.shared.array((R, HPC), float32)
        for h in range(HPC):
            for i in range(SLOT):
                k = col + (i // VEC) * LPR
                if k < NVEC:
                    acc_s[(row * HPC + h) * DV + k * VEC + i % VEC] = st.acc[h * SLOT + i]
            if col == 0:
                m_s[row, h] = st.m[h]
                l_s[row, h] = st.lsum[h]
        merge_states(outs, where, acc_s, m_s, l_s, tid)

    return begin, merge


def make_merge(ROWS, HPC, DV, D, NT):
    """merge_states(outs, where, acc_s, m_s, l_s, tid): the CTA's ROWS softmax states in
    shared memory (m_s, l_s [ROWS, HPC]; acc_s flat [ROWS, HPC, DV]) merged by log-sum-exp
    into each head's max, sum and normalised output: outs = (out, max_logits, exp_sums) at
    where = (seq, head0, heads, part). Overwrites m_s with the weights, l_s[0] with totals."""

    @cuda.jit(device=True)
    def merge_states(outs, where, acc_s, m_s, l_s, tid):
        out, max_logits, exp_sums = outs
        seq, head0, heads, part = where
        cuda.syncthreads()  # every row's state is in shared memory
        for h in range(tid, heads, NT):  # one thread per head, whatever the group size
            top = float32(-math.inf)
            for r in range(ROWS):
                if l_s[r, h] != 0:  # a non-empty row (NaN included: it must propagate)
                    top = max(top, m_s[r, h])
            total = float32(0)
            for r in range(ROWS):
                weight = math.exp2(m_s[r, h] - top) if l_s[r, h] != 0 else float32(0)
                total += weight * l_s[r, h]
                m_s[r, h] = weight
            l_s[0, h] = total  # only this thread reads head h's sums: row 0's is free
            max_logits[seq, head0 + h, part] = top / LOG2E  # natural units for merge.py
            exp_sums[seq, head0 + h, part] = total
        cuda.syncthreads()  # the rows' weights and each head's total are ready
        for i in range(tid, heads * D, NT):  # every (head, d), whatever the thread count
            h = i // D
            d = i - h * D
            num = float32(0)
            for r in range(ROWS):
                num += m_s[r, h] * acc_s[(r * HPC + h) * DV + d]
            total = l_s[0, h]
            out[seq, head0 + h, part, d] = num / total if total != 0 else float32(0)

    return merge_states


@cuda.jit(device=True)
def window_bounds(length, window, sinks, part, partition_size):
    """(kept, start, lo, hi): the window's sinks kept and start, the partition's attended
    indices [lo, hi). int32 throughout: no 64-bit compares."""
    kept = int32(0)
    start = int32(0)
    if window > 0:
        kept = int32(min(sinks, length))
        start = int32(max(length - window, kept))
    lo = int32(part * partition_size)
    return kept, start, lo, int32(min(lo + partition_size, kept + length - start))


def decode_kernel(c, loaders, locate):
    """The kernel `make_decode_kernel` documents, for constants c (`decode_shape`)."""
    G, HPC, CHUNKS, RPW, LPR, R, TPR, CPL = c.G, c.HPC, c.CHUNKS, c.RPW, c.LPR, c.R, c.TPR, c.CPL
    HS, NP, OWN, SLOT, BUF, RAW_T, STAGED = c.HS, c.NP, c.OWN, c.SLOT, c.BUF, c.RAW_T, c.STAGED
    RING_W, STAGE_W = c.RING_W, c.STAGE_W
    walk = make_walk(c, loaders, locate)
    begin, merge = make_ends(c)

    @cuda.jit
    def paged_decode(
        k_src,
        v_src,
        query,
        block_tables,
        context_lens,
        scale,
        sinks,
        window,
        partition_size,
        out,
        max_logits,
        exp_sums,
    ):
        kv_head = cuda.blockIdx.x // CHUNKS
        head0 = kv_head * G + (cuda.blockIdx.x - kv_head * CHUNKS) * HPC
        heads = min(HPC, kv_head * G + G - head0)  # heads of this CTA (the last chunk may be short)
        seq = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        warp = tid // 32
        lane = tid - warp * 32
        row = warp * RPW + lane // LPR  # this lane's row in the CTA, [0, R)
        col = lane - (lane // LPR) * LPR  # its place in the row: vectors col, col + LPR, ...

        q = cuda.local.array(HS, float32)  # [HPC, SLOT]: q * scale * log2(e)
        acc = cuda.local.array(HS, float32)  # [HPC, SLOT]: sum_t p_t v_t
        m = cuda.local.array(HPC, float32)  # running max (same in every lane of a row)
        lsum = cuda.local.array(HPC, float32)  # running sum of exp(score - m)
        dots = cuda.local.array(NP, float32)  # this lane's partial dot products, padded
        s = cuda.local.array(NP, float32)  # [TPR, HPC] this step's p, in every lane
        own_p = cuda.local.array(OWN, float32)  # p of the lane's own scores
        m_own = cuda.local.array(OWN, float32)  # the running max of their heads
        lim = cuda.local.array(OWN, int32)  # the step base from which each is masked
        kv = cuda.local.array(SLOT, float32)  # one unpacked K or V row slice
        k_a = cuda.local.array(BUF, RAW_T)  # raw K/V of even steps (register kinds) ...
        v_a = cuda.local.array(BUF, RAW_T)
        k_b = cuda.local.array(BUF, RAW_T)  # ... and of odd steps
        v_b = cuda.local.array(BUF, RAW_T)
        ring = cuda.shared.array(RING_W, uint32, alignment=16)  # [STAGES, NW, CPL, 32, 4]
        at_a = uint32((warp * CPL * 32 + lane) * 4) if STAGED else uint32(0)  # even steps' stage
        blk = cuda.local.array(TPR, int32)  # table entries two steps ahead
        off = cuda.local.array(TPR, int32)
        ok = cuda.local.array(TPR, int32)
        st = State(q, acc, m, lsum)
        x = Scratch(dots, s, own_p, m_own, lim, kv)
        begin(st, x, query, seq, head0, heads, col, float32(scale * LOG2E))

        kept, start, lo, hi = window_bounds(
            context_lens[seq], window, sinks, cuda.blockIdx.z, partition_size
        )
        steps = int32((max(hi - lo, 0) + R * TPR - 1) // (R * TPR))  # the same in every lane
        src = Src(k_src, v_src, block_tables, seq, kv_head, hi, kept, start)
        place = Place(lane, row, col)
        stages = (Stage(k_a, v_a, ring, at_a), Stage(k_b, v_b, ring, uint32(at_a + STAGE_W)))
        walk(src, place, Ahead(blk, off, ok), stages, st, x, lo, steps)
        outs = (out, max_logits, exp_sums)
        merge(outs, ring, st, place, (seq, head0, heads, cuda.blockIdx.z), tid)

    return paged_decode


def decode_sig(k, v, q) -> tuple:
    """numba types of the decode kernels' arguments (this one's and `decode_tc`'s) for K,
    V and query of types k, v, q: what `python -m cuda_kernels.report` compiles."""
    from numba import types as t

    i32 = t.int32
    f32c3, f32c4 = t.Array(t.float32, 3, "C"), t.Array(t.float32, 4, "C")
    tables, lens = t.Array(i32, 2, "C"), t.Array(i32, 1, "C")
    return (k, v, q, tables, lens, t.float32, i32, i32, i32, f32c4, f32c3, f32c3)
