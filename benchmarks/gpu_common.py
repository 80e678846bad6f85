"""Shared pieces of the GPU benchmarks: the event timer, random device buffers, the check
against the reference, the timed decode launch, the read-only roofline kernel, the per-phase
time guard and the working-set rotation past the L2. `cuda_kernels` is imported before
numba, so this module picks the backend (a GPU, else the simulator) whoever imports it.
"""

from __future__ import annotations  # noqa: I001  (cuda_kernels before numba: see below)

import statistics
import sys
import time
import traceback
from functools import partial
from typing import NamedTuple

import numpy as np

import cuda_kernels  # first: it selects the CUDA backend before numba.cuda loads
from cuda_kernels import attention
from cuda_kernels.tools import roofline
from cuda_kernels._checks import require_scale
from cuda_kernels.merge import merge_partitions
from cuda_kernels.primitives import itemsize, load16
from numba import cuda, uint32

L2_BYTES = roofline.L2_BYTES  # 50 MB on an H100 and an H200
WORKING_SET = 4 * L2_BYTES
PER_SAMPLE = 10  # launches between one pair of events
TOTAL_S = 450.0  # phases stop starting after 7.5 minutes: with the startup, the run stays under 9
TENSOR_PEAK_TFLOPS = roofline.TENSOR_FLOPS_S / 1e12  # H200 dense fp16, ~990


def refuses(script: str, dry_run: bool) -> bool:
    """On the simulator without --dry-run: say so in one line and time nothing."""
    if dry_run or cuda_kernels.backend() == "gpu":
        return False
    print(
        f"{script}: no GPU (cuda_kernels runs on the simulator); refusing to time anything. "
        "Use --dry-run to check the script itself.",
        file=sys.stderr,
    )
    return True


def device_name() -> str:
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def tflops(flop: float, ms) -> float | None:
    """TFLOP/s of `flop` operations in `ms` milliseconds (None when untimed)."""
    return flop / ms / 1e9 if ms else None


def pct_of_tensor_peak(flop: float, ms) -> float | None:
    rate = tflops(flop, ms)
    return 100 * rate / TENSOR_PEAK_TFLOPS if rate else None


class CompileClock:
    """Seconds spent in (and outermost entries into) numba's compiler lock while installed:
    every JIT compile holds it, nested entries (device functions) are not counted again."""

    def __init__(self):
        self.seconds, self.count, self._depth, self._t0 = 0.0, 0, 0, 0.0
        try:
            from numba.cuda.core import event

            self._kind = "numba-cuda:compiler_lock"
        except ImportError:  # older numba-cuda: numba's own events
            from numba.core import event

            self._kind = "numba:compiler_lock"
        outer = self

        class _Listener(event.Listener):
            def on_start(self, ev):
                if outer._depth == 0:
                    outer._t0 = time.perf_counter()
                outer._depth += 1

            def on_end(self, ev):
                outer._depth -= 1
                if outer._depth == 0:
                    outer.seconds += time.perf_counter() - outer._t0
                    outer.count += 1

        self._event, self._listener = event, _Listener()

    def __enter__(self):
        self._event.register(self._kind, self._listener)
        return self

    def __exit__(self, *exc):
        self._event.unregister(self._kind, self._listener)


class Phases:
    """The per-phase time guard: `run(name, budget_s, fn)` calls fn(guard) when budget_s fits
    in what is left of total_s (fn may stop early on guard.left()), else records the skip.
    An exception ends that phase only. `record`: per phase seconds, compile_s, compiles,
    or skipped, or error and traceback."""

    def __init__(
        self, total_s: float = TOTAL_S, clock=time.perf_counter, began: float | None = None
    ):
        self.clock, self.began = clock, clock() if began is None else began
        self.deadline = self.began + total_s
        self.record: dict = {}
        self._phase_end = self.deadline

    def left(self) -> float:
        """Seconds left for the running phase: its budget, cut at the run's deadline."""
        return min(self._phase_end, self.deadline) - self.clock()

    def run(self, name: str, budget_s: float, fn, default=None):
        if self.deadline - self.clock() < budget_s:
            self.record[name] = {
                "skipped": f"needs {budget_s:.0f} s, "
                f"{max(self.deadline - self.clock(), 0):.0f} s left"
            }
            return default
        start = self.clock()
        self._phase_end = start + budget_s
        failed = None
        with CompileClock() as compiles:
            try:
                result = fn(self)
            except Exception as error:  # noqa: BLE001  (one phase's failure ends it alone)
                result, failed = default, error
        self.record[name] = {
            "seconds": round(self.clock() - start, 2),
            "compile_s": round(compiles.seconds, 2),
            "compiles": compiles.count,
        }
        if failed is not None:
            self.record[name]["error"] = f"{type(failed).__name__}: {failed}"
            self.record[name]["traceback"] = "".join(
                traceback.format_exception(failed, limit=-4)
            ).strip()
        self._phase_end = self.deadline
        return result


