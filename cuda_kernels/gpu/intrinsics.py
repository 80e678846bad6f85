"""The GPU side of `primitives`: LLVM intrinsics numba-cuda does not provide (imported
only on the real CUDA target; `sim/` holds the stand-ins with the same names).

    load16(array, index)   `load <4 x i32>, ptr addrspace(1), align 16, !invariant.load`
                           -> ld.global.nc.v4.u32 on sm_80 / sm_90
    store16(array, index, words)   its partner for the copy kernels -> st.global.v4.u32
    half2_to_float2(word)  bitcast i32 -> <2 x half>, fpext -> <2 x float>  (cvt.f32.f16 x2)
    bits_to_float(word)    bitcast i32 -> float (free: a register rename)
    itemsize(array)        the element size as a compile-time constant
    fast_exp2(x)           ex2.approx.ftz.f32 (one MUFU.EX2)

Reference: NVVM IR specification (address spaces, !invariant.load); PTX ISA, ld, st.
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
def store16(typingctx, array, index, words):
    """Write words (u32, u32, u32, u32), as load16 returns them, to the 16 bytes starting
    at element `index` of `array`: `store <4 x i32>, ptr addrspace(1), align 16`."""
    if not (
        isinstance(array, types.Array)
        and isinstance(index, types.Integer)
        and isinstance(words, types.UniTuple)
        and words.count == 4
        and isinstance(words.dtype, types.Integer)
    ):
        return None
    sig = types.void(array, index, words)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, value=args[0])
        at = context.cast(builder, args[1], sig.args[1], types.intp)
        element = builder.gep(ary.data, [at])  # generic pointer to array[index]
        vec = ir.Constant(ir.VectorType(_I32, 4), ir.Undefined)
        for i in range(4):
            word = context.cast(
                builder, builder.extract_value(args[2], i), sig.args[2].dtype, types.uint32
            )
            vec = builder.insert_element(vec, word, ir.Constant(_I32, i))
        ptr = builder.addrspacecast(element, ir.PointerType(element.type.pointee, 1))
        builder.store(vec, builder.bitcast(ptr, ir.PointerType(vec.type, 1)), align=16)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def itemsize(typingctx, array):
    """The array's element size in bytes as a compile-time constant (numba's
    `array.itemsize` is a run-time field: dividing strides by it costs a 64-bit division)."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, sig, args):
        return context.get_constant(
            types.intp, context.get_abi_sizeof(context.get_data_type(sig.args[0].dtype))
        )

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
    pair = builder.fpext(
        builder.bitcast(bits, ir.VectorType(ir.HalfType(), 2)), ir.VectorType(ir.FloatType(), 2)
    )
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
bits_to_float = _from_word(
    types.float32, lambda context, builder, sig, bits: builder.bitcast(bits, ir.FloatType())
)


# ---- tensor cores: mma.sync, ldmatrix, cp.async, f16x2 packing (sm_80+) -------------------
# The fragment conventions are stated once, in primitives.py's docstring.

_F32 = ir.FloatType()
_I64 = ir.IntType(64)


def _asm(builder, result, operands, text, constraints, side_effect=False):
    """Call one inline-PTX statement; `result` is an llvmlite type (a struct for several)."""
    fty = ir.FunctionType(result, [op.type for op in operands])
    return builder.call(ir.InlineAsm(fty, text, constraints, side_effect=side_effect), operands)


def _u32(context, builder, value, vtype):
    return context.cast(builder, value, vtype, types.uint32)


def _f32(context, builder, value, vtype):
    return context.cast(builder, value, vtype, types.float32)


