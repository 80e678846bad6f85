"""Simulator stand-ins for the tensor-core primitives: mma.sync, ldmatrix, cp.async, packing.

Installed by `primitives` only when the simulator backend is active (the GPU gets the
inline PTX of `gpu/intrinsics.py`). Each follows the PTX ISA (version 8.x):

  * mma_f16 / mma_bf16: "Matrix Fragments for mma.m16n8k16 with floating point type".
    The 32 lanes of the warp meet (as the shuffle stand-ins do, `sim/simulator._exchange`);
    each brings its fragments, the stand-in places every element where the ISA's tables
    say that lane and register hold it (A_ROWS/A_COLS, B_ROWS/B_COLS, C_ROWS/C_COLS
    below, with groupID g = lane >> 2 and threadID_in_group t = lane % 4), computes
    D = A @ B + C in float64, rounds to float32 and hands each lane its part of D.
  * ldmatrix_x{1,2,4}[_trans]: "Warp-level matrix load instruction: ldmatrix". Threads
    8j .. 8j+7 give the row addresses of matrix j (16-byte aligned, 8 b16 each; only the
    first 8 * count lanes' addresses are used); lane l receives, for each matrix, the
    b16 pair at row l // 4, columns 2 (l % 4) and 2 (l % 4) + 1, or with .trans the pair
    at rows 2 (l % 4), 2 (l % 4) + 1 of column l // 4.
  * cp_async16 / cp_async_commit / cp_async_wait: "cp.async", "cp.async.commit_group",
    "cp.async.wait_group". A copy is recorded when issued (the source is read then: the
    kernels copy read-only K/V) and lands in shared memory only when a wait_group
    retires its group, so a kernel that reads before it waits sees stale data here too.
    Copies not yet committed are not waited for, as in the ISA.
  * pack_f16x2 / pack_bf16x2: cvt.rn.{f16,bf16}x2.f32, round to nearest even, `lo` in
    the low 16 bits (the lower address, the first element of a fragment pair).
"""

from __future__ import annotations

import ctypes
import threading
from functools import partial

import numpy as np

from .simulator import WARP, _exchange, _lock, checked_address, meet

FULL = 0xFFFFFFFF
_LANE = np.arange(WARP)
_G, _T = _LANE[:, None] >> 2, _LANE[:, None] & 3  # groupID, threadID_in_group, [32, 1]
_I8, _I4 = np.arange(8)[None, :], np.arange(4)[None, :]
A_ROWS = _G + 8 * ((_I8 >> 1) & 1)  # [lane, element]: a0..a3 hold elements (0,1)..(6,7)
A_COLS = 2 * _T + (_I8 & 1) + 8 * (_I8 >> 2)
B_ROWS = 2 * _T + (_I4 & 1) + 8 * (_I4 >> 1)  # b0 holds elements 0,1; b1 holds 2,3
B_COLS = np.broadcast_to(_G, (WARP, 4))
C_ROWS = np.broadcast_to(_G + 8 * (_I4 >> 1), (WARP, 4))  # c0..c3 / d0..d3
C_COLS = 2 * _T + (_I4 & 1)


def _lane() -> int:
    return threading.current_thread().thread_id % WARP


def _warp(kind: str, value) -> dict:
    """{lane: value} of the whole warp; .sync.aligned operations need all 32 lanes."""
    got = _exchange(FULL, value, kind)
    if len(got) != WARP:
        raise RuntimeError(f"{kind} needs all 32 lanes of a warp; this warp has {len(got)}")
    return got


def _b16_halves(words, kind: str) -> np.ndarray:
    """u32 words [..., n] -> float64 [..., 2n]: (lo, hi) of each, as fp16 or bf16."""
    w = np.asarray(words, np.uint64).astype(np.uint32)
    lo_hi = np.stack([w & 0xFFFF, w >> 16], axis=-1).astype(np.uint32)
    if kind == "f16":
        vals = lo_hi.astype(np.uint16).view(np.float16)
    else:
        vals = (lo_hi << 16).view(np.float32)
    return vals.astype(np.float64).reshape(*w.shape[:-1], -1)


def _mma(kind: str, a, b, c):
    got = _warp(f"mma.{kind}", (a, b, c))
    words_a = np.array([got[i][0] for i in range(WARP)])  # [32, 4]
    words_b = np.array([got[i][1] for i in range(WARP)])  # [32, 2]
    acc = np.array([got[i][2] for i in range(WARP)], np.float64)  # [32, 4]
    A, B, C = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
    A[A_ROWS, A_COLS] = _b16_halves(words_a, kind)
    B[B_ROWS, B_COLS] = _b16_halves(words_b, kind)
    C[C_ROWS, C_COLS] = acc
    with np.errstate(invalid="ignore", over="ignore"):
        D = (A @ B + C).astype(np.float32)
    lane = _lane()
    return tuple(D[C_ROWS[lane], C_COLS[lane]])


def mma_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """(d0, d1, d2, d3) of D = A @ B + C, fp16 A/B (four and two f16x2 words), f32 C/D."""
    return _mma("f16", (a0, a1, a2, a3), (b0, b1), (c0, c1, c2, c3))


def mma_bf16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """mma_f16 with bf16 A/B words."""
    return _mma("bf16", (a0, a1, a2, a3), (b0, b1), (c0, c1, c2, c3))


