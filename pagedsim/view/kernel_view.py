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

A sliding window's layers read only their window (`attention.attended_ranges`: the last
`window` positions), so they get their own launch and plan. On a hybrid page ("A:full" and
"A:window", vLLM v1's two KV cache groups) a step has two launches, each over one length per
sequence: the full-attention layers' (every token) and the sliding-window layers' (the
window's). The panel's words are in the page's language: kernel_view.toml holds the Chinese.
"""

from __future__ import annotations

from typing import NamedTuple

from ..io import tables
from ..text.lang import t

ZH: dict[str, str] = tables.beside(__file__)["zh"]  # kernel_view.toml: English -> Chinese


def words(lang: str) -> dict[str, str]:
    """The panel's templates in `lang` for viewer.js, keyed by their English (English: none,
    the page uses the key itself)."""
    return dict(ZH) if lang == "zh" else {}


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


def cta_slots(lang: str = "en") -> tuple[int, str]:
    """(CTA slots, where they come from, in `lang`): SMs x the resident CTAs per SM that
    `cuda_kernels.attention` assumes off a GPU. cuda_kernels' notice that kernels would run
    on the simulator is not printed here: a page runs no kernel."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        from cuda_kernels import _backend
        from cuda_kernels.attention import SIMULATED_CTAS_PER_SM, sm_count

        sms = sm_count()
    if _backend.backend() == "gpu":
        where = "this GPU's {sms} SMs x {per} CTAs"
    else:
        where = "the simulator's assumed {sms} SMs x {per} CTAs"
    return sms * SIMULATED_CTAS_PER_SM, t(where, lang, ZH, sms=sms, per=SIMULATED_CTAS_PER_SM)


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


def attended(seq, window: int | None, block_size: int) -> int:
    """Tokens a sliding-window layer's decode step reads of `seq` (a SeqState), its query the
    last token: the last `window` (`attention.attended_ranges`, no sinks) that its table still
    holds. The simulator frees a block once the *next* query no longer reads it, so the
    window's oldest token may be gone already (then `window` - 1 are read); with the window
    unknown (a trace that did not record it), all that the kept blocks hold."""
    n = seq.num_tokens
    lead = next((j for j, b in enumerate(seq.blocks) if b >= 0), len(seq.blocks))
    start = max(n - min(window, n) if window else 0, min(n, lead * block_size))
    return n - start


def kernel_story(
    snaps,
    shape: KernelShape | None = None,
    names=str,
    *,
    lang: str = "en",
    window: int | None = None,
    hybrid: bool = False,
) -> dict | None:
    """{"part": [partition size per step of the full-attention launch, 0 with none],
    "part_window": [the same for the sliding-window launch] (with a `window` or `hybrid`),
    "window" (0: not recorded), "slots", "gpu" (where the slots come from, in `lang`), "ctas"
    (per sequence and partition), "path", "shape", "assumed" (SMALL_DECODE, not the model's),
    "bytes_per_token", "max_tokens": {name: its longest length in the trace}}, or None when
    no step holds a sequence. shape: the model's (None: SMALL_DECODE, "assumed"); `names`: a
    sequence id -> the name the page shows; window: the sliding window's tokens; hybrid: the
    names are "A:full" / "A:window", one sequence's two KV cache groups (without it and with
    a window, every sequence slides)."""
    assumed = shape is None
    shape = SMALL_DECODE if shape is None else shape
    slots, gpu = cta_slots(lang)
    from cuda_kernels.attention import choose_partition

    ctas, path = launch_plan(shape)
    sliding = bool(window) or hybrid
    parts: list[int] = []
    parts_window: list[int] = []
    longest: dict = {}
    plans: dict = {}  # the plan depends on the lengths only, not on which sequence has which

    def plan(counts: list) -> int:
        key = tuple(sorted(counts))
        if key and key not in plans:
            plans[key] = choose_partition(key, ctas, slots)
        return plans[key] if key else 0

    for snap in snaps:
        full, window_reads = [], []  # one length per sequence in each launch
        for s in snap.sequences:
            name = names(s.seq_id)
            longest[name] = max(longest.get(name, 0), s.num_tokens)
            if sliding and (not hybrid or str(name).endswith(":window")):
                window_reads.append(attended(s, window, snap.block_size))
            else:
                full.append(s.num_tokens)
        parts.append(plan(full))
        parts_window.append(plan(window_reads))
    if not longest:
        return None
    out = {
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
    if sliding:
        out.update(part_window=parts_window, window=window or 0)
    return out
