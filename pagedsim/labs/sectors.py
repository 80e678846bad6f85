"""How many 32-byte sectors one warp's load touches in each KV-cache layout (pure NumPy).

A warp's load is served in 32-byte sectors (and 128-byte lines). From the index arithmetic
alone (`kv_layouts.LAYOUTS`) this computes the byte each lane reads and counts distinct
sectors and lines: it predicts, the GPU script measures. Thread mappings:

    kernel  the factory kernel's tile loop (`cuda_kernels.fast.decode`): lanes read dims
            0..31 of one token, one element each;
    vec16   vLLM's key loop: lane l reads 16 bytes (x elements) of token l % B, chunk
            l // B; for vLLM's value layout the vectors run along tokens instead.

References: CUDA C++ Best Practices Guide, "Coalesced Access to Global Memory"; vLLM
csrc/attention/attention_kernels.cuh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import numpy.typing as npt

from . import kv_layouts as _kv
from .kv_layouts import LAYOUTS as LAYOUTS  # the figures iterate it from here
from .kv_layouts import Coord, layout
from .waste import text_table

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


def element_offset(
    layout_name: str, which: str, g: Geometry, n: Coord, h: Coord, t: Coord, d: Coord
) -> npt.NDArray[np.int64]:
    """Byte offset of element (n, h, t, d) of K or V (`which`) from its array start."""
    spec = layout(layout_name)
    n, h, t, d = (np.asarray(a, dtype=np.int64) for a in (n, h, t, d))
    shape = spec.array_shape(which, g.num_blocks, g.num_kv_heads, g.block_size, g.head_dim, g.x)
    idx = spec.index(which, shape, n, h, t, d)
    return np.asarray(idx, dtype=np.int64) * g.elem_bytes


def lane_elements(
    mapping: str, g: Geometry, token0: int = 0
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
    """(t, d, nbytes) per lane: the first element and the width each of the 32 lanes loads."""
    lanes = np.arange(WARP, dtype=np.int64)
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
    pieces = [np.arange(a, b + 1) for a, b in zip(first, last, strict=True)]
    return len(set(np.concatenate(pieces).tolist()))


def warp_load(
    layout: str,
    mapping: str,
    which: str = "k",
    g: Geometry = Geometry(),
    block: int = 3,
    head: int = 1,
    offset_bytes: int = 0,
) -> WarpLoad:
    """One warp's first load of K or V for (block, head); offset_bytes shifts the pool start."""
    if which not in ("k", "v"):
        raise ValueError(f"which must be 'k' or 'v', got {which!r}")
    if g.head_dim % g.x or WARP % g.block_size and mapping == "vec16":
        raise ValueError(
            f"head_dim must be a multiple of x={g.x}, block_size must divide 32 for vec16"
        )
    t, d, nbytes = lane_elements(mapping, g)
    if which in _kv.layout(layout).vec16_along_tokens and mapping == "vec16":
        # a layout whose vectors run along tokens (vLLM's value [.., D, B]): lane l reads
        # x tokens starting at (l % (B/x)) * x of dim l // (B/x), as vLLM's value loop does
        if g.block_size % g.x:
            raise ValueError(f"vec16 on the {layout} {which} layout needs block_size % {g.x} == 0")
        per_d = g.block_size // g.x
        lanes = np.arange(WARP)
        t, d = (lanes % per_d) * g.x, lanes // per_d
    addr = element_offset(layout, which, g, block, head, t, d) + offset_bytes
    sectors, lines = touched(addr, nbytes, SECTOR), touched(addr, nbytes, LINE)
    return WarpLoad(layout, mapping, which, addr, nbytes, sectors, lines)


class AlignmentRow(TypedDict):
    """One row of `alignment_table`."""

    offset: int
    elem_bytes: int
    warp_bytes: int
    warp_sectors: int
    warp_lines: int
    warp_extra: float
    tile_bytes: int
    tile_sectors: int
    tile_extra: float


class LayoutRow(TypedDict):
    """One row of `layout_table`."""

    layout: str
    mapping: str
    which: str
    requested: int
    sectors: int
    lines: int
    efficiency: float


def misaligned_run(run_bytes: int, offset_bytes: int) -> tuple[int, int]:
    """(sectors, lines) of run_bytes starting offset_bytes past a 128-byte boundary."""
    a = np.array([offset_bytes])
    return touched(a, run_bytes, SECTOR), touched(a, run_bytes, LINE)


def alignment_table(
    offsets: Sequence[int] = (0, 4, 16, 64, 128), g: Geometry = Geometry()
) -> list[AlignmentRow]:
    """Predicted cost of a block start `offset` bytes past a 128-byte boundary.

    warp: the kernel mapping's first K load (32 lanes x elem_bytes contiguous bytes);
    tile: one (block, head) K tile read in full, B * D * elem_bytes contiguous bytes, the
    DRAM traffic when neighbouring warps share the straddled sectors through L1/L2.
    """
    rows: list[AlignmentRow] = []
    warp_bytes, tile_bytes = WARP * g.elem_bytes, g.block_size * g.head_dim * g.elem_bytes
    ws0, wl0 = misaligned_run(warp_bytes, 0)
    ts0, _ = misaligned_run(tile_bytes, 0)
    for o in offsets:
        ws, wl = misaligned_run(warp_bytes, o)
        ts, _ = misaligned_run(tile_bytes, o)
        rows.append(
            {
                "offset": o,
                "elem_bytes": g.elem_bytes,
                "warp_bytes": warp_bytes,
                "warp_sectors": ws,
                "warp_lines": wl,
                "warp_extra": ws / ws0 - 1,
                "tile_bytes": tile_bytes,
                "tile_sectors": ts,
                "tile_extra": ts / ts0 - 1,
            }
        )
    return rows


def layout_table(g: Geometry = Geometry()) -> list[LayoutRow]:
    """Every layout x mapping x (K, V): sectors, lines and efficiency of one warp load."""
    rows: list[LayoutRow] = []
    for name in LAYOUTS:
        for mapping in MAPPINGS:
            for which in ("k", "v"):
                w = warp_load(name, mapping, which, g)
                rows.append(
                    {
                        "layout": name,
                        "mapping": mapping,
                        "which": which,
                        "requested": w.requested,
                        "sectors": w.sectors,
                        "lines": w.lines,
                        "efficiency": round(w.efficiency, 3),
                    }
                )
    return rows


def kv_distance(layout: str, g: Geometry = Geometry(), block: int = 3, head: int = 1) -> int:
    """Bytes between the first K and the first V element of one (block, head).

    Split and vllm pools are separate allocations; their distance is taken as if the V pool
    followed the K pool directly (the smallest it can be)."""
    k = int(element_offset(layout, "k", g, block, head, 0, 0))
    v = int(element_offset(layout, "v", g, block, head, 0, 0))
    pool = g.num_blocks * g.num_kv_heads * g.block_size * g.head_dim * g.elem_bytes
    return v - k + (0 if LAYOUTS[layout].same_array else pool)


def format_table(rows: Sequence[Mapping[str, object]]) -> str:
    keys = list(rows[0])
    return text_table([keys, *([f"{r[k]}" for k in keys] for r in rows)])


if __name__ == "__main__":
    print(format_table(layout_table()))
    print()
    print(format_table(alignment_table()))
