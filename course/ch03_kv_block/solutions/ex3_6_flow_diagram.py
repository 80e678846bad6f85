"""Exercise 3.6: draw the chapter's core flow diagram from one snapshot of a pool's trace.

Solved; the spec is the docstring of exercises/ex3_6_flow_diagram.py.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from pagedsim.story import caption  # noqa: E402  (a step's sentence, in English)

FREE_COLOUR = "#DDDDDD"  # pale grey: on the free list
USED_COLOUR = "#88CCEE"  # cyan: held by at least one sequence
CELL = 0.9  # side of a drawn block
PER_ROW = 8  # physical blocks per row of the pool


def pool_xy(block: int) -> tuple[float, float]:
    """Centre of physical block `block` in the pool (top of the picture)."""
    return float(block % PER_ROW), -float(block // PER_ROW)


def table_xy(row: int, index: int, num_gpu_blocks: int) -> tuple[float, float]:
    """Centre of entry `index` of the `row`-th sequence's table (below the pool)."""
    pool_rows = -(-num_gpu_blocks // PER_ROW)
    return float(index), -(pool_rows + 1.0 + 1.3 * row)


def new_axes(snapshot):
    """A figure and axes sized for the snapshot."""
    rows = -(-snapshot.num_gpu_blocks // PER_ROW) + 1.3 * max(len(snapshot.sequences), 1) + 2
    fig, ax = plt.subplots(figsize=(1.0 * PER_ROW + 2.5, 0.8 * rows + 0.5))
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def draw_flow(snapshot, ax) -> None:
    """Draw the pool, every block table with its arrows, and the free list, on `ax`."""
    n = snapshot.num_gpu_blocks
    for b in range(n):
        x, y = pool_xy(b)
        count = snapshot.ref_counts[b]
        ax.add_patch(Rectangle((x - CELL / 2, y - CELL / 2), CELL, CELL, gid=f"block-{b}",
                               facecolor=USED_COLOUR if count else FREE_COLOUR,
                               edgecolor="#222222"))
        ax.text(x, y + 0.28, f"#{b}", ha="center", va="center", fontsize=7)
        if count:
            ax.text(x, y - 0.1, str(count), ha="center", va="center", gid=f"count-{b}")
    for row, seq in enumerate(snapshot.sequences):
        ax.text(-0.7, table_xy(row, 0, n)[1], f"seq {seq.seq_id}", ha="right", va="center")
        for i, b in enumerate(seq.blocks):
            x, y = table_xy(row, i, n)
            ax.add_patch(Rectangle((x - CELL / 2, y - CELL / 2), CELL, CELL,
                                   gid=f"table-{seq.seq_id}-{i}",
                                   facecolor="white", edgecolor="#222222"))
            ax.text(x, y, str(b), ha="center", va="center")
            ax.annotate("", xy=pool_xy(b), xytext=(x, y), gid=f"map-{seq.seq_id}-{i}",
                        arrowprops=dict(arrowstyle="->", color="#555555", lw=0.8,
                                        shrinkA=8, shrinkB=8,
                                        connectionstyle=f"arc3,rad={0.15 + 0.1 * row}"))
    order = " -> ".join(map(str, snapshot.free_list)) or "empty"
    bottom = table_xy(len(snapshot.sequences), 0, n)[1]
    ax.text(-0.5, bottom, f"free list: {order}", ha="left", va="center", gid="free-list")
    ax.set_xlim(-2.5, PER_ROW)
    ax.set_ylim(bottom - 0.8, 0.8)


def draw_trace(snapshots, out_dir) -> list[Path]:
    """One PNG per snapshot, step-NN.png, captioned with the step's sentence."""
    out_dir = Path(out_dir)
    paths = []
    for snap in snapshots:
        fig, ax = new_axes(snap)
        draw_flow(snap, ax)
        ax.set_title(f"step {snap.step}: {caption(snap)}", fontsize=8, wrap=True)
        paths.append(out_dir / f"step-{snap.step:02d}.png")
        fig.savefig(paths[-1], dpi=80, bbox_inches="tight")
        plt.close(fig)
    return paths
