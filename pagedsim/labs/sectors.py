"""The KV-cache layout registry, and how many 32-byte sectors one warp's load touches
in each layout. Pure NumPy: drawing a figure from it loads no numba.

A warp's global load is served in 32-byte sectors (and 128-byte cache lines); a load
is fully efficient when the bytes its 32 lanes ask for fill every sector it touches.
This model computes, from the index arithmetic alone, the byte addresses each lane
reads, then counts distinct sectors and lines. It predicts; the GPU script measures.

`LAYOUTS` is the one registry of cache layouts: each `KVLayout` names the layout, the
rank of its K and V arrays (from which `cuda_kernels.labs` builds the PTX signatures)
and the element index of (block n, kv head h, token t, dim d). The kernel side attaches
its address functions by the same names (`cuda_kernels.labs.layouts.LOADERS`, checked
to cover exactly these names); a new layout is one entry here and one loader pair there.

    fused   kv_cache[N, 2, H, B, D]           K at [:, 0], V at [:, 1] (the chapter's)
    split   k_pool[N, H, B, D], v_pool[N, H, B, D]  (vLLM paper footnote; two allocations)
    nhd     k_pool[N, B, H, D], v_pool[N, B, H, D]  (token-major, FlashInfer's NHD)
    vllm    key[N, H, D/x, B, x], value[N, H, D, B]  (vLLM v0 csrc; x = 16 B / element size)

Thread mappings (which (token, dim) lane l reads in one load instruction):

    kernel  the factory kernel's tile loop (`cuda_kernels.decode`): flat index i = l over
            (token, d), so the lanes read dims 0..31 of one token, one element each;
    vec16   vLLM's key loop: lane l reads a 16-byte vector, x elements, of token l % B,
            chunk l // B (B lanes per chunk, so a warp covers 32 // B chunks of B tokens);
            for vLLM's value layout the 16-byte vectors run along tokens instead.

References: CUDA C++ Best Practices Guide, "Coalesced Access to Global Memory"
(32-byte segments, misaligned access); vLLM csrc/attention/attention_kernels.cuh
(`x = 16 / sizeof(cache_t)`); FlashInfer docs, "KV-Cache Layout" (NHD / HND).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

SECTOR = 32  # bytes
LINE = 128  # bytes
WARP = 32
MAPPINGS = ("kernel", "vec16")


@dataclass(frozen=True)
class Geometry:
    num_blocks: int = 64  # N
    num_kv_heads: int = 8  # H
    block_size: int = 16  # B
    head_dim: int = 128  # D
    elem_bytes: int = 2  # float16

    @property
    def x(self) -> int:
        return 16 // self.elem_bytes  # elements per 16-byte vector


@dataclass(frozen=True)
class KVLayout:
    """One cache layout: its arrays' ranks and element index (in elements, from the array start)."""
    name: str
    shape: str  # the arrays, as the docstring table writes them
    k_ndim: int
    v_ndim: int
    same_array: bool  # K and V live in one array (then k_src is v_src)
    index: Callable  # (which, N, H, B, D, x, n, h, t, d) -> element index


def _fused(which, N, H, B, D, x, n, h, t, d):
    return (((n * 2 + (which == "v")) * H + h) * B + t) * D + d


def _split(which, N, H, B, D, x, n, h, t, d):
    return ((n * H + h) * B + t) * D + d


def _nhd(which, N, H, B, D, x, n, h, t, d):
    return ((n * B + t) * H + h) * D + d


