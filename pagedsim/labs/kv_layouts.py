"""The KV-cache layout registry: where element (block n, kv head h, token t, dim d) lives.

Pure NumPy, so the sector model (`sectors.py`) loads no numba; the kernels
(`cuda_kernels.labs.layouts`) attach their device loaders to the same names. A layout is
the axis order of its K and V arrays, outermost first; shapes, the row-major element
index, `convert` (from the chapter's fused cache) and the launcher's shape rules (`dims`)
all derive from it.

    fused   kv_cache[N, 2, H, B, D]                 K at [:, 0], V at [:, 1] (the chapter's)
    split   k_pool[N, H, B, D], v_pool[N, H, B, D]  (vLLM paper footnote; two allocations)
    nhd     k_pool[N, B, H, D], v_pool[N, B, H, D]  (token-major, FlashInfer's NHD)
    vllm    key[N, H, D/x, B, x], value[N, H, D, B] (vLLM v0 csrc; x = 16 B / element size)

Axes: N block, KV (K and V in one array), H kv head, B token in the block, D dim, D/x and
x the dim split into 16-byte vectors. To add a layout: a `KVLayout` in `LAYOUTS` (or
`register` at run time) and its `Loaders` in `cuda_kernels.labs.layouts.LOADERS`; the
sector model, the tests, the figure and the PTX report iterate this registry.

References: vLLM csrc/attention/attention_kernels.cuh (key cache [.., D/x, B, x],
`x = 16 / sizeof(cache_t)`); FlashInfer docs, "KV-Cache Layout" (NHD / HND).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

AXES = ("N", "KV", "H", "B", "D", "D/x", "x")
Coord = int | npt.NDArray[np.int64]  # one index, or one per lane
FUSED_AXES = ("N", "KV", "H", "B", "D")  # the chapter's block, the kernels' BLOCK_MAJOR


def vec_width(dtype: npt.DTypeLike) -> int:
    """x: elements per 16-byte vector (4 for float32, 8 for float16)."""
    return 16 // np.dtype(dtype).itemsize


@dataclass(frozen=True)
class KVLayout:
    """One cache layout: the axis order of its K and V arrays (see the module docstring)."""

    name: str
    k_axes: tuple[str, ...]  # K's axes, outermost first
    v_axes: tuple[str, ...]  # V's axes
    shape: str  # the arrays as the docstring table writes them
    # "k"/"v": the arrays whose 16-byte vectors run along tokens
    vec16_along_tokens: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for which, axes in (("k_axes", self.k_axes), ("v_axes", self.v_axes)):
            named = set(axes) - {"KV"}
            dims = {"N", "H", "B"} <= named and ({"D"} <= named or {"D/x", "x"} <= named)
            if not set(axes) <= set(AXES) or len(set(axes)) != len(axes) or not dims:
                raise ValueError(
                    f"{self.name}: {which} must name N, H, B and D (or D/x and x) "
                    f"once each from {AXES}, got {axes}"
                )
        if self.same_array and (self.k_axes != FUSED_AXES or self.v_axes != FUSED_AXES):
            raise ValueError(f"{self.name}: one array for K and V must be {FUSED_AXES}")

    @property
    def same_array(self) -> bool:
        """K and V live in one array (then k_src is v_src)."""
        return "KV" in self.k_axes

    def axes(self, which: str) -> tuple[str, ...]:
        if which not in ("k", "v"):
            raise ValueError(f"which must be 'k' or 'v', got {which!r}")
        return self.k_axes if which == "k" else self.v_axes

    def array_shape(self, which: str, n: int, h: int, b: int, d: int, x: int) -> tuple[int, ...]:
        """The K or V array's shape for N=n blocks, H=h heads, B=b tokens, D=d dims."""
        size = {"N": n, "KV": 2, "H": h, "B": b, "D": d, "D/x": d // x, "x": x}
        return tuple(size[a] for a in self.axes(which))

    def index(
        self, which: str, shape: tuple[int, ...], n: Coord, h: Coord, t: Coord, d: Coord
    ) -> Coord:
        """Row-major element index of (n, h, t, d) of K or V in an array of `shape`."""
        axes = self.axes(which)
        x = shape[axes.index("x")] if "x" in axes else 1
        where: dict[str, Coord] = {
            "N": n,
            "KV": int(which == "v"),
            "H": h,
            "B": t,
            "D": d,
            "D/x": d // x,
            "x": d % x,
        }
        idx: Coord = 0
        for axis, size in zip(axes, shape, strict=True):
            idx = idx * size + where[axis]
        return idx

    def dims(self, k_shape: tuple[int, ...], x: int) -> tuple[int, int, int, int]:
        """(num_blocks, num_kv_heads, block_size, head_dim) read off K's shape (checked)."""
        if len(k_shape) != len(self.k_axes):
            raise ValueError(
                f"k_src must have {len(self.k_axes)} dimensions {self.k_axes}, "
                f"got shape {tuple(k_shape)}"
            )
        size = dict(zip(self.k_axes, k_shape, strict=True))
        if "x" in size and size["x"] != x:
            raise ValueError(f"k_src axis x must be x={x} (16 bytes per vector), got {size['x']}")
        d = size["D"] if "D" in size else size["D/x"] * size["x"]
        return size["N"], size["H"], size["B"], d

    def convert(self, kv_cache: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(k_src, v_src) in this layout, holding the same numbers as the fused kv_cache
        [N, 2, H, B, D] (C-contiguous copies; the fused layout returns the cache itself)."""
        c = np.asarray(kv_cache)
        if c.ndim != 5 or c.shape[1] != 2:
            raise ValueError(f"kv_cache must be [N, 2, H, B, D], got shape {c.shape}")
        if self.same_array:
            return c, c
        x = vec_width(c.dtype)
        if c.shape[4] % x and "x" in self.k_axes + self.v_axes:
            raise ValueError(
                f"{self.name} layout needs head_dim divisible by x={x}, got {c.shape[4]}"
            )
        return self._from(c[:, 0], self.k_axes, x), self._from(c[:, 1], self.v_axes, x)

    @staticmethod
    def _from(part: np.ndarray, axes: tuple[str, ...], x: int) -> np.ndarray:
        """`part` [N, H, B, D] with its axes reordered (and D split into D/x, x) as `axes`."""
        names = ["N", "H", "B", "D"]
        if "x" in axes:
            n, h, b, d = part.shape
            part, names = part.reshape(n, h, b, d // x, x), ["N", "H", "B", "D/x", "x"]
        return np.ascontiguousarray(part.transpose([names.index(a) for a in axes]))


LAYOUTS: dict[str, KVLayout] = {
    spec.name: spec
    for spec in (
        KVLayout("fused", FUSED_AXES, FUSED_AXES, "kv_cache[N, 2, H, B, D]"),
        KVLayout("split", tuple("NHBD"), tuple("NHBD"), "k_pool[N, H, B, D], v_pool[N, H, B, D]"),
        KVLayout("nhd", tuple("NBHD"), tuple("NBHD"), "k_pool[N, B, H, D], v_pool[N, B, H, D]"),
        KVLayout(
            "vllm",
            ("N", "H", "D/x", "B", "x"),
            ("N", "H", "D", "B"),
            "key[N, H, D/x, B, x], value[N, H, D, B]",
            vec16_along_tokens=("v",),
        ),
    )
}


def layout(name: str) -> KVLayout:
    """The registry entry for `name`; ValueError naming the known layouts otherwise."""
    if not isinstance(name, str) or name not in LAYOUTS:
        raise ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {name!r}")
    return LAYOUTS[name]


def register(spec: KVLayout) -> KVLayout:
    """Add a layout at run time (a lab's own, or a test's); ValueError if the name is taken."""
    if not isinstance(spec, KVLayout):
        raise TypeError(f"spec must be a KVLayout, got {type(spec).__name__}")
    if spec.name in LAYOUTS:
        raise ValueError(f"layout {spec.name!r} is already registered")
    LAYOUTS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove a layout added with `register`."""
    layout(name)
    del LAYOUTS[name]
