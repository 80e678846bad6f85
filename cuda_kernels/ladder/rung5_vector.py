"""Rung 5, 16-byte loads: each lane reads 16 bytes of a K/V row with one instruction.

What changed: rungs 2-4 gave each thread one element, so one K row of 128 float16 was
128 two-byte loads by 4 warps. Here a lane loads 16 bytes at once (`load16` below: one
`LDG.E.128`), VPL = 16 / itemsize elements (8 float16, 4 float32), and unpacks them to
float32 in registers. A row is then LPR = head_dim / VPL lanes (16 at head_dim 128,
float16), which fit in one warp: the thread block shrinks to a single warp per
(sequence, head), so rung 4's shared-memory totals and both barriers go, and the score
is rung 4's butterfly over the LPR lanes of the row (`lane_sum`). One token per step:
at head_dim 128 the warp's other 16 lanes wait (rung 6 gives them tokens).
Why: memory moves in 32-byte sectors and a load instruction costs the same issue slot
whatever its width, so a wide load fetches 8x the bytes per instruction.
What it buys: 8x fewer load, index and loop instructions per K/V byte (the report's
sass_per_kv_byte), no shared memory, no barrier.
Refuses: a head_dim whose 16-byte pieces do not divide a warp, a cache not 16-byte
aligned (ValueError naming kv_cache).

The load, shown here (rungs 6-9 import these three from this file): numba has no 16-byte
load, so `load16` is an LLVM intrinsic: `load <4 x i32>` from the global address space,
16-byte aligned, marked `!invariant.load` (the cache does not change during the kernel),
which NVVM emits as `ld.global.nc.v4.u32`. `half2_to_float2` reinterprets a 32-bit word as
two float16 and widens them; `bits_to_float` reinterprets one as a float32. Under the
simulator the same names come from `sim/simulator.py` (plain Python, same meaning).
"""

from __future__ import annotations

import math

from numba import cuda, float32

from .. import _backend
from .launch import decoder

NAME = "vector_loads"
READS = 1.0  # K/V bytes loaded per cache byte, per query head
IDEA = "each lane loads 16 bytes of a K/V row (LDG.128); one warp per (sequence, head)"
PREDICTED_PCT = (0.5, 3.0)  # % of the read roofline at the ladder's case (README: Little's law)

if _backend.backend() == "simulator":
    from ..sim.simulator import bits_to_float, half2_to_float2, load16
else:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load16(typingctx, array, index):
        """(u32, u32, u32, u32): the 16 bytes from element `index` of `array` (aligned)."""
        sig = types.UniTuple(types.uint32, 4)(array, index)

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
            element = builder.gep(data, [context.cast(builder, args[1], sig.args[1], types.intp)])
            vec = ir.VectorType(ir.IntType(32), 4)
            ptr = builder.addrspacecast(element, ir.PointerType(element.type.pointee, 1))
            load = builder.load(builder.bitcast(ptr, ir.PointerType(vec, 1)), align=16)
            load.set_metadata("invariant.load", builder.module.add_metadata([]))
            words = [builder.extract_element(load, ir.IntType(32)(i)) for i in range(4)]
            return context.make_tuple(builder, sig.return_type, words)

        return sig, codegen

    @intrinsic
    def half2_to_float2(typingctx, word):
        """(lo, hi): the two float16 of a u32 word (lo at the lower address) as float32."""

        def codegen(context, builder, sig, args):
            pair = builder.bitcast(args[0], ir.VectorType(ir.HalfType(), 2))
            pair = builder.fpext(pair, ir.VectorType(ir.FloatType(), 2))
            halves = [builder.extract_element(pair, ir.IntType(32)(i)) for i in range(2)]
            return context.make_tuple(builder, sig.return_type, halves)

        return types.UniTuple(types.float32, 2)(types.uint32), codegen

    @intrinsic
    def bits_to_float(typingctx, word):
        """The float32 whose bits are the u32 `word`."""

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.FloatType())

        return types.float32(types.uint32), codegen


