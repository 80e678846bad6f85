"""Plain-Python stand-ins for the primitives Numba's CUDA simulator lacks (it runs every
CUDA thread as a Python thread, has no warp shuffles and cannot run an `@intrinsic`).
`primitives` installs them on the simulator backend only, with the semantics the CUDA C++
Programming Guide documents ("Warp Shuffle Functions"):

  * shfl_sync(mask, v, src_lane), shfl_up_sync(mask, v, delta),
    shfl_down_sync(mask, v, delta), shfl_xor_sync(mask, v, lane_mask): numba's API,
    width 32 as numba compiles them. `shuffle(mode, mask, v, b, width)` is the general
    form with CUDA's `width`: lanes are split into aligned groups of `width`; idx reads
    lane (src % width) of its own group; up/down return the caller's own value when the
    source falls outside its group; xor may read an earlier group, not a later one.
  * Each call is a warp-synchronous exchange among the lanes named in `mask` (those that
    exist in the block): every such lane must call it, as CUDA requires. A lane not in
    its own mask, or reading a lane outside the mask (undefined in CUDA), raises; lanes
    that never arrive (a divergent shuffle) raise after a timeout instead of hanging.
  * any_sync and syncwarp ("Warp Vote Functions") are the same warp-synchronous exchange;
    `cuda.shared.array` becomes a thread-safe copy of numba's own (`_shared_array`);
  * load16 and store16 touch memory as the GPU does; a misaligned or out-of-bounds
    address raises (on a GPU: a misaligned-address or illegal-address fault).
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading

import numpy as np

WARP = 32
TIMEOUT_S = 60.0
MODES = ("idx", "up", "down", "xor")
_lock = threading.Lock()


class _Round:
    """One shuffle of one warp: the lanes expected, the values they brought."""

    def __init__(self, lanes):
        self.lanes = lanes
        self.values: dict = {}
        self.done = threading.Event()


def _me():
    thread = threading.current_thread()
    manager = getattr(thread, "_manager", None)
    if manager is None:
        raise RuntimeError("warp shuffles can only be called inside a simulated kernel")
    size = int(np.prod(manager._block_dim))
    return manager, thread.thread_id // WARP, thread.thread_id % WARP, size


def _exchange(mask: int, value, kind: str = "shfl"):
    """{lane: value} once every lane of `mask` in this warp has arrived at this `kind` of
    operation (lanes at different kinds never meet: the timeout reports it)."""
    manager, warp, lane, size = _me()
    if not (mask >> lane) & 1:
        raise RuntimeError(f"shuffle called by lane {lane} which is not in its mask {mask:#010x}")
    lanes = frozenset(i for i in range(WARP) if (mask >> i) & 1 and warp * WARP + i < size)
    current, met = meet(manager, (warp, mask, kind), lanes, lane, value)
    if not met:
        missing = sorted(current.lanes - set(current.values))
        raise RuntimeError(
            f"warp {warp}: lanes {missing} of mask {mask:#010x} never reached "
            f"the {kind} (divergent {kind}_sync)"
        )
    return current.values


def meet(manager, key, lanes: frozenset, me: int, value) -> tuple[_Round, bool]:
    """Bring `value` to the block's round `key` that `lanes` join: (round, all arrived). It
    gives up only after TIMEOUT_S in which no lane arrived (a loaded machine starts a
    block's last threads seconds late: slow, not divergent)."""
    with _lock:
        rooms = manager.__dict__.setdefault("_shuffle_rooms", {})
        current = rooms.get(key)
        if current is None:
            current = rooms[key] = _Round(lanes)
        current.values[me] = value
        if len(current.values) == len(current.lanes):
            del rooms[key]  # the next call of these lanes starts a new round
            current.done.set()
    arrived = 0
    while arrived != len(current.values):  # a lane came during the last wait: wait again
        arrived = len(current.values)
        if current.done.wait(TIMEOUT_S):
            return current, True
    return current, False


def source_lane(mode: str, lane: int, b: int, width: int) -> int:
    """The lane whose value `lane` receives (itself when CUDA says 'own value')."""
    if width < 1 or width > WARP or width & (width - 1):
        raise ValueError(f"width must be a power of two in [1, 32], got {width}")
    first = lane & ~(width - 1)  # first lane of this lane's group
    if mode == "idx":
        return first + b % width
    if mode == "up":
        return lane - b if lane - b >= first else lane
    if mode == "down":
        return lane + b if lane + b < first + width else lane
    if mode == "xor":
        src = lane ^ b
        return src if src < first + width else lane
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def shuffle(mode: str, mask: int, value, b: int, width: int = WARP):
    """CUDA's __shfl*_sync(mask, value, b, width) for the calling simulated lane."""
    _, _, lane, _ = _me()
    src = source_lane(mode, lane, int(b), int(width))
    values = _exchange(int(mask) & 0xFFFFFFFF, value)
    if src not in values:
        raise RuntimeError(
            f"lane {lane} reads lane {src}, which is not in mask {mask:#010x} (undefined in CUDA)"
        )
    return values[src]


# numba's four shuffles (width 32) and the `shuffle` mode each one is
SHUFFLES = {
    "shfl_sync": "idx",
    "shfl_up_sync": "up",
    "shfl_down_sync": "down",
    "shfl_xor_sync": "xor",
}
SWITCH_INTERVAL_S = 5e-4


def any_sync(mask, predicate):
    """CUDA's __any_sync: 1 if the predicate is non-zero in any lane of `mask`, else 0."""
    votes = _exchange(int(mask) & 0xFFFFFFFF, bool(predicate), "vote")
    return int(any(bool(v) for v in votes.values()))


def syncwarp(mask=0xFFFFFFFF):
    """CUDA's __syncwarp: the lanes of `mask` wait for one another."""
    _exchange(int(mask) & 0xFFFFFFFF, None, "syncwarp")


def install() -> None:
    """Give the simulator's in-kernel `cuda` module the four shuffles, `any_sync` and
    `syncwarp` (numba's own kept) and a thread-safe `cuda.shared.array` (idempotent), and
    lower Python's 5 ms thread switch interval (every shuffle hands the GIL to each lane
    in turn: 2-3x faster kernels here)."""
    from numba.cuda.simulator.kernelapi import FakeCUDAModule, FakeCUDAShared

    sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
    for name, mode in SHUFFLES.items():
        setattr(FakeCUDAModule, name, staticmethod(functools.partial(shuffle, mode)))
    for fn in (any_sync, syncwarp):
        if not hasattr(FakeCUDAModule, fn.__name__):
            setattr(FakeCUDAModule, fn.__name__, staticmethod(fn))
    FakeCUDAShared.array = _shared_array


def _shared_array(self, shape, dtype, alignment=None):
    """numba's simulated `cuda.shared.array` (one array per source line) with its
    check-then-create under a lock: two threads arriving together could each create one
    (garbage output once in tens of runs). `alignment`: bytes, a power of two."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    if alignment is not None and (alignment <= 0 or alignment & (alignment - 1)):
        raise ValueError(f"shared array alignment must be a power of two, got {alignment}")
    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    if shape == 0:  # dynamic shared memory: one buffer for all
        count = self._dynshared_size // dtype.itemsize
        return np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
    caller = sys._getframe(1)
    key = (caller.f_code.co_filename, caller.f_lineno)
    with _lock:
        found = self._allocations.get(key)
        if found is None:
            found = self._allocations[key] = _aligned_empty(shape, dtype, alignment or 1)
    return found


def _aligned_empty(shape, dtype, alignment: int) -> np.ndarray:
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, np.uint8)
    skip = -raw.ctypes.data % alignment
    return raw[skip : skip + nbytes].view(dtype).reshape(shape)


def _numpy_of(array) -> np.ndarray:
    while not isinstance(array, np.ndarray):
        inner = array.__dict__.get("_item")
        array = inner if inner is not None else array._ary
    return array


def device_address(array) -> int:
    return int(_numpy_of(array).ctypes.data)


def _extent(a: np.ndarray) -> tuple[int, int]:
    lo = hi = a.ctypes.data
    for n, s in zip(a.shape, a.strides, strict=True):
        if n > 1:
            lo, hi = lo + min(0, (n - 1) * s), hi + max(0, (n - 1) * s)
    return lo, hi + a.itemsize


def checked_address(what: str, array, index, nbytes: int = 16) -> int:
    """Address of element `index`, which must start 16 aligned bytes inside the array."""
    a = _numpy_of(array)
    address = a.ctypes.data + int(index) * a.itemsize
    lo, hi = _extent(a)
    if address % 16:
        raise RuntimeError(
            f"{what}: misaligned address (element {index}, "
            f"{address % 16} bytes past a 16-byte boundary)"
        )
    if nbytes and (address < lo or address + nbytes > hi):
        raise RuntimeError(f"{what}: element {index} is outside the array (16 bytes from it)")
    return address


def load16(array, index):
    words = np.frombuffer(ctypes.string_at(checked_address("load16", array, index), 16), np.uint32)
    return tuple(np.uint32(w) for w in words)


def store16(array, index, words):
    raw = np.array([int(w) for w in words], np.uint32).tobytes()
    ctypes.memmove(checked_address("store16", array, index), raw, 16)


def itemsize(array):
    return _numpy_of(array).itemsize


def fast_exp2(x):
    """2^x in float32 (the GPU's ex2.approx differs by at most 2 ulp)."""
    return np.float32(np.exp2(np.float32(x)))


def half2_to_float2(word):
    lo, hi = np.array([word], np.uint32).view(np.float16).astype(np.float32)
    return lo, hi


def bits_to_float(word):
    return np.array([word], np.uint32).view(np.float32)[0]