def _ldmatrix(count: int, trans: bool, array, index):
    kind = f"ldmatrix.x{count}{'.trans' if trans else ''}"
    address = checked_address(kind, array, index)
    got = _warp(kind, address)
    rows = [np.frombuffer(ctypes.string_at(got[i], 16), np.uint16) for i in range(8 * count)]
    tiles = np.array(rows, np.uint32).reshape(count, 8, 8)  # [matrix, row, column]
    lane = _lane()
    g, t = lane >> 2, lane & 3
    if trans:
        lo, hi = tiles[:, 2 * t, g], tiles[:, 2 * t + 1, g]
    else:
        lo, hi = tiles[:, g, 2 * t], tiles[:, g, 2 * t + 1]
    words = tuple(np.uint32(w) for w in lo | (hi << 16))
    return words[0] if count == 1 else words


ldmatrix_x1, ldmatrix_x2, ldmatrix_x4 = (partial(_ldmatrix, n, False) for n in (1, 2, 4))
ldmatrix_x1_trans, ldmatrix_x2_trans, ldmatrix_x4_trans = (
    partial(_ldmatrix, n, True) for n in (1, 2, 4)
)


def _groups() -> dict:
    """This simulated thread's cp.async state: the open copies, the committed groups."""
    thread = threading.current_thread()
    state = getattr(thread, "_cp_async", None)
    if state is None:
        state = thread._cp_async = {"open": [], "committed": []}
    return state


def cp_async16(dst, dst_index, src, src_index, nbytes):
    """Issue a 16-byte copy src[src_index..] -> dst[dst_index..]; the first `nbytes`
    (0..16) bytes are read, the rest are zeros."""
    n = int(nbytes)
    if not 0 <= n <= 16:
        raise RuntimeError(f"cp.async: src-size {n} is not in [0, 16]")
    to = checked_address("cp.async (shared)", dst, dst_index)
    data = b""
    if n:
        data = ctypes.string_at(checked_address("cp.async (global)", src, src_index), n)
    _groups()["open"].append((to, data + bytes(16 - n)))


def cp_async_commit():
    state = _groups()
    state["committed"].append(state["open"])
    state["open"] = []


def cp_async_wait(pending):
    """Retire the oldest committed groups until at most `pending` are left."""
    committed = _groups()["committed"]
    while len(committed) > int(pending):
        for to, data in committed.pop(0):
            ctypes.memmove(to, data, 16)


def pack_f16x2(lo, hi):
    with np.errstate(over="ignore"):  # beyond 65504 rounds to inf, as cvt.rn does
        return np.array([lo, hi], np.float32).astype(np.float16).view(np.uint32)[0]


def pack_bf16x2(lo, hi):
    bits = np.array([lo, hi], np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest, ties to even
    nan = np.isnan(np.array([lo, hi], np.float32))
    halves = np.where(nan, (bits >> 16) | 0x40, rounded).astype(np.uint32) & 0xFFFF
    return np.uint32(halves[0] | (halves[1] << 16))


# ---- What the wgmma stand-ins (`sim/wgmma_sim`) share with this module -----------------
# A warpgroup is 4 consecutive warps (threads 128k .. 128k+127) whose threads meet in one
# exchange (`_warpgroup`); shared addresses are positions in a simulated 256 KiB shared
# window (`SharedWindow`). The wgmma instructions themselves, their descriptors and
# swizzle modes are `sim/wgmma_sim.py` (one stand-in per idea: this module used to hold
# an older synchronous m64n8k16 copy).

WARPGROUP = 128


class SharedWindow:
    """The simulated 256 KiB shared window: each shared array gets a place `misalign` bytes
    past a 1024-byte boundary the first time a descriptor names it (`base`), and a window
    address maps back to the host bytes of the array holding it (`host`)."""

    def __init__(self, misalign: int = 0):
        self.misalign = misalign
        self.places: list = []  # [(window base, host address, nbytes)]

    def base(self, a: np.ndarray) -> int:
        with _lock:
            for base, host, nbytes in self.places:
                if host == a.ctypes.data and nbytes == a.nbytes:
                    return base
            end = max((b + n for b, _, n in self.places), default=0)
            base = -(-end // 1024) * 1024 + self.misalign
            if base + a.nbytes > 1 << 18:  # the window is full: start over
                self.places.clear()
                base = self.misalign
            self.places.append((base, a.ctypes.data, a.nbytes))
            return base

    def host(self, address: int, width: int = 2) -> int:
        """The host address of the `width` bytes at window `address`."""
        with _lock:
            for base, host, nbytes in self.places:
                if base <= address and address + width <= base + nbytes:
                    return host + address - base
        raise RuntimeError(f"wgmma: address {address:#x} is outside every shared array")


def _warpgroup(kind: str, value) -> dict:
    """{thread in group: value} once all 128 threads of the caller's warpgroup arrive."""
    thread = threading.current_thread()
    manager = thread._manager
    group, me = thread.thread_id // WARPGROUP, thread.thread_id % WARPGROUP
    if int(np.prod(manager._block_dim)) < WARPGROUP * (group + 1):
        raise RuntimeError(f"{kind} needs a whole warpgroup of 128 threads")
    everyone = frozenset(range(WARPGROUP))
    current, met = meet(manager, ("warpgroup", group, kind), everyone, me, value)
    if not met:
        raise RuntimeError(f"warpgroup {group}: not every thread reached the {kind}")
    return current.values
