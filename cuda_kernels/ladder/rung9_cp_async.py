"""Rung 9, cp.async: the next step's K/V rows are in flight while this step computes.

What changed: in rung 8 a lane issues its 16-byte K load, then waits for it (~600 cycles
from HBM) before the dot product can start, and the same for V: each warp has one step
of K/V in flight, and only other warps can hide the wait. Here the warp keeps a 2-stage
ring in shared memory: before computing step j it issues step j + 1's copies with
`cp.async` (Ampere's asynchronous copy, SASS LDGSTS: global -> shared without passing
through registers, so nothing waits for it), commits them as one group, then
`cp.async.wait_group 1` waits until at most one group (step j + 1's) is still in flight:
step j's rows have landed. Each lane copies its own 16-byte pieces (K and V) into its
own slots and reads back only those, so no barrier is needed (a copy is visible to the
thread that issued it once its group retired). A token past the end copies 0 bytes
(`nbytes` 0: zeros, no read). Nothing else changes: the loop body is rung 8's, reading
shared memory instead of global.
Why: Little's law: bytes in flight = bandwidth x latency. A warp that waits for every
load has 1 KiB in flight (32 lanes x 16 bytes x K and V); with the ring it has 2.
What it buys: twice the bytes in flight per warp at the same occupancy, for 2 KiB of
shared memory per warp (`cuda_kernels/README.md` works out what that does to the
roofline share). The instructions: cp.async.cg.shared.global [dst], [src], 16, nbytes;
cp.async.commit_group; cp.async.wait_group N (`primitives`: the GPU's inline PTX in
`gpu/intrinsics.py`, the simulator's stand-ins in `sim/tensor_sim.py`).
"""

from __future__ import annotations

import functools

from numba import cuda, float32, uint32

from ..primitives import cp_async16, cp_async_commit, cp_async_wait
from .launch import REPORT_GROUP, decoder
from .rung5_vector import unpack16
from .rung8_split import PARTITION, Heads, Lane, token_steps, warp_steps
from .rung8_split import launch as split_launch

NAME = "cp_async"
READS = 1.0  # K/V bytes loaded per cache byte, per group of query heads (GQA)
PER_GROUP = True
IDEA = "a 2-stage cp.async ring: step j + 1's K/V rows in flight while step j computes"
PREDICTED_PCT = (15.0, 60.0)  # % of the read roofline at the ladder's case (README: Little's law)


def make_ring_kernel(G: int, fp16: bool = True):
    """Rung 8's kernel for groups of G heads, its loads through a 2-stage cp.async ring."""
    GV, VPL, ES = G * 8, (8 if fp16 else 4), (2 if fp16 else 4)
    start, merge_rows, finish = warp_steps(G, fp16)
    token_at, score, update = token_steps(G, fp16)

    @cuda.jit
    def ring_decode(
        kv_cache,
        query,
        block_tables,
        context_lens,
        scale,
        partial,
        lanes_per_row,
        max_logits,
        exp_sums,
        partition_size,
    ):
        """Rung 8's grid and outputs. ring[stage, k_or_v, lane] holds a lane's 16 bytes."""
        kv_head, seq, part = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
        tid = cuda.threadIdx.x
        rows = 32 // lanes_per_row
        row, chunk = tid // lanes_per_row, tid % lanes_per_row
        at_head = kv_head * (kv_cache.strides[2] // ES) + chunk * VPL
        lane = Lane(row, chunk, lanes_per_row, at_head, kv_cache.strides[1] // ES)
        ring = cuda.shared.array((2, 2, 32, 4), uint32)  # 2 stages x (K, V) x 32 lanes x 16 B
        q, acc = cuda.local.array(GV, float32), cuda.local.array(GV, float32)
        m, s = cuda.local.array(G, float32), cuda.local.array(G, float32)
        l = cuda.local.array(G, float32)  # noqa: E741
        kv = cuda.local.array(8, float32)
        st = Heads(q, acc, m, l, s, kv)
        start(query, seq, kv_head, scale, lane, st)
        first = part * partition_size
        end = min(context_lens[seq], first + partition_size)
        for t0 in range(first, end + rows, rows):  # one extra trip: it issues step 0
            t = t0 + row  # the token of the step issued now (computed next trip)
            at, nbytes = 0, 0
            if t < end:
                at, nbytes = token_at(kv_cache, block_tables, seq, t, lane), 16
            stage = ((t0 - first) // rows) % 2
            cp_async16(ring, ((stage * 2) * 32 + tid) * 4, kv_cache, at, nbytes)  # K
            cp_async16(ring, ((stage * 2 + 1) * 32 + tid) * 4, kv_cache, at + lane.v_off, nbytes)
            cp_async_commit()
            if t0 == first:
                continue  # nothing to compute yet
            cp_async_wait(1)  # the previous trip's group (this step's rows) has landed
            t, stage = t - rows, 1 - stage
            for h in range(G):
                s[h] = 0
            if t < end:
                k = ring[stage, 0, tid]
                unpack16((k[0], k[1], k[2], k[3]), kv, fp16)
            score(t < end, lane, st)
            if t < end:
                v = ring[stage, 1, tid]
                unpack16((v[0], v[1], v[2], v[3]), kv, fp16)
                update(st)
        cp_async_wait(0)  # the last (empty) group, before the warp exits
        merge_rows(lane, st)  # from here on: rung 8
        finish(partial, max_logits, exp_sums, seq, kv_head, part, lane, st)

    return ring_decode


@functools.cache
def kernel_for(group: int, fp16: bool = True):
    return make_ring_kernel(group, fp16)


kernel = kernel_for(REPORT_GROUP)


def launch(case, partition_size=PARTITION):
    """Rung 8's launcher (partials, then its merge kernel) with this rung's kernel."""
    return split_launch(case, partition_size, kernels=kernel_for, name=NAME)


decode = decoder(launch)


def ptx_spec(sig):
    from numba import types as t

    f32 = t.Array(t.float32, 3, "C")
    base = sig(t.int32, f32, f32, t.int32)
    return kernel_for(REPORT_GROUP).py_func, (*base[:5], t.Array(t.float32, 4, "C"), *base[6:]), 32
