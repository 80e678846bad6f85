"""The kernel's view of a page: how paged attention would read each step's blocks.

For every step, the split-K partition size that `cuda_kernels.attention.choose_partition`
picks for the live sequences' lengths (one CTA per partition per KV head and head chunk,
over the SMs x resident CTAs `cuda_kernels.attention` assumes: `sm_count()` x
`SIMULATED_CTAS_PER_SM` off a GPU), and, for the whole trace, each sequence's longest
length: what a contiguous allocator (before paging) would reserve for it. The page draws,
for a chosen sequence, the query -> its block table -> the physical blocks in the order
the kernel walks them, which partition (CTA) reads which token range, the bytes a block
holds and where the last partial block stops, and beside it the contiguous layout's
waste. Every page of a trace gets it (`view.page_data`) unless its story says
`"kernel": False` (`pagedsim view --no-kernel`); a page whose trace never holds a
sequence (a vLLM KV event stream) has none. Called at page-build time only: the simulator
core never imports cuda_kernels (nor numba).
"""

from __future__ import annotations

from typing import NamedTuple


class KernelShape(NamedTuple):
    """The attention shape the page's numbers are for: one layer's decode. SMALL_DECODE (a
    small model, float16 K/V) unless the page knows its model's (`generate`: the served
    model's, float32 K/V as the engine keeps them)."""

    kv_heads: int = 1
    head_dim: int = 64
    dtype_bytes: int = 2  # float16 K and V
    heads: int = 1  # query heads (GQA group = heads / kv_heads)
    layers: int = 1  # the model's layers: each reads its own cache, the same blocks


SMALL_DECODE = KernelShape()


def shape_of(config, dtype_bytes: int = 4) -> KernelShape:
    """The shape of a served model (`engine.model.config`), its cache `dtype_bytes` wide."""
    return KernelShape(
        int(config.kv_heads), int(config.head_dim), dtype_bytes, int(config.heads), config.layers
    )


def checked_shape(raw) -> KernelShape:
    """A shape saved in a trace (view.story.shape: the five numbers), or ValueError."""
    if (
        not isinstance(raw, list)
        or len(raw) != len(KernelShape._fields)
        or not all(
            isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 1 << 16 for x in raw
        )
        or raw[2] not in (2, 4)
        or raw[3] % raw[0]
    ):
        raise ValueError(
            "view.story.shape must be [kv_heads, head_dim, dtype_bytes (2 or 4), heads (a "
            "multiple of kv_heads), layers], whole numbers in 1..65536"
        )
    return KernelShape(*raw)


def cta_slots() -> tuple[int, str]:
    """(CTA slots, where they come from): SMs x the resident CTAs per SM that
    `cuda_kernels.attention` assumes off a GPU. cuda_kernels' notice that kernels would run
    on the simulator is not printed here: a page runs no kernel."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        from cuda_kernels import _backend
        from cuda_kernels.attention import SIMULATED_CTAS_PER_SM, sm_count

        sms = sm_count()
    where = "this GPU's" if _backend.backend() == "gpu" else "the simulator's assumed"
    return sms * SIMULATED_CTAS_PER_SM, f"{where} {sms} SMs x {SIMULATED_CTAS_PER_SM} CTAs"


def launch_plan(shape: KernelShape) -> tuple[int, str]:
    """(CTAs per sequence per partition, path) of cuda_kernels' decode launch for `shape`:
    KV heads x head chunks, the chunks of the path `choose_path("auto", ...)` takes (as
    `attention.kernel_for` counts them), for the chapter's aligned block-major cache."""
    import numpy as np

    from cuda_kernels.attention import choose_path, launch_warps
    from cuda_kernels.fast.decode_geometry import geometry
    from cuda_kernels.fast.decode_tc import tc_geometry
    from cuda_kernels.layout import BLOCK_MAJOR

    dtype = np.float16 if shape.dtype_bytes == 2 else np.float32
    group = shape.heads // shape.kv_heads
    path = choose_path("auto", BLOCK_MAJOR, dtype, shape.head_dim, group)
    if path == "tensor":
        chunks = tc_geometry(shape.head_dim, group)["chunks"]
    else:
        chunks = geometry(shape.head_dim, group, dtype, launch_warps())["chunks"]
    return shape.kv_heads * chunks, path


def kernel_story(snaps, shape: KernelShape | None = None, names=str) -> dict | None:
    """{"part": [partition size per step, 0 with no live sequence], "slots", "gpu" (where
    the slots come from), "ctas" (per
    sequence and partition), "path", "shape", "assumed" (SMALL_DECODE, not the model's),
    "bytes_per_token", "max_tokens": {name: its longest length in the trace}}, or None when
    no step holds a sequence. shape: the model's (None: SMALL_DECODE, "assumed"); `names`:
    a sequence id -> the name the page shows."""
    assumed = shape is None
    shape = SMALL_DECODE if shape is None else shape
    slots, gpu = cta_slots()
    from cuda_kernels.attention import choose_partition

    ctas, path = launch_plan(shape)
    parts = []
    longest: dict = {}
    plans: dict = {}  # the plan depends on the lengths only, not on which sequence has which
    for snap in snaps:
        counts = tuple(sorted(s.num_tokens for s in snap.sequences))
        for s in snap.sequences:
            name = names(s.seq_id)
            longest[name] = max(longest.get(name, 0), s.num_tokens)
        if counts and counts not in plans:
            plans[counts] = choose_partition(counts, ctas, slots)
        parts.append(plans[counts] if counts else 0)
    if not longest:
        return None
    return {
        "part": parts,
        "slots": slots,
        "gpu": gpu,
        "ctas": ctas,
        "path": path,
        "shape": list(shape),
        "assumed": assumed,
        "bytes_per_token": 2 * shape.kv_heads * shape.head_dim * shape.dtype_bytes,
        "max_tokens": longest,
    }
