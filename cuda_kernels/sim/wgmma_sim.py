"""Simulator stand-ins for `wgmma`: warpgroup MMA m64nNk16 (f16 in, f32 accumulate),
the shared-memory matrix descriptor and its swizzle modes, wgmma's commit/wait groups.

Installed by `wgmma` only when the simulator backend is active. Each follows the PTX
ISA (8.x), "Asynchronous Warpgroup Level Matrix Multiply-Accumulate":

  * Fragments ("Register Fragments", m64nNk16): a warpgroup is 4 consecutive warps
    (threads 128k .. 128k+127); warp w holds rows 16w .. 16w+15. With groupID
    g = lane >> 2 and t = lane % 4 (A_ROWS/A_COLS, C_ROWS/C_COLS of `sim/tensor_sim`):
      A [64 x 16], four f16x2 words: a0 = (16w+g, 2t:2t+2), a1 = (16w+g+8, 2t:2t+2),
        a2 = (16w+g, 2t+8:2t+10), a3 = (16w+g+8, 2t+8:2t+10); lower column in the low half;
      D [64 x N], N/2 f32: d[i] = (16w + g + 8 ((i >> 1) & 1), 8 (i >> 2) + 2t + (i & 1)),
        the m16n8 C layout repeated for every 8 columns.
  * The descriptor ("Matrix Descriptor Format"): bits 0-13 start address, 16-29 leading
    byte offset (LBO), 32-45 stride byte offset (SBO), each (x & 0x3FFFF) >> 4; bits 49-51
    base offset (must be 0 here); bits 62-63 swizzle: 0 none, 1 128-byte, 2 64-byte,
    3 32-byte. The byte address of B[k, n] ("Canonical Layouts", W the swizzle width in
    bytes, E = W / 2 fp16 per swizzled row):
      K-major (imm-trans-b 0), none: start + (k // 8) LBO + (n // 8) SBO + (n % 8) 16 + 2 (k % 8)
      K-major, swizzled:             start + (n // 8) SBO + (n % 8) W + 2k
      MN-major (imm-trans-b 1), none: start + (k // 8) LBO + (n // 8) SBO + (k % 8) 16 + 2 (n % 8)
      MN-major, swizzled:            start + (n // E) LBO + (k // 8) SBO + (k % 8) W + 2 (n % E)
    then the swizzle (CUTLASS's Swizzle<b, 4, 3>, b = log2(W / 16)) XORs address bits
    4 .. 4+b-1 with bits 7 .. 7+b-1 of the address itself (the absolute shared address,
    so a swizzled tile must start on a W * 8-byte boundary for the rows to line up).
  * Asynchrony: a wgmma reads A, B and the old D when issued; its D lands in acc only
    when wgmma_wait retires its commit group, as on the GPU, so a kernel that reads or
    writes acc before waiting goes wrong here too. Two wgmmas chained on the same
    accumulator before a wait see each other's result (the ISA allows that without a
    fence). wgmma_fence and fence_proxy_async have nothing to order here.

Shared addresses are positions in a simulated 256 KiB shared window: each shared array
gets a place the first time it is named, 1024k + MISALIGN bytes. Nothing guarantees a
GPU's static shared array 1024-byte alignment either, so MISALIGN (16-byte aligned,
not 128-byte aligned) makes a kernel that forgets to realign its swizzled tiles fail.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from .simulator import _numpy_of
from .tensor_sim import (
    A_COLS,
    A_ROWS,
    C_COLS,
    C_ROWS,
    WARPGROUP,
    SharedWindow,
    _b16_halves,
    _warpgroup,
)

SHAPES = tuple(range(8, 72, 8))
MISALIGN = 80  # bytes past a 1024-byte boundary where each shared array is placed
SWIZZLE_BYTES = {0: 0, 1: 128, 2: 64, 3: 32}
_WINDOW = SharedWindow(MISALIGN)


def shared_address(array, index):
    a = _numpy_of(array)
    return np.uint32(_WINDOW.base(a) + int(index) * a.itemsize)


def smem_desc(array, index, lbo, sbo, swizzle):
    address = int(shared_address(array, index))
    fields = ((address & 0x3FFFF) >> 4) | (((int(lbo) & 0x3FFFF) >> 4) << 16)
    return np.uint64(fields | (((int(sbo) & 0x3FFFF) >> 4) << 32) | ((int(swizzle) & 3) << 62))


def b_address(desc: int, k: int, n: int, trans_b: bool) -> int:
    """The shared-window byte address of B[k, n] read through descriptor `desc`."""
    start = (desc & 0x3FFF) << 4
    lbo, sbo = ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4
    if (desc >> 49) & 7:
        raise RuntimeError("wgmma stand-in: a non-zero matrix base offset is not modelled")
    width = SWIZZLE_BYTES[(desc >> 62) & 3]
    if width == 0 and not trans_b:
        return start + (k // 8) * lbo + (n // 8) * sbo + (n % 8) * 16 + 2 * (k % 8)
    if width == 0:
        return start + (k // 8) * lbo + (n // 8) * sbo + (k % 8) * 16 + 2 * (n % 8)
    if not trans_b:
        logical = start + (n // 8) * sbo + (n % 8) * width + 2 * k
    else:
        per_row = width // 2
        logical = (
            start + (n // per_row) * lbo + (k // 8) * sbo + (k % 8) * width + 2 * (n % per_row)
        )
    mask = width // 16 - 1
    return logical ^ (((logical >> 7) & mask) << 4)


def read_b(desc: int, n: int, trans_b: bool) -> np.ndarray:
    """B [16 x n] float64 as the descriptor describes it."""
    B = np.zeros((16, n))
    for k in range(16):
        for j in range(n):
            raw = ctypes.string_at(_WINDOW.host(b_address(desc, k, j, trans_b)), 2)
            B[k, j] = np.frombuffer(raw, np.float16)[0]
    return B


def _state() -> dict:
    """This simulated thread's wgmma state: issued writes, committed groups, and the
    pending value of every accumulator cell not yet written back."""
    thread = threading.current_thread()
    state = getattr(thread, "_wgmma", None)
    if state is None:
        state = thread._wgmma = {"open": [], "committed": [], "pending": {}}
    return state


def d_cells(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) [32, N/2]: the D element lane l's register i holds, within its warp's
    16 rows: the m16n8 C layout (c0..c3) repeated for every 8 columns."""
    i = np.arange(n // 2)[None, :]
    return C_ROWS[:, :1] + 8 * ((i >> 1) & 1), 8 * (i >> 2) + C_COLS[:, :1] + (i & 1)


def _product(got: dict, n: int, trans_b: bool, rows, cols) -> np.ndarray:
    """D [64 x N] float32 = A @ B (+ the old D) from the warpgroup's 128 contributions."""
    words = np.array([got[i][1] for i in range(WARPGROUP)])  # [128, 4]
    with np.errstate(invalid="ignore"):  # an unset accumulator (accumulate 0) may be junk
        acc_in = np.array([got[i][2] for i in range(WARPGROUP)], np.float64)  # [128, N/2]
    A, D = np.zeros((64, 16)), np.zeros((64, n))
    for w in range(4):
        lanes = slice(32 * w, 32 * w + 32)
        A[16 * w + A_ROWS, A_COLS] = _b16_halves(words[lanes], "f16")
        D[16 * w + rows, cols] = acc_in[lanes]
    with np.errstate(invalid="ignore", over="ignore"):
        out = A @ read_b(got[0][0], n, trans_b) + (D if got[0][3] else 0)
    return out.astype(np.float32)


_memo: dict = {}  # {id(round): (round, D)}: one product per warpgroup round
_memo_lock = threading.Lock()


def _make_wgmma(n: int, trans_b: bool):
    regs = n // 2
    kind = f"wgmma.m64n{n}k16{'.trans_b' if trans_b else ''}"

    def wgmma(desc, a0, a1, a2, a3, acc, base, accumulate):
        state, first = _state(), int(base)
        old = [state["pending"].get((id(acc), first + i), acc[first + i]) for i in range(regs)]
        got = _warpgroup(kind, (int(desc), (a0, a1, a2, a3), old, int(accumulate) != 0))
        if len({v[0] for v in got.values()}) != 1 or len({v[3] for v in got.values()}) != 1:
            raise RuntimeError(
                f"{kind}: the warpgroup's threads gave different descriptors or accumulate flags"
            )
        rows, cols = d_cells(n)
        with _memo_lock:  # the first thread of the round computes D for all 128
            out = _memo.get(id(got))
            if out is None or out[0] is not got:
                if len(_memo) > 64:  # old rounds: a thread still to read one recomputes it
                    _memo.clear()
                out = _memo[id(got)] = (got, _product(got, n, trans_b, rows, cols))
        out = out[1]
        me = threading.current_thread().thread_id % WARPGROUP
        w, lane = me // 32, me % 32
        mine = out[16 * w + rows[lane], cols[lane]]
        for r in range(regs):
            state["open"].append((acc, first + r, mine[r]))
            state["pending"][(id(acc), first + r)] = mine[r]

    wgmma.__name__ = f"wgmma_n{n}{'_t' if trans_b else ''}"
    return wgmma


WGMMA = {(n, t): _make_wgmma(n, t) for n in SHAPES for t in (False, True)}
globals().update({f.__name__: f for f in WGMMA.values()})


def wgmma_fence():
    pass


def fence_proxy_async():
    pass


def wgmma_commit():
    state = _state()
    state["committed"].append(state["open"])
    state["open"] = []


def wgmma_wait(pending):
    """Write back the oldest committed groups until at most `pending` are in flight."""
    state = _state()
    while len(state["committed"]) > int(pending):
        for acc, at, value in state["committed"].pop(0):
            acc[at] = value
    live = [w for group in state["committed"] for w in group] + state["open"]
    state["pending"] = {(id(acc), at): value for acc, at, value in live}
