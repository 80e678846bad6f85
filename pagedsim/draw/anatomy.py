"""Figures 3.2 (what one KV block holds, and its size) and 3.7 (128-byte alignment).

3.2 draws one block for every layer, K and V side by side, each a grid of KV heads x tokens
whose cells are head_dim vectors, to scale (the GQA model's block is visibly 4x smaller);
the bytes come from `pagedsim.sizing`, never typed in. 3.7 lays blocks on an address line
packed and with each start rounded up to 128 bytes (`sizing.align_up`, `fit_blocks`).
Reference: vLLM `vllm/worker/cache_engine.py` (KV cache shape and size per block).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from matplotlib.patches import Rectangle

from .. import palette
from ..sizing import ALIGNMENT, ModelSpec, align_up, fit_blocks, preset
from . import style

BLOCK_SIZE = 16  # the chapter's block size
K_COLOUR, V_COLOUR = palette.SEQ_COLOURS[0], palette.SEQ_COLOURS[3]
CELL_W = 0.28  # 3.2: the width of one token column
ANATOMY_SIZE, ALIGNMENT_SIZE = (12, 6.2), (12, 5.4)  # inches


def formula(spec: ModelSpec, block_size: int = BLOCK_SIZE) -> str:
    """'16 x 32 x 2 x 32 x 128 x 2 = 8,388,608 B (8 MiB)', checked against sizing."""
    factors = (block_size, spec.num_layers, 2, spec.num_kv_heads, spec.head_dim, spec.dtype_bytes)
    total = math.prod(factors)
    assert total == spec.bytes_per_block(block_size), "formula drifted from sizing.bytes_per_block"
    return " \u00d7 ".join(map(str, factors)) + f" = {total:,} B ({total / 2**20:g} MiB)"


def _block(ax, x, y, spec: ModelSpec, label: str, rh: float = 0.11, slide: bool = False):
    """One whole-model block at (x, y): layers stacked behind, K|V grids in front."""
    w, h = BLOCK_SIZE * CELL_W, spec.num_kv_heads * rh
    for i in (3, 2, 1):  # shadows for the other layers
        for dx, colour in ((0, K_COLOUR), (w + 0.5, V_COLOUR)):
            shadow: dict[str, Any] = dict(facecolor=colour, alpha=0.25, edgecolor="#999999", lw=0.5)
            ax.add_patch(Rectangle((x + dx + 0.18 * i, y + 0.18 * i), w, h, **shadow))
    layers = f"\u00d7 {spec.num_layers} layers\n(one K|V pair each)"
    # on a slide: clear of the two-line label above
    ly = y + (0.0 if slide else 0.6)
    ax.text(x + 2 * w + 0.5 + 0.6, ly, layers, fontsize=9, color="#444444", va="bottom")
    for dx, colour, name in ((0, K_COLOUR, "K"), (w + 0.5, V_COLOUR, "V")):
        _grid(ax, (x + dx, y), spec.num_kv_heads, rh, colour)
        sep = "\n" if slide else " "
        title = f"{name}: {spec.num_kv_heads} heads{sep}\u00d7 {BLOCK_SIZE} tokens"
        ax.text(x + dx + w / 2, y - 0.15, title, ha="center", va="top", fontsize=9, weight="bold")
    heads = f"{spec.num_kv_heads}\nKV\nheads"
    ax.text(x - 0.15, y + h / 2, heads, ha="right", va="center", fontsize=8.5)
    ax.text(x, y + h + 0.7, label, fontsize=10.5, fontweight="bold", va="bottom")
    # one cell picked out: the unit the caption talks about
    pick: dict[str, Any] = dict(
        facecolor="none", edgecolor=palette.ACCENT, lw=2.0, gid="one-cell", zorder=5
    )
    ax.add_patch(Rectangle((x, y + h - rh), CELL_W, rh, **pick))
    return h


def _grid(ax, xy, heads: int, rh: float, colour):
    """K or V of one layer: a grid of `heads` rows x BLOCK_SIZE token columns at `xy`."""
    (x, y), w, h = xy, BLOCK_SIZE * CELL_W, heads * rh
    ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, edgecolor=palette.INK, lw=1))
    # the cell grid in ink, so it reads from the back of a hall (white lines vanish there)
    columns = [x + CELL_W * t for t in range(1, BLOCK_SIZE)]
    ax.vlines(columns, y, y + h, color=palette.INK, lw=0.7, alpha=0.55, gid="grid")
    rows = [y + rh * r for r in range(1, heads)]
    ax.hlines(rows, x, x + w, color=palette.INK, lw=0.5, alpha=0.45, gid="grid")


ANATOMY_TITLE = "3.2  What one KV block holds (block_size = 16 tokens, FP16); grids drawn to scale"
ANATOMY_NOTE = (
    "Each small cell (one outlined in orange) is one head_dim vector: 128 values "
    "\u00d7 2 bytes = 256 B. A block stores K and V of 16 tokens for every head of every "
    "layer."
)
MODELS = {
    "chapter3": "the chapter's worked example, shaped like Llama-2-7B; MHA: 32 query heads, "
    "32 KV heads",
    "llama-3-8b": "GQA: 32 query heads share 8 KV heads",
}


BYTES_OF = "= B \u00d7 layers \u00d7 2 (K,V) \u00d7 KV heads \u00d7 head_dim \u00d7 bytes"


def gqa_ratio() -> int:
    """How many times smaller llama-3-8b's block is than the chapter's (8 KV heads, not 32)."""
    chapter, gqa = preset("chapter3"), preset("llama-3-8b")
    return chapter.bytes_per_block(BLOCK_SIZE) // gqa.bytes_per_block(BLOCK_SIZE)


def anatomy_slides(out_dir: Path) -> list[Path]:
    """`--slides`: one model per slide, its block drawn above its bytes."""
    paths = []
    ratio = gqa_ratio()
    for i, (name, note) in enumerate(MODELS.items()):
        spec = preset(name)
        fig, ax = style.canvas(style.SLIDE_BODY_IN, (0, 24), (0, 10))
        ax.text(
            0.4, 9.85, textwrap.fill(ANATOMY_TITLE, 64), fontsize=13, fontweight="bold", va="top"
        )
        ax.text(0.4, 8.85, textwrap.fill(ANATOMY_NOTE, 90), fontsize=9.5, va="top")
        rh = 0.08  # both slides: the grids keep one scale
        y = 6.0 - spec.num_kv_heads * rh
        _block(ax, 2.0, y, spec, textwrap.fill(f"{name}  ({note})", 70), rh=rh, slide=True)
        lines = [
            (BYTES_OF, {}),
            ("= " + formula(spec), {"family": "DejaVu Sans Mono"}),
            (f"per token: {spec.bytes_per_token():,} B", {"color": "#444444"}),
        ]
        if name == "llama-3-8b":
            lines.append(
                (f"GQA stores {ratio}x fewer bytes per block: {ratio}x more tokens per GB.", {})
            )
        ty = y - 1.3
        ax.text(0.4, ty, f"{name}: bytes per block", fontsize=10.5, fontweight="bold", va="top")
        for k, (text, kw) in enumerate(lines):
            ax.text(0.4, ty - 0.5 * (k + 1), text, fontsize=9, va="top", **kw)
        paths.append(style.save(fig, Path(out_dir) / f"3.2-block-anatomy-slide-{i + 1}-{name}.png"))
    return paths


def make_anatomy(out_dir: Path) -> list[Path]:
    """3.2: one block's layout (K, V, heads x tokens x head_dim, all layers) and its bytes."""
    if style.slides():
        return anatomy_slides(out_dir)
    fig, ax = style.canvas(ANATOMY_SIZE, (0, 24), (-0.6, 11.8))
    ax.text(0.4, 11.5, ANATOMY_TITLE, fontsize=13, fontweight="bold", va="top")
    ax.text(0.4, 10.85, ANATOMY_NOTE, fontsize=9.5, va="top")
    y = 9.5
    for name, note in MODELS.items():
        spec = preset(name)
        h = _block(ax, 1.6, y - spec.num_kv_heads * 0.11 - 0.8, spec, f"{name}  ({note})")
        tx, grey = 15.2, "#444444"
        ax.text(tx, y - 0.5, f"{name}: bytes per block", fontsize=10.5, fontweight="bold", va="top")
        for ty, text, kw in (
            (y - 1.1, BYTES_OF, dict(fontsize=9, color=grey)),
            (y - 1.65, "= " + formula(spec), dict(fontsize=9.5, family="DejaVu Sans Mono")),
            (y - 2.2, f"per token: {spec.bytes_per_token():,} B", dict(fontsize=9, color=grey)),
        ):
            ax.text(tx, ty, text, va="top", **kw)
        y -= h + 2.6
    ratio = gqa_ratio()
    gqa = f"GQA stores {ratio}x fewer bytes per block,\nso the same memory holds {ratio}x"
    ax.text(15.2, 0.3, gqa + " more tokens.", fontsize=10, va="top", color=palette.INK)
    return [style.save(fig, Path(out_dir) / "3.2-block-anatomy.png")]


