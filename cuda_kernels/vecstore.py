"""One 16-byte global store, the partner of `primitives.load16`, for the copy kernels.

    store16(array, index, words)   words = (u32, u32, u32, u32) as load16 returns them

writes the 16 bytes at element `index` of `array` (the caller guarantees alignment and
bounds: the launchers check `primitives.aligned16`). On a GPU: LLVM `store <4 x i32>,
ptr addrspace(1), align 16`, i.e. `st.global.v4.u32`; under the simulator plain Python,
where a misaligned or out-of-bounds address raises, as a GPU would fault.

Reference: NVVM IR specification (address spaces); PTX ISA, st; CUDA C++ Programming
Guide, "Device Memory Accesses" (16-byte naturally aligned vector accesses).
"""

from __future__ import annotations

import ctypes

import numpy as np

from . import _backend


def _simulated_store16(array, index, words):
    from .sim.simulator import checked_address

    raw = np.array([int(w) for w in words], np.uint32).tobytes()
    ctypes.memmove(checked_address("store16", array, index), raw, 16)


def _gpu_store16():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    i32 = ir.IntType(32)

    @intrinsic
    def store16(typingctx, array, index, words):
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
            vec = ir.Constant(ir.VectorType(i32, 4), ir.Undefined)
            for i in range(4):
                word = context.cast(
                    builder, builder.extract_value(args[2], i), sig.args[2].dtype, types.uint32
                )
                vec = builder.insert_element(vec, word, ir.Constant(i32, i))
            ptr = builder.addrspacecast(element, ir.PointerType(element.type.pointee, 1))
            builder.store(vec, builder.bitcast(ptr, ir.PointerType(vec.type, 1)), align=16)
            return context.get_dummy_value()

        return sig, codegen

    return store16


store16 = _simulated_store16 if _backend.backend() == "simulator" else _gpu_store16()
