"""The GPU side of `wgmma`: Hopper warpgroup MMA of any width N, as inline PTX (sm_90a).

Imported only on the real CUDA target (`sim/wgmma_sim.py` holds the stand-ins; kernels
compile with cc=(9, 0, "a")). wgmma_n{N} is wgmma.mma_async.sync.aligned.m64n{N}k16.f32.
f16.f16 with B K-major, wgmma_n{N}_t with B MN-major (imm-trans-b 1); acc, a float32
local array, is updated in place (accumulate 0: D = A B). The asm text is generated from
N: $0 .. $(N/2 - 1) are D (tied to acc's old values), then the four A words, the 64-bit
descriptor and the accumulate flag (the scale-d predicate).

Reference: PTX ISA 8.x, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate".
"""

from __future__ import annotations

from llvmlite import ir
from numba.cuda import types
from numba.cuda.extending import intrinsic

from .intrinsics import (  # noqa: F401  (re-exported)
    _F32,
    _asm,
    _shared_address,
    _statement,
    _u32,
    smem_desc,
    wgmma_commit,
    wgmma_fence,
    wgmma_wait,
)

SHAPES = tuple(range(8, 72, 8))  # the N served: 8, 16, ..., 64 (the ISA allows up to 256)


def wgmma_text(n: int, trans_b: bool) -> str:
    """The inline PTX of one m64nNk16 f16 -> f32 wgmma with A in registers."""
    regs = n // 2
    d = ", ".join(f"${i}" for i in range(regs))
    a = ", ".join(f"${regs + i}" for i in range(4))
    return (
        "{ .reg .pred p; "
        f"setp.ne.b32 p, ${regs + 5}, 0; "
        f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 "
        f"{{{d}}}, {{{a}}}, ${regs + 4}, p, 1, 1, {int(trans_b)}; }}"
    )


def wgmma_constraints(n: int) -> str:
    """N/2 f32 outputs, four u32 A words, the u64 descriptor, the u32 flag, then the N/2
    old accumulators tied to the outputs; memory clobbered (B is read from shared)."""
    regs = n // 2
    return ",".join(
        ["=f"] * regs + ["r"] * 4 + ["l", "r"] + [str(i) for i in range(regs)] + ["~{memory}"]
    )


def _make_wgmma(n: int, trans_b: bool):
    regs = n // 2
    text, constraints = wgmma_text(n, trans_b), wgmma_constraints(n)

    def typer(typingctx, desc, a0, a1, a2, a3, acc, base, accumulate):
        scalars = (desc, a0, a1, a2, a3, base, accumulate)
        if not all(isinstance(v, types.Integer) for v in scalars):
            return None
        if not (isinstance(acc, types.Array) and acc.ndim == 1 and acc.dtype == types.float32):
            return None

        def codegen(context, builder, sig, args):
            words = [
                _u32(context, builder, v, t) for v, t in zip(args[1:5], sig.args[1:5], strict=True)
            ]
            desc64 = context.cast(builder, args[0], sig.args[0], types.uint64)
            flag = _u32(context, builder, args[7], sig.args[7])
            ary = context.make_array(sig.args[5])(context, builder, value=args[5])
            at = context.cast(builder, args[6], sig.args[6], types.intp)
            cells = [
                builder.gep(ary.data, [builder.add(at, ir.Constant(at.type, i))])
                for i in range(regs)
            ]
            old = [builder.load(c) for c in cells]
            out = _asm(
                builder,
                ir.LiteralStructType([_F32] * regs),
                [*words, desc64, flag, *old],
                text,
                constraints,
                side_effect=True,
            )
            for i, cell in enumerate(cells):
                builder.store(builder.extract_value(out, i), cell)
            return context.get_dummy_value()

        return types.void(desc, a0, a1, a2, a3, acc, base, accumulate), codegen

    return intrinsic(typer)


WGMMA = {(n, t): _make_wgmma(n, t) for n in SHAPES for t in (False, True)}
globals().update({f"wgmma_n{n}{'_t' if t else ''}": f for (n, t), f in WGMMA.items()})


@intrinsic
def shared_address(typingctx, array, index):
    """The 32-bit shared-window address of element `index` of a shared array."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        return _shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])

    return types.uint32(array, index), codegen


# generic-proxy writes to shared memory (st.shared, cp.async) become visible to the async
# proxy wgmma reads B through (PTX ISA, "Memory Consistency Model": proxies)
fence_proxy_async = _statement("fence.proxy.async.shared::cta;")