# A toy block whose size is not a multiple of 128 B (real presets are already multiples).
TOY = ModelSpec("toy", num_layers=1, num_kv_heads=1, head_dim=100)
TOY_BLOCK_SIZE, TOY_BLOCKS = 3, 6


def make_alignment(out_dir: Path) -> list[Path]:
    """3.7: block start addresses packed vs rounded up to 128 B, and the padding."""
    size = TOY.bytes_per_block(TOY_BLOCK_SIZE)
    stride = align_up(size, ALIGNMENT)
    end = TOY_BLOCKS * stride
    slide = style.slides()  # 18 pt on a slide: wider margins, fewer ticks, wrapped notes
    fig = style.new_figure(*ALIGNMENT_SIZE)
    ax = fig.add_axes((0.17, 0.27, 0.8, 0.39) if slide else (0.1, 0.2, 0.88, 0.62))
    ax.set_xlim(-60, end + 60)
    ax.set_ylim(-0.2, 2.3)
    ax.vlines(range(0, end + 1, ALIGNMENT), -0.1, 2.05, color="#DDDDDD", lw=0.6, zorder=0)
    _address_row(ax, 1.3, size, size, "packed\n(no padding)")
    _address_row(ax, 0.15, size, stride, f"aligned\nto {ALIGNMENT} B")
    ax.set_yticks([])
    ax.set_xticks(range(0, end + 1, (8 if slide else 4) * ALIGNMENT))
    ax.set_xlabel(
        f"byte address (grey lines every {ALIGNMENT} B)"
        if slide
        else f"byte address (grey lines every {ALIGNMENT} B; (+n): the block starts n bytes "
        f"past a {ALIGNMENT}-byte boundary)"
    )
    ax.spines[["top", "right", "left"]].set_visible(False)
    title, sub, note = _alignment_texts(size, stride, slide)
    fig.text(0.02, 0.96, title, fontsize=12.5, fontweight="bold", va="top")
    fig.text(0.02, 0.9 if slide else 0.895, sub, fontsize=10, va="top")
    fig.text(0.02, 0.01 if slide else 0.06, note, fontsize=9.5, va="bottom")
    return [style.save(fig, Path(out_dir) / "3.7-alignment.png")]


