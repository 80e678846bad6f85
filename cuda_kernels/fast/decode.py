"""The paged decode-attention kernel, built by a factory from a layout's loaders.

One query token per sequence attends to its cached K/V through its block table
(PagedAttention, Kwon et al. 2023; vLLM csrc/attention/paged_attention_v1/v2.cu). The
same body is the single-pass kernel (one partition spans the context) and the split-K
kernel (FlashDecoding; vLLM's v2), whose partials `merge.py` combines by log-sum-exp.
The thread mapping follows FlashInfer's decode kernel (vec_size x bdx lanes per row):

  * a lane owns 16-byte vectors of head_dim: VEC = 8 float16 or 4 float32 values, each
    copied by one `cp_async16` (LDGSTS.128, see the staging below); LPR lanes (a power of
    two) cover one K or V row, so a warp holds RPW = 32 / LPR rows and a CTA of NW warps
    R = NW * RPW;
    for groups of at most SMALL_GROUP heads a lane takes two vectors of a row (VPL = 2),
    halving the shuffle steps per byte while registers are cheap;
  * each row takes its own tokens (token j of a step goes to row j % R, TPR tokens per row
    per step), and computes the scores of the HPC query heads of its CTA: every K/V
    vector read serves HPC heads (GQA: K/V read once per group of up to HPC heads);
  * q (times scale * log2 e), each row's running max m, running sum l and the HPC x
    head_dim slice of output accumulators live in registers; K/V stay 16 raw bytes until
    unpacked there; the softmax is base 2 (one MUFU.EX2 per exp) and rescales lazily:
    the running max moves only when a score beats it by more than SLACK (FlashAttention-3);
  * a dot product is a per-lane partial sum finished over the row's lanes by xor shuffles:
    a reduce-scatter (`primitives.reduce_scatter`) leaves each lane its own of the step's
    TPR x HPC scores (`owned_index` says which), whose exp only that lane computes (one
    each at G = 4 and 8, D = 128, instead of all of them in every lane of the row), and
    the probabilities are then broadcast (`broadcast`); no barrier and no shared-memory
    exchange between lanes inside the token loop;
  * whether a score moved a max is one warp vote (`cuda.any_sync`, VOTE.ANY; under the
    simulator a stand-in from `sim/simulator.py`): the rare step that must rescale leaves
    the hot loop (a warp-uniform `break`), is finished by `regrow` (rescale HPC x SLOT
    accumulators, recompute the exps) and the hot loop resumes, so the hot loop holds no
    rescale multiplies, not even predicated-off ones;
  * the block table is read once per token (the row's lanes read one word, a broadcast),
    and the loader turns (block, kv_head, offset) into one row index per token;
  * cp.async staging, so that bytes in flight cost no registers: ONE 16-byte aligned
    shared array per CTA, a ring of STAGES = 2 stages; in each stage a lane owns CPL =
    2 x TPR x VPL chunks of 16 bytes (K of token t, vector jv, then V), chunk c of lane l
    of warp w at word (w * CPL + c) * 128 + 4 l: the 32 lanes of a warp side by side, so
    the lane's read-back is one LDS.128 without bank conflicts, at its base (computed
    once) plus a compile-time offset (the even/odd steps' stages are two unrolled copies
    of the step). Step s + 1's copies (one commit group) and step s + 2's table reads are
    issued before step s's math; `cp_async_wait(1)` then retires step s's group;
  * why no barrier in the loop: a lane reads back only the chunks it copied itself, and
    wait_group makes a thread's own copies visible to that thread; the reverse order is
    a data dependence: a stage is refilled one step after the lane's math consumed the
    registers its LDS filled, so those reads have completed (ptxas adds its own guards
    before LDGSTS). Masked tokens copy zeros (src-size 0), never garbage. Only at the end,
    after `cp_async_wait(0)`, does one `syncthreads` hand the ring over to the merge;
  * at the end every row's softmax state (m, l, acc) goes to shared memory once (the
    accumulators onto the ring) and is merged there (the log-sum-exp weights computed
    once per row and head).
Without vector loaders (a misaligned cache, head_dim not a multiple of VEC), or where
the ring would pass RING_BUDGET, or with staged=False, K/V stay in registers instead:
step s + 1's loads go into the other of two ping-pong register buffers (ld.global.nc).
Groups larger than HPC (multi-query attention, e.g. 71 query heads on one KV head) are
split into chunks of heads across the grid's x dimension: every head is initialised,
normalised and written whatever the thread count.

Sliding window (window > 0): attended index j maps to position j (j < kept) or
start + j - kept, kept = min(sinks, L), start = max(L - window, kept); dropped blocks are
never read. Everything is accumulated in float32. NaN propagates as in IEEE arithmetic
(and the float64 reference): only -inf is masked (`exp2_or_zero`), so a NaN score's exp
is NaN and poisons the running sum and the output.
"""