class DecodeCase(NamedTuple):
    """One decode problem on the device: K/V read through `loaders`, query [S, H, D]."""

    loaders: object
    k_src: object
    v_src: object
    query: object
    tables: object
    lens: object
    block_size: int
    num_kv_heads: int


def auto_launch(case: DecodeCase, *, paged: bool = True):
    """(launch, out, plan): what paged_attention's path="auto" launches on these buffers,
    its plan read back from one call of the real launcher (`attention.decode_with`)."""
    attention.decode_with(
        *case[:6],
        attention.CacheShape(
            case.k_src.shape[0], case.num_kv_heads, case.block_size, case.query.shape[2]
        ),
    )
    plan = dict(attention.LAST_PLAN)
    mode = "single" if plan["num_partitions"] == 1 else "split"
    launch, out = decode_launch(
        case, mode=mode, part=plan["partition_size"], paged=paged, path=plan["path"]
    )
    return launch, out, plan


@cuda.jit
def read_all(src, chunks, sink):
    """xor of every 16-byte chunk of `src` (flat, 16-byte aligned), one word per thread;
    four independent 16-byte loads in flight per thread per trip, as in copy_blocks."""
    vec = 16 // itemsize(src)
    acc = uint32(0)
    n = cuda.gridsize(1)
    i = cuda.grid(1)
    while i + 3 * n < chunks:
        w0 = load16(src, i * vec)
        w1 = load16(src, (i + n) * vec)
        w2 = load16(src, (i + 2 * n) * vec)
        w3 = load16(src, (i + 3 * n) * vec)
        acc ^= (w0[0] ^ w0[1] ^ w0[2] ^ w0[3]) ^ (w1[0] ^ w1[1] ^ w1[2] ^ w1[3])
        acc ^= (w2[0] ^ w2[1] ^ w2[2] ^ w2[3]) ^ (w3[0] ^ w3[1] ^ w3[2] ^ w3[3])
        i += 4 * n
    while i < chunks:
        w = load16(src, i * vec)
        acc ^= w[0] ^ w[1] ^ w[2] ^ w[3]
        i += n
    sink[cuda.grid(1)] = acc