def _vllm(which, N, H, B, D, x, n, h, t, d):
    if which == "k":
        return (((n * H + h) * (D // x) + d // x) * B + t) * x + d % x
    return ((n * H + h) * D + d) * B + t


LAYOUTS = {spec.name: spec for spec in (
    KVLayout("fused", "kv_cache[N, 2, H, B, D]", 5, 5, True, _fused),
    KVLayout("split", "k_pool[N, H, B, D], v_pool[N, H, B, D]", 4, 4, False, _split),
    KVLayout("nhd", "k_pool[N, B, H, D], v_pool[N, B, H, D]", 4, 4, False, _nhd),
    KVLayout("vllm", "key[N, H, D/x, B, x], value[N, H, D, B]", 5, 4, False, _vllm),
)}


def layout(name: str) -> KVLayout:
    """The registry entry for `name`; ValueError naming the known layouts otherwise."""
    if not isinstance(name, str) or name not in LAYOUTS:
        raise ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {name!r}")
    return LAYOUTS[name]


def element_offset(layout_name: str, which: str, g: Geometry, n, h, t, d):
    """Byte offset of element (n, h, t, d) of K (which="k") or V (which="v") from its array start."""
    spec = layout(layout_name)
    n, h, t, d = (np.asarray(a, dtype=np.int64) for a in (n, h, t, d))
    idx = spec.index(which, g.num_blocks, g.num_kv_heads, g.block_size, g.head_dim, g.x, n, h, t, d)
    return idx * g.elem_bytes


def lane_elements(mapping: str, g: Geometry, token0: int = 0):
    """(t, d, nbytes) per lane: the first element and the width each of the 32 lanes loads."""
    lanes = np.arange(WARP)
    if mapping == "kernel":
        i = token0 * g.head_dim + lanes
        return i // g.head_dim, i % g.head_dim, g.elem_bytes
    if mapping == "vec16":
        return token0 + lanes % g.block_size, (lanes // g.block_size) * g.x, 16
    raise ValueError(f"mapping must be one of {MAPPINGS}, got {mapping!r}")


@dataclass(frozen=True)
class WarpLoad:
    layout: str
    mapping: str
    which: str
    addresses: np.ndarray  # [32] first byte of each lane's load, from the block's array start
    nbytes: int  # bytes per lane
    sectors: int  # distinct 32-byte sectors touched
    lines: int  # distinct 128-byte lines touched

    @property
    def requested(self) -> int:
        return WARP * self.nbytes

    @property
    def efficiency(self) -> float:
        """Requested bytes / fetched bytes (1.0 = every fetched sector byte is used)."""
        return self.requested / (self.sectors * SECTOR)


def touched(addresses: np.ndarray, nbytes: int, unit: int) -> int:
    """Distinct `unit`-byte pieces covered by [a, a + nbytes) for every a."""
    first = addresses // unit
    last = (addresses + nbytes - 1) // unit
    return len(set(np.concatenate([np.arange(f, l + 1) for f, l in zip(first, last)]).tolist()))


def warp_load(layout: str, mapping: str, which: str = "k", g: Geometry = Geometry(),
              block: int = 3, head: int = 1, offset_bytes: int = 0) -> WarpLoad:
    """One warp's first load of K or V for (block, head); offset_bytes shifts the pool start."""
    if which not in ("k", "v"):
        raise ValueError(f"which must be 'k' or 'v', got {which!r}")
    if g.head_dim % g.x or WARP % g.block_size and mapping == "vec16":
        raise ValueError(f"head_dim must be a multiple of x={g.x}, block_size must divide 32 for vec16")
    t, d, nbytes = lane_elements(mapping, g)
    if layout == "vllm" and which == "v" and mapping == "vec16":
        # the value layout [.., D, B] packs 16-byte vectors along tokens: lane l reads
        # x tokens starting at (l % (B/x)) * x of dim l // (B/x), as vLLM's value loop does
        if g.block_size % g.x:
            raise ValueError(f"vec16 on the vllm value layout needs block_size % {g.x} == 0")
        per_d = g.block_size // g.x
        lanes = np.arange(WARP)
        t, d = (lanes % per_d) * g.x, lanes // per_d
    addr = element_offset(layout, which, g, block, head, t, d) + offset_bytes
    return WarpLoad(layout, mapping, which, addr, nbytes,
                    touched(addr, nbytes, SECTOR), touched(addr, nbytes, LINE))


def misaligned_run(run_bytes: int, offset_bytes: int) -> tuple[int, int]:
    """(sectors, lines) for one contiguous run of run_bytes starting offset_bytes past a 128-B boundary."""
    a = np.array([offset_bytes])
    return touched(a, run_bytes, SECTOR), touched(a, run_bytes, LINE)


def alignment_table(offsets=(0, 4, 16, 64, 128), g: Geometry = Geometry()) -> list[dict]:
    """Predicted cost of a block start `offset` bytes past a 128-byte boundary.

    warp: the kernel mapping's first K load (32 lanes x elem_bytes contiguous bytes);
    tile: one (block, head) K tile read in full, B * D * elem_bytes contiguous bytes, the
    DRAM traffic when neighbouring warps share the straddled sectors through L1/L2.
    """
    rows = []
    warp_bytes, tile_bytes = WARP * g.elem_bytes, g.block_size * g.head_dim * g.elem_bytes
    ws0, wl0 = misaligned_run(warp_bytes, 0)
    ts0, _ = misaligned_run(tile_bytes, 0)
    for o in offsets:
        ws, wl = misaligned_run(warp_bytes, o)
        ts, _ = misaligned_run(tile_bytes, o)
        rows.append({"offset": o, "elem_bytes": g.elem_bytes, "warp_bytes": warp_bytes,
                     "warp_sectors": ws, "warp_lines": wl, "warp_extra": ws / ws0 - 1,
                     "tile_bytes": tile_bytes, "tile_sectors": ts, "tile_extra": ts / ts0 - 1})
    return rows


def layout_table(g: Geometry = Geometry()) -> list[dict]:
    """Every layout x mapping x (K, V): sectors, lines and efficiency of one warp load."""
    rows = []
    for layout in LAYOUTS:
        for mapping in MAPPINGS:
            for which in ("k", "v"):
                w = warp_load(layout, mapping, which, g)
                rows.append({"layout": layout, "mapping": mapping, "which": which,
                             "requested": w.requested, "sectors": w.sectors, "lines": w.lines,
                             "efficiency": round(w.efficiency, 3)})
    return rows


def kv_distance(layout: str, g: Geometry = Geometry(), block: int = 3, head: int = 1) -> int:
    """Bytes between the first K and the first V element of one (block, head).

    Split and vllm pools are separate allocations; their distance is taken as if the V pool
    followed the K pool directly (the smallest it can be)."""
    k = int(element_offset(layout, "k", g, block, head, 0, 0))
    v = int(element_offset(layout, "v", g, block, head, 0, 0))
    pool = g.num_blocks * g.num_kv_heads * g.block_size * g.head_dim * g.elem_bytes
    return v - k + (0 if LAYOUTS[layout].same_array else pool)


def format_table(rows: list[dict]) -> str:
    keys = list(rows[0])
    width = {k: max(len(k), *(len(f"{r[k]}") for r in rows)) for k in keys}
    lines = ["  ".join(k.rjust(width[k]) for k in keys)]
    lines += ["  ".join(f"{r[k]}".rjust(width[k]) for k in keys) for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_table(layout_table()))
    print()
    print(format_table(alignment_table()))