def _make_mma(kind: str):
    text = (
        f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 "
        "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};"
    )
    constraints = ",".join(["=f"] * 4 + ["r"] * 6 + ["f"] * 4)

    def typer(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        words, accs = (a0, a1, a2, a3, b0, b1), (c0, c1, c2, c3)
        if not all(isinstance(w, types.Integer) for w in words):
            return None
        if not all(isinstance(c, (types.Float, types.Integer)) for c in accs):
            return None
        sig = types.UniTuple(types.float32, 4)(*words, *accs)

        def codegen(context, builder, sig, args):
            pairs = list(zip(args, sig.args, strict=True))
            ops = [_u32(context, builder, v, t) for v, t in pairs[:6]]
            ops += [_f32(context, builder, v, t) for v, t in pairs[6:]]
            out = _asm(builder, ir.LiteralStructType([_F32] * 4), ops, text, constraints)
            vals = [builder.extract_value(out, i) for i in range(4)]
            return context.make_tuple(builder, sig.return_type, vals)

        return sig, codegen

    return intrinsic(typer)


# D = A @ B + C on one 16x8x16 tile: A four u32 (f16x2 / bf16x2), B two u32, C/D four f32
mma_f16 = _make_mma("f16")
mma_bf16 = _make_mma("bf16")


def _shared_address(context, builder, array_type, array, index, index_type):
    """The 32-bit shared-window address of element `index` of a shared array, computed in
    32 bits (shared memory is < 4 GiB): the index arithmetic feeding it narrows to i32."""
    ary = context.make_array(array_type)(context, builder, value=array)
    shared = builder.addrspacecast(ary.data, ir.PointerType(ary.data.type.pointee, 3))
    size = context.get_abi_sizeof(context.get_data_type(array_type.dtype))
    at = context.cast(builder, index, index_type, types.int32)
    return builder.add(builder.ptrtoint(shared, _I32), builder.mul(at, ir.Constant(_I32, size)))


def _make_ldmatrix(count: int, trans: bool):
    regs = ", ".join(f"${i}" for i in range(count))
    text = (
        f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16 "
        f"{{{regs}}}, [${count}];"
    )
    constraints = ",".join(["=r"] * count + ["r", "~{memory}"])

    def typer(typingctx, array, index):
        if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
            return None
        ret = types.uint32 if count == 1 else types.UniTuple(types.uint32, count)

        def codegen(context, builder, sig, args):
            address = _shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            result = _I32 if count == 1 else ir.LiteralStructType([_I32] * count)
            out = _asm(builder, result, [address], text, constraints, side_effect=True)
            if count == 1:
                return out
            vals = [builder.extract_value(out, i) for i in range(count)]
            return context.make_tuple(builder, sig.return_type, vals)

        return ret(array, index), codegen

    return intrinsic(typer)


ldmatrix_x1, ldmatrix_x2, ldmatrix_x4 = (_make_ldmatrix(n, False) for n in (1, 2, 4))
ldmatrix_x1_trans, ldmatrix_x2_trans, ldmatrix_x4_trans = (
    _make_ldmatrix(n, True) for n in (1, 2, 4)
)


@intrinsic
def cp_async16(typingctx, dst, dst_index, src, src_index, nbytes):
    """cp.async.cg.shared.global: 16 bytes src[src_index..] -> dst[dst_index..] (shared),
    of which the first `nbytes` (16 or 0) are read and the rest zero-filled."""
    if not (
        isinstance(dst, types.Array)
        and isinstance(src, types.Array)
        and all(isinstance(v, types.Integer) for v in (dst_index, src_index, nbytes))
    ):
        return None

    def codegen(context, builder, sig, args):
        to = _shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        ary = context.make_array(sig.args[2])(context, builder, value=args[2])
        at = context.cast(builder, args[3], sig.args[3], types.intp)
        element = builder.gep(ary.data, [at])
        glob = builder.addrspacecast(element, ir.PointerType(element.type.pointee, 1))
        size = _u32(context, builder, args[4], sig.args[4])
        _asm(
            builder,
            ir.VoidType(),
            [to, builder.ptrtoint(glob, _I64), size],
            "cp.async.cg.shared.global [$0], [$1], 16, $2;",
            "r,l,r,~{memory}",
            side_effect=True,
        )
        return context.get_dummy_value()

    return types.void(dst, dst_index, src, src_index, nbytes), codegen


def _statement(text):
    """An intrinsic of no arguments: one PTX statement that orders memory."""

    def typer(typingctx):
        def codegen(context, builder, sig, args):
            _asm(builder, ir.VoidType(), [], text, "~{memory}", side_effect=True)
            return context.get_dummy_value()

        return types.void(), codegen

    return intrinsic(typer)


def _wait_group(prefix):
    """`prefix` N (N a compile-time integer): wait until at most N of the committed groups
    are still in flight."""

    def typer(typingctx, pending):
        if not isinstance(pending, types.IntegerLiteral):
            return None
        text = f"{prefix} {int(pending.literal_value)};"

        def codegen(context, builder, sig, args):
            _asm(builder, ir.VoidType(), [], text, "~{memory}", side_effect=True)
            return context.get_dummy_value()

        return types.void(pending), codegen

    return intrinsic(typer)


cp_async_commit = _statement("cp.async.commit_group;")  # close this thread's group of copies
cp_async_wait = _wait_group("cp.async.wait_group")  # this thread's groups


def _make_pack(kind: str):
    text = f"cvt.rn.{kind}x2.f32 $0, $2, $1;"  # cvt's first source goes to the upper half

    def typer(typingctx, lo, hi):
        if not all(isinstance(v, (types.Float, types.Integer)) for v in (lo, hi)):
            return None

        def codegen(context, builder, sig, args):
            ops = [_f32(context, builder, v, t) for v, t in zip(args, sig.args, strict=True)]
            return _asm(builder, _I32, ops, text, "=r,f,f")

        return types.uint32(lo, hi), codegen

    return intrinsic(typer)


# u32 holding (lo, hi) rounded to nearest-even: lo in bits 0-15 (the lower address)
pack_f16x2 = _make_pack("f16")
pack_bf16x2 = _make_pack("bf16")


# ---- Hopper warpgroup MMA (sm_90a): wgmma.mma_async with A in registers ---------------------


@intrinsic
def smem_desc(typingctx, array, index, lbo, sbo, swizzle):
    """The 64-bit wgmma shared-memory matrix descriptor of the matrix starting at element
    `index` of a shared array: start address >> 4 in bits 0-13, leading-dimension byte
    offset >> 4 in 16-29, stride-dimension byte offset >> 4 in 32-45, base offset 0,
    swizzle mode (0 none, 1 128-byte, 2 64-byte, 3 32-byte) in bits 62-63."""
    if not isinstance(array, types.Array) or not all(
        isinstance(v, types.Integer) for v in (index, lbo, sbo, swizzle)
    ):
        return None

    def codegen(context, builder, sig, args):
        address = builder.zext(
            _shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1]), _I64
        )

        def field(value, vtype, shift):
            v = context.cast(builder, value, vtype, types.uint64)
            v = builder.and_(builder.lshr(v, ir.Constant(_I64, 4)), ir.Constant(_I64, 0x3FFF))
            return builder.shl(v, ir.Constant(_I64, shift))

        start = builder.and_(builder.lshr(address, ir.Constant(_I64, 4)), ir.Constant(_I64, 0x3FFF))
        mode = builder.shl(
            context.cast(builder, args[4], sig.args[4], types.uint64), ir.Constant(_I64, 62)
        )
        desc = builder.or_(
            builder.or_(start, field(args[2], sig.args[2], 16)),
            builder.or_(field(args[3], sig.args[3], 32), mode),
        )
        return desc

    return types.uint64(array, index, lbo, sbo, swizzle), codegen


wgmma_fence = _statement("wgmma.fence.sync.aligned;")
wgmma_commit = _statement("wgmma.commit_group.sync.aligned;")
wgmma_wait = _wait_group("wgmma.wait_group.sync.aligned")  # the warpgroup's groups