def _address_row(ax, y, size: int, step: int, title: str):
    """TOY_BLOCKS blocks of `size` bytes at height `y`, one every `step` bytes: each with its
    start address (in plum where it is not a multiple of 128), the padding hatched."""
    for i in range(TOY_BLOCKS):
        start, colour = i * step, palette.SEQ_COLOURS[i % 2 * 6]
        ax.add_patch(Rectangle((start, y), size, 0.55, fc=colour, ec=palette.INK, lw=0.8))
        centred = dict(ha="center", va="center", fontsize=9, color=style.text_on(colour))
        ax.text(start + size / 2, y + 0.275, f"block {i}", **centred)
        ok = start % ALIGNMENT == 0
        where = f"{start}" + ("" if ok else f"\n(+{start % ALIGNMENT})")
        ink = palette.INK if ok else "#AA3377"
        ax.text(start, y + 0.62, where, ha="center", va="bottom", fontsize=7.5, color=ink)
        if step > size:
            pad: dict[str, Any] = dict(
                facecolor="white", edgecolor=palette.ACCENT, hatch="////", lw=0.8
            )
            ax.add_patch(Rectangle((start + size, y), step - size, 0.55, **pad))
    ax.text(-70, y + 0.275, title, ha="right", va="center", fontsize=10, fontweight="bold")


def _alignment_texts(size: int, stride: int, slide: bool) -> tuple[str, str, str]:
    """3.7's title, subtitle and note, with the numbers of `sizing` (wrapped on a slide)."""
    budget = 64 * 1024
    packed, aligned = fit_blocks(budget, size, alignment=1), fit_blocks(budget, size)
    title = (
        f"3.7  Block alignment: a toy block of {TOY_BLOCK_SIZE} tokens \u00d7 head_dim "
        f"{TOY.head_dim} (1 layer, 1 KV head, FP16) = {size:,} B"
    )
    sub = (
        f"align_up({size}, {ALIGNMENT}) = {stride}: each block gets {stride - size} B of "
        f"padding (hatched), {100 * (stride - size) / stride:.2f}% of its stride."
    )
    chapter_block = preset("chapter3").bytes_per_block(16)
    note = (
        f"In a {budget // 1024} KiB budget: packed {packed.num_gpu_blocks} blocks, aligned "
        f"{aligned.num_gpu_blocks} blocks ({aligned.padding_bytes:,} B of padding). The chapter's "
        f"8 MiB block ({chapter_block:,} B) is already a multiple of {ALIGNMENT}: "
        f"padding {align_up(chapter_block) - chapter_block} B."
    )
    if slide:
        title = f"3.7  Block alignment: a toy block of {size:,} B"
        sub = (
            f"{TOY_BLOCK_SIZE} tokens \u00d7 head_dim {TOY.head_dim}, 1 layer, 1 KV head, FP16. "
            f"{sub} (+n): the block starts n bytes past a {ALIGNMENT}-byte boundary."
        )
        sub, note = textwrap.fill(sub, 88), textwrap.fill(note, 88)
    return title, sub, note