@cuda.jit(device=True)
def lane_sum(value, width):
    """Rung 4's butterfly over the aligned group of `width` lanes (a power of two)."""
    off = width >> 1
    while off > 0:
        value += cuda.shfl_xor_sync(0xFFFFFFFF, value, off)
        off >>= 1
    return value


@cuda.jit(device=True)
def unpack16(raw, dst, fp16):
    """The 16 loaded bytes as float32: dst[0:8] (float16 K/V) or dst[0:4] (float32)."""
    for i in range(4):
        if fp16:
            dst[2 * i], dst[2 * i + 1] = half2_to_float2(raw[i])
        else:
            dst[i] = bits_to_float(raw[i])


def make_vector_kernel(fp16: bool):
    """The kernel for float16 (VPL = 8) or float32 (VPL = 4) K/V: VPL is a compile-time
    constant, so the per-lane arrays stay in registers."""
    VPL = 8 if fp16 else 4  # elements per 16-byte load
    ES = 2 if fp16 else 4  # bytes per element: strides are in bytes, load16 counts elements

    @cuda.jit
    def vector_decode(kv_cache, query, block_tables, context_lens, scale, out, lanes_per_row):
        """Grid (H, S), 32 threads. Lane c < LPR owns head elements [c * VPL, c * VPL +
        VPL) of every token; a lane >= LPR repeats lane (lane % LPR)'s work (the same
        addresses, so no extra memory traffic) and writes nothing."""
        head, seq = cuda.blockIdx.x, cuda.blockIdx.y
        lane = cuda.threadIdx.x
        mine = lane < lanes_per_row
        chunk = lane % lanes_per_row
        kv_head = head // (query.shape[1] // kv_cache.shape[2])
        block_size = kv_cache.shape[3]
        at_head = kv_head * (kv_cache.strides[2] // ES) + chunk * VPL
        v_off = kv_cache.strides[1] // ES  # from a K row to its V row, in elements
        q = cuda.local.array(8, float32)  # q[chunk * VPL + i] * scale
        acc = cuda.local.array(8, float32)
        kv = cuda.local.array(8, float32)  # one unpacked 16-byte piece of K or V
        for i in range(VPL):
            q[i] = float32(query[seq, head, chunk * VPL + i]) * scale
            acc[i] = 0
        m = float32(-math.inf)
        l = float32(0)  # noqa: E741
        for t in range(context_lens[seq]):
            block = block_tables[seq, t // block_size]
            at = block * (kv_cache.strides[0] // ES) + (t % block_size) * (
                kv_cache.strides[3] // ES
            )
            at += at_head
            unpack16(load16(kv_cache, at), kv, fp16)  # one LDG.128: VPL elements of K
            score = float32(0)
            for i in range(VPL):
                score += q[i] * kv[i]
            score = lane_sum(score, lanes_per_row)  # every lane calls it: no divergence
            m_new = max(m, score)
            alpha = math.exp(m - m_new)
            p = math.exp(score - m_new)
            l = l * alpha + p  # noqa: E741
            unpack16(load16(kv_cache, at + v_off), kv, fp16)  # and of V
            for i in range(VPL):
                acc[i] = acc[i] * alpha + p * kv[i]
            m = m_new
        if mine:
            for i in range(VPL):
                out[seq, head, chunk * VPL + i] = acc[i] / l

    return vector_decode


_kernels = {fp16: make_vector_kernel(fp16) for fp16 in (True, False)}
kernel = _kernels[True]  # the instance `report --ladder` compiles (float16)


def launch(case, kernels=None, name=NAME):
    """`kernels` and `name` (rung 6's): {fp16: kernel} of the same
    signature, and the rung a refusal names."""
    lanes = case.require_vector_rows(name)
    kern = (kernels or _kernels)[case.dtype.itemsize == 2]
    return case.run(kern, (case.num_heads, case.num_seqs), 32, lanes)


decode = decoder(launch)


def ptx_spec(sig):
    from numba import types as t

    return kernel.py_func, sig(t.int32), 32
