"""The GPU side of `primitives`: LLVM intrinsics numba-cuda does not provide.

Only imported when the real CUDA target is active; `_simulator.py` holds the
plain-Python stand-ins with the same names and meaning.

    load16(array, index)   `load <4 x i32>, ptr addrspace(1), align 16, !invariant.load`
                           -> ld.global.nc.v4.u32 on sm_80 / sm_90
    half2_to_float2(word)  bitcast i32 -> <2 x half>, fpext -> <2 x float>  (cvt.f32.f16 x2)
    bits_to_float(word)    bitcast i32 -> float (free: a register rename)
    itemsize(array)        the element size as a compile-time constant
    fast_exp2(x)           ex2.approx.ftz.f32 (one MUFU.EX2)

Reference: NVVM IR specification (address spaces, !invariant.load); PTX ISA, ld.
"""

from __future__ import annotations

from llvmlite import ir
from numba.cuda import types
from numba.cuda.extending import intrinsic

_I32 = ir.IntType(32)
_U32X4 = types.UniTuple(types.uint32, 4)


def device_address(array) -> int:
    """The device address of a numba device array's first element."""
    return int(array.device_ctypes_pointer.value or 0)


@intrinsic
def load16(typingctx, array, index):
    """(u32, u32, u32, u32): the 16 bytes starting at element `index` of `array`."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None
    sig = _U32X4(array, index)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, value=args[0])
        at = context.cast(builder, args[1], sig.args[1], types.intp)
        element = builder.gep(ary.data, [at])  # generic pointer to array[index]
        vec = ir.VectorType(_I32, 4)
        ptr = builder.addrspacecast(element, ir.PointerType(element.type.pointee, 1))
        load = builder.load(builder.bitcast(ptr, ir.PointerType(vec, 1)), align=16)
        load.set_metadata("invariant.load", builder.module.add_metadata([]))
        words = [builder.extract_element(load, ir.Constant(_I32, i)) for i in range(4)]
        return context.make_tuple(builder, sig.return_type, words)

    return sig, codegen


@intrinsic
def itemsize(typingctx, array):
    """The array's element size in bytes as a compile-time constant (numba's
    `array.itemsize` is a run-time field: dividing strides by it costs a 64-bit division)."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, sig, args):
        return context.get_constant(types.intp, context.get_abi_sizeof(
            context.get_data_type(sig.args[0].dtype)))

    return types.intp(array), codegen


def _from_word(result_type, convert):
    """An intrinsic of one integer `word` (its low 32 bits) -> `result_type`."""
    def typer(typingctx, word):
        if not isinstance(word, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            bits = builder.trunc(args[0], _I32) if args[0].type.width > 32 else args[0]
            return convert(context, builder, sig, bits)

        return result_type(word), codegen

    return intrinsic(typer)


def _halves(context, builder, sig, bits):
    pair = builder.fpext(builder.bitcast(bits, ir.VectorType(ir.HalfType(), 2)),
                         ir.VectorType(ir.FloatType(), 2))
    halves = [builder.extract_element(pair, ir.Constant(_I32, i)) for i in range(2)]
    return context.make_tuple(builder, sig.return_type, halves)


@intrinsic
def fast_exp2(typingctx, x):
    """2^x with one MUFU.EX2 (PTX ex2.approx.ftz.f32: 2 ulp, denormals flushed);
    2^-inf = +0. libdevice's exp2f adds denormal range fixes around the same MUFU."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        fty = ir.FunctionType(ir.FloatType(), [ir.FloatType()])
        asm = ir.InlineAsm(fty, "ex2.approx.ftz.f32 $0, $1;", "=f,f")
        return builder.call(asm, [args[0]])

    return types.float32(types.float32), codegen


# (lo, hi) float32 from the two float16 packed in a u32 (lo = the lower address)
half2_to_float2 = _from_word(types.UniTuple(types.float32, 2), _halves)
# the float32 whose bits are the u32 `word`
bits_to_float = _from_word(types.float32,
                           lambda context, builder, sig, bits: builder.bitcast(bits, ir.FloatType()))