def roofline_ms(caches: list, runs: int, timed: bool):
    """`time_ms` of the read-only kernel over all of each cache (rotated copies) once."""
    blocks, threads = (8 * attention.sm_count(), 256) if timed else (2, 16)
    sink = cuda.device_array(blocks * threads, np.uint32)
    launches = [
        partial(read_all[blocks, threads], c.reshape(c.size), c.nbytes // 16, sink) for c in caches
    ]
    return time_ms(launches, runs, timed)


def roofline_reads_every_byte_once(rng, dry: bool) -> bool:
    """On random data (a few KiB dry, else 16 MiB), the xor of the threads' words equals the
    xor of the buffer's words (a chunk skipped or read twice would change it)."""
    nbytes, blocks, threads = (1 << 12, 2, 16) if dry else (1 << 24, 8 * attention.sm_count(), 256)
    host = rng.integers(0, 2**32, (nbytes + 48) // 4, dtype=np.uint32)  # + 3 tail chunks
    sink = cuda.device_array(blocks * threads, np.uint32)
    read_all[blocks, threads](cuda.to_device(host), (nbytes + 48) // 16, sink)
    return bool(np.bitwise_xor.reduce(sink.copy_to_host()) == np.bitwise_xor.reduce(host))


class PagedKV(NamedTuple):
    """`batch` sequences on the device: K/V caches [N, 2, H_kv, B, D] (rotated copies past
    4x the L2 when timed), a scattered block table, the lengths, the K/V bytes of a pass."""

    caches: list
    table: object
    lens: object
    kv_bytes: int


def paged_kv(rng, batch: int, context: int, kv_heads: int, dim: int, dtype, timed: bool, bs=16):
    per_seq = -(-context // bs)
    num_blocks = batch * per_seq
    kv_bytes = 2 * batch * context * kv_heads * dim * np.dtype(dtype).itemsize
    caches = [
        filled(rng, (num_blocks, 2, kv_heads, bs, dim), dtype)
        for _ in range(rotation(kv_bytes) if timed else 1)
    ]
    table = cuda.to_device(rng.permutation(num_blocks).reshape(batch, per_seq).astype(np.int32))
    return PagedKV(caches, table, cuda.to_device(np.full(batch, context, np.int32)), kv_bytes)


def rotation(nbytes: int) -> int:
    """Copies of a buffer of `nbytes` to cycle through so the working set reaches 4x L2."""
    return max(1, -(-WORKING_SET // max(nbytes, 1)))


def decode_launch(
    case: DecodeCase,
    *,
    mode: str,
    part: int,
    paged: bool = True,
    longest: int | None = None,
    path: str = "cuda_core",
):
    """(launch, out): launch() runs the decode kernel of `path` (and the merge when split)
    into out [S, H, D] float32; mode "single" is one partition, "split" `part` tokens each."""
    loaders, k_src, v_src, query, tables, lens, block_size, num_kv_heads = case
    num_seqs, num_heads, dim = query.shape
    group, dtype = num_heads // num_kv_heads, np.dtype(k_src.dtype)
    kernel, threads, chunks = attention.kernel_for(
        loaders, dim, group, dtype, block_size, paged=paged, path=path
    )
    longest = longest or int(lens.copy_to_host().max())
    part = longest if mode == "single" else part
    num_parts = -(-longest // part)
    out = attention._empty((num_seqs, num_heads, dim))  # NaN-poisoned while POISON is on
    partial = (
        out.reshape(num_seqs, num_heads, 1, dim)
        if num_parts == 1
        else attention._empty((num_seqs, num_heads, num_parts, dim))
    )
    m = attention._empty((num_seqs, num_heads, num_parts))
    s = attention._empty((num_seqs, num_heads, num_parts))
    scale, sinks, window = np.float32(require_scale(None, dim)), np.int32(0), np.int32(0)
    args = (k_src, v_src, query, tables, lens, scale, sinks, window, np.int32(part), partial, m, s)

    def launch():
        kernel[(num_kv_heads * chunks, num_seqs, num_parts), threads](*args)
        if num_parts > 1:
            merge_partitions[(num_heads, num_seqs), min(threads, 128)](partial, m, s, out)

    return launch, out


def close(out, want, tol) -> bool:
    """Finite, and within tol x the largest |want| of the float64 reference everywhere."""
    out = np.asarray(out, np.float64)
    return bool(np.isfinite(out).all() and np.abs(out - want).max() <= tol * np.abs(want).max())


def time_ms(launches, runs: int, timed: bool, left=None):
    """Median over `runs` samples of the mean time of PER_SAMPLE back-to-back launches,
    cycling through `launches`, one queued before the start event; sampling stops when the
    slowest sample so far would not fit in `left()` s. None untimed or with no sample."""
    launches = launches if isinstance(launches, list) else [launches]
    if timed:  # compile and warm up; untimed (a dry run), the samples are the only launches
        for launch in launches:
            launch()
        cuda.synchronize()
    per_sample = PER_SAMPLE if timed else 1
    times, k, slowest = [], 0, 0.0
    for _ in range(runs):
        if left is not None and left() < slowest:
            break
        began = time.perf_counter()
        start, end = cuda.event(), cuda.event()
        if timed:  # queued work ahead of the start event
            launches[k % len(launches)]()
        start.record()
        for _ in range(per_sample):
            k += 1
            launches[k % len(launches)]()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / per_sample)
        slowest = max(slowest, time.perf_counter() - began)
    return statistics.median(times) if timed and times else None


@cuda.jit
def nothing(sink):
    """An empty kernel: its back-to-back launches time the host's launch cost alone."""
    if cuda.grid(1) > sink.size:  # never true: keeps the argument used
        sink[0] = 0


def launch_overhead_ms(runs: int, timed: bool):
    """Milliseconds per launch of an empty kernel (`time_ms`): the host's per-launch cost."""
    sink = cuda.device_array(32, np.uint32)
    return time_ms(lambda: nothing[1, 32](sink), runs, timed)


LAUNCH_BOUND = 3  # a row under 3x the launch overhead is marked launch_bound


def filled(rng, shape, dtype):
    """A device array of `shape` with random values (one host piece reused)."""
    dev = cuda.device_array(shape, dtype)
    per = int(np.prod(shape[1:]))
    chunk = min(shape[0], max(1, (1 << 26) // per))
    piece = rng.standard_normal((chunk,) + tuple(shape[1:])).astype(dtype)
    for b in range(0, shape[0], chunk):
        n = min(chunk, shape[0] - b)
        dev[b : b + n].copy_to_device(piece[:n])
    return dev