from __future__ import annotations

import math

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


def make_decode_kernel(
    loaders,
    head_dim: int,
    group_size: int,
    dtype,
    block_size: int,
    warps: int = 4,
    tokens_per_row=None,
    paged: bool = True,
    staged: bool | None = None,
):
    """Build a decode kernel for one layout (`layout.Loaders`) and one storage dtype.

    Loader contracts (`@cuda.jit(device=True)` functions):
      vector loaders (loaders.vector): load_k(k_src, seq, block, kv_head, offset) -> int,
        the element index (from k_src's data pointer) of d = 0 of that token's key row;
        the row is contiguous in d and 16-byte aligned (the host checks); load_v likewise;
      scalar loaders: load_k(k_src, block, kv_head, offset, d) -> float32, element d.
    `block` is the physical block read from the table, or with paged=False (a contiguous
    cache, no table) the logical block pos // block_size.

    staged: K/V through the cp.async ring (True), in registers (False), or None: the ring
    whenever the loaders are vector ones and it fits RING_BUDGET (`geometry`'s "staged");
    True where it cannot serve is a ValueError.

    head_dim, group_size, dtype (of K/V), block_size, warps and tokens_per_row are
    compile-time constants. Launch with `warps * 32` threads and
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
    VECTOR = bool(loaders.vector)
    g = geometry(head_dim, group_size, dtype, warps, staged=VECTOR and staged is not False)
    D, G, B = int(head_dim), int(group_size), int(block_size)
    VEC, NVEC, LPR, VPL, RPW, NW, R = (
        g[k] for k in ("vec", "nvec", "lpr", "vpl", "rpw", "warps", "rows")
    )
    HPC, CHUNKS, TPR = g["hpc"], g["chunks"], int(tokens_per_row or g["tpr"])
    NT = NW * 32
    FP16 = np.dtype(dtype).itemsize == 2
    if VECTOR and D % VEC:
        raise ValueError(f"vector loaders need head_dim % {VEC} == 0, got {D}")
    STAGED = g["staged"] and ring_bytes(NW, TPR, VPL) <= RING_BUDGET
    if staged and not STAGED:
        raise ValueError(
            "staged=True needs vector loaders and a cp.async ring within "
            f"{RING_BUDGET} bytes, got {ring_bytes(NW, TPR, VPL)} bytes"
        )
    KIND = "staged" if STAGED else "vector" if VECTOR else "scalar"
    RAW_N = 4 if VECTOR else VEC  # words (u32) or floats per vector before unpacking
    RAW_T = uint32 if VECTOR else float32
    SLOT = VPL * VEC  # floats of one head (or one K/V row) per lane
    load_k, load_v = loaders.load_k, loaders.load_v
    HS, TH, DV = HPC * SLOT, TPR * HPC, NVEC * VEC  # array sizes
    NP = 1 << (TH - 1).bit_length()  # TH padded to a power of two for the reduce-scatter
    OWN = max(1, NP // LPR)  # scores each lane finishes (and exponentiates) per step
    # Where a lane's raw K/V words live: the ring (words; chunk c of a lane's stage at
    # base + c * 128, its 32 lanes side by side: LDS.128 without bank conflicts) or the
    # ping-pong register buffers (BUF words each).
    CPL = 2 * TPR * VPL  # chunks a lane owns in each stage: K (token t, vector jv), then V
    STRIDE = 32 * 4 if STAGED else RAW_N  # words from one of a lane's vectors to the next
    STAGE_W = NW * CPL * 32 * 4 if STAGED else 0  # words of one stage
    V_AT = TPR * VPL * STRIDE if STAGED else 0  # V after K within a stage
    BUF = 1 if STAGED else TPR * VPL * RAW_N
    RING_W = max(STAGES * STAGE_W, R * HPC * DV)  # the stages, then the merge's accumulators

    fetch_k, fetch_v = (
        fetcher(fn, KIND, VPL, LPR, VEC, NVEC, D, STRIDE) for fn in (load_k, load_v)
    )
    to_float = unpacker(KIND, VPL, VEC, FP16, STRIDE)

    locate = make_locate(B, paged)

    @cuda.jit(device=True)
    def issue(
        k_src,
        v_src,
        seq,
        kv_head,
        col,
        row,
        blk,
        off,
        ok,
        k_buf,
        v_buf,
        ring,
        at,
        ahead,
        hi,
        kept,
        start,
        block_tables,
    ):
        """Loads (or cp.async copies, one group) for the next step into (k_buf, v_buf) or
        the ring stage at `at`, from the table entries read one step earlier; then read
        the table entries of the step after (index `ahead`)."""
        for t in range(TPR):
            k_at = at + t * VPL * STRIDE
            fetch_k(k_src, seq, blk[t], kv_head, off[t], ok[t] != 0, col, k_buf, ring, k_at)
            fetch_v(v_src, seq, blk[t], kv_head, off[t], ok[t] != 0, col, v_buf, ring, k_at + V_AT)
            blk[t], off[t], ok[t] = locate(ahead + t * R + row, hi, kept, start, seq, block_tables)
        if STAGED:
            cp_async_commit()

    @cuda.jit(device=True)
    def score(k_buf, ring, at, q, dots, own_p, kv, m_own, lane, base, lim, row, hi):
        """This step's scores: q . k for the row's TPR tokens (attended indices base + row +
        t * R) and the CTA's heads, finished over the row's lanes, each lane keeping OWN of
        them, masked when base >= lim[j] (`limits`; the register path, at the register
        limit at G = 8, recomputes the test instead). own_p <- their 2^(s - m), valid unless
        the max must move; returns the warp vote "some score beats its head's max by more
        than SLACK"."""
        for t in range(TPR):  # this lane's part of q . k
            to_float(k_buf, ring, at + t * VPL * STRIDE, kv)
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
                masked = base >= lim[j]
            else:
                k = owned_index(lane, j, NP, LPR)
                masked = k >= TH or base + row + (k // HPC) * R >= hi
            if masked:
                dots[j] = -math.inf  # a masked token or a padding slot
            grow = grow or dots[j] > m_own[j] + SLACK
            own_p[j] = exp2_or_zero(dots[j], m_own[j])
        return cuda.any_sync(FULL_MASK, grow)

    @cuda.jit(device=True)
    def limits(lim, lane, row, hi):
        """lim[j] <- the first step base at which the lane's own score j is masked: its
        total k = (token t, head h) = divmod(k, HPC) has attended index base + row + t * R,
        masked from hi on; a padding slot (k >= TH) is always masked (base >= 0 > -1).
        Computed once, so the hot loop compares one int32 per score."""
        for j in range(OWN):
            k = owned_index(lane, j, NP, LPR)
            t = k // HPC
            lim[j] = int32(hi - row - t * R) if k < TH else int32(-1)

    @cuda.jit(device=True)
    def settle(own_p, s, lsum, lane):
        """The common case: the max stays; s[0:NP] <- every p of the row, l += p."""
        broadcast(own_p, NP, LPR, lane, s)
        for t in range(TPR):
            for h in range(HPC):
                lsum[h] += s[t * HPC + h]

    @cuda.jit(device=True)
    def regrow(dots, s, acc, m, m_own, lsum, lane):
        """The rare case (warp-uniform): move each head's max where a score beat it,
        rescale its sum and accumulators by alpha, then s[0:NP] <- the exps, l += p."""
        broadcast(dots, NP, LPR, lane, s)
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
                m_own[j] = m[hh] if h == hh else m_own[j]

    @cuda.jit(device=True)
    def accumulate(v_buf, ring, at, s, acc, kv):
        """acc += p * v for the row's TPR tokens and the CTA's heads."""
        for t in range(TPR):
            to_float(v_buf, ring, at + V_AT + t * VPL * STRIDE, kv)
            for h in range(HPC):
                p = s[t * HPC + h]
                for i in range(SLOT):
                    acc[h * SLOT + i] += p * kv[i]

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
        part = cuda.blockIdx.z
        tid = cuda.threadIdx.x
        warp = tid // 32
        lane = tid - warp * 32
        row = warp * RPW + lane // LPR  # this lane's row in the CTA, [0, R)
        col = lane - (lane // LPR) * LPR  # its place in the row: vectors col, col + LPR, ...

        scale2 = float32(scale * LOG2E)
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
        at_b = uint32(at_a + STAGE_W)  # odd steps'
        blk = cuda.local.array(TPR, int32)  # table entries two steps ahead
        off = cuda.local.array(TPR, int32)
        ok = cuda.local.array(TPR, int32)

        for h in range(HPC):
            head = head0 + min(h, heads - 1)  # padded heads compute a copy, never written
            for i in range(SLOT):
                d = (col + (i // VEC) * LPR) * VEC + i % VEC
                q[h * SLOT + i] = float32(query[seq, head, d]) * scale2 if d < D else float32(0)
                acc[h * SLOT + i] = float32(0)
            m[h] = -math.inf
            lsum[h] = float32(0)
        for j in range(OWN):
            m_own[j] = -math.inf

        length = context_lens[seq]
        kept = int32(0)  # attended indices and counts are int32: no 64-bit compares
        start = int32(0)
        if window > 0:
            kept = int32(min(sinks, length))
            start = int32(max(length - window, kept))
        lo = int32(part * partition_size)
        hi = int32(min(lo + partition_size, kept + length - start))
        per_step = int32(R * TPR)
        steps = int32((max(hi - lo, 0) + per_step - 1) // per_step)  # the same in every lane
        limits(lim, lane, row, hi)

        # prologue: step 0's K/V in flight, step 1's table entries read
        for t in range(TPR):
            b0, o0, v0 = locate(lo + t * R + row, hi, kept, start, seq, block_tables)
            fetch_k(k_src, seq, b0, kv_head, o0, v0, col, k_a, ring, at_a + t * VPL * STRIDE)
            fetch_v(v_src, seq, b0, kv_head, o0, v0, col, v_a, ring, at_a + V_AT + t * VPL * STRIDE)
            blk[t], off[t], ok[t] = locate(
                lo + per_step + t * R + row, hi, kept, start, seq, block_tables
            )
        if STAGED:
            cp_async_commit()
        step = int32(0)
        while step < steps:
            while step < steps:  # the hot loop; ping-pong: A and B swap roles, no copies
                base = int32(lo + step * per_step)
                if step % 2 == 0:
                    issue(
                        k_src,
                        v_src,
                        seq,
                        kv_head,
                        col,
                        row,
                        blk,
                        off,
                        ok,
                        k_b,
                        v_b,
                        ring,
                        at_b,
                        base + 2 * per_step,
                        hi,
                        kept,
                        start,
                        block_tables,
                    )
                    if STAGED:
                        cp_async_wait(1)  # this lane's copies of step s have landed
                    if score(k_a, ring, at_a, q, dots, own_p, kv, m_own, lane, base, lim, row, hi):
                        break  # warp-uniform: the whole warp leaves to move the max
                    settle(own_p, s, lsum, lane)
                    accumulate(v_a, ring, at_a, s, acc, kv)
                else:
                    issue(
                        k_src,
                        v_src,
                        seq,
                        kv_head,
                        col,
                        row,
                        blk,
                        off,
                        ok,
                        k_a,
                        v_a,
                        ring,
                        at_a,
                        base + 2 * per_step,
                        hi,
                        kept,
                        start,
                        block_tables,
                    )
                    if STAGED:
                        cp_async_wait(1)
                    if score(k_b, ring, at_b, q, dots, own_p, kv, m_own, lane, base, lim, row, hi):
                        break
                    settle(own_p, s, lsum, lane)
                    accumulate(v_b, ring, at_b, s, acc, kv)
                step = int32(step + 1)
            if step < steps:  # finish the step whose scores moved a max (rare)
                regrow(dots, s, acc, m, m_own, lsum, lane)
                if step % 2 == 0:
                    accumulate(v_a, ring, at_a, s, acc, kv)
                else:
                    accumulate(v_b, ring, at_b, s, acc, kv)
                step = int32(step + 1)
        if STAGED:
            cp_async_wait(0)  # the last (masked, zero-fill) copies land before ...
            cuda.syncthreads()  # ... the ring, read by every warp, becomes the merge's

        # merge the rows' softmax states once, through shared memory
        acc_s = ring.view(np.float32)  # [R, HPC, DV] on the ring
        m_s = cuda.shared.array((R, HPC), float32)  # row maxima, then the rows' weights
        l_s = cuda.shared.array((R, HPC), float32)
        total_s = cuda.shared.array(HPC, float32)
        for h in range(HPC):
            for i in range(SLOT):
                c = col + (i // VEC) * LPR
                if c < NVEC:
                    acc_s[(row * HPC + h) * DV + c * VEC + i % VEC] = acc[h * SLOT + i]
            if col == 0:
                m_s[row, h] = m[h]
                l_s[row, h] = lsum[h]
        cuda.syncthreads()  # every row's state is in shared memory
        for h in range(tid, heads, NT):  # one thread per head, whatever the group size
            top = float32(-math.inf)
            for r in range(R):
                if l_s[r, h] != 0:  # a non-empty row (NaN included: it must propagate)
                    top = max(top, m_s[r, h])
            total = float32(0)
            for r in range(R):
                weight = math.exp2(m_s[r, h] - top) if l_s[r, h] != 0 else float32(0)
                total += weight * l_s[r, h]
                m_s[r, h] = weight
            total_s[h] = total
            max_logits[seq, head0 + h, part] = top / LOG2E  # natural units for merge.py
            exp_sums[seq, head0 + h, part] = total
        cuda.syncthreads()  # the rows' weights and each head's total are ready
        for i in range(tid, heads * D, NT):  # every (head, d), whatever the thread count
            h = i // D
            d = i - h * D
            num = float32(0)
            for r in range(R):
                num += m_s[r, h] * acc_s[(r * HPC + h) * DV + d]
            out[seq, head0 + h, part, d] = num / total_s[h] if total_s[h] != 0 else float32(0)

    return paged_decode
