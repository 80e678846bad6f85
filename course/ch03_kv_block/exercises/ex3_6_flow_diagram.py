"""Exercise 3.6 (your file): draw the chapter's core flow diagram from one snapshot of a pool's
trace.

The chapter's figure has three parts: the pool of physical blocks (free or in use),
the block tables that map each sequence's logical blocks to physical ones, and the
free list that allocate() takes from. The simulator never draws; it records
snapshots (pagedsim.trace.Snapshot). Your `draw_flow` turns one snapshot into
matplotlib artists, each tagged with a gid so a check can find it:

    block-B        a Rectangle per physical block B, FREE_COLOUR or USED_COLOUR
    count-B        a Text with B's ref count, for every block in use
    table-S-I      a Rectangle per table entry I of sequence S, with a Text of the physical id
    map-S-I        an arrow (ax.annotate) from table entry I of S to its physical block
    free-list      one Text: "free list: 3 -> 1 -> 2" head first, or "free list: empty"

What draw_flow reads from the snapshot (pagedsim.trace.Snapshot):

    snapshot.num_gpu_blocks  how many physical blocks the pool has (0 .. num_gpu_blocks - 1)
    snapshot.ref_counts      [num_gpu_blocks] owners of each block; 0 means free
    snapshot.sequences       the live sequences, in admission order: row R of the tables is
                             snapshot.sequences[R]; each has .seq_id and .blocks (its table)
    snapshot.free_list       the free blocks, head first (the order allocate() takes them)

Labels without a gid: "#B" inside every block's square, above its count; the physical id
inside every table entry's square; "seq S" right-aligned less than a unit left of each
table row. The free-list text starts under the tables' left edge, one row below the last
table. Margins: at most one unit of blank space around the picture (two on the left, for
the "seq S" labels).

Where things go is fixed by `pool_xy` and `table_xy` below (keep them as they are: the
pool is a grid of PER_ROW blocks per row, one unit apart, and the tables start one unit
below it, 1.3 units apart): block B is centred at
pool_xy(B); entry I of the sequence in row R (its position in snapshot.sequences) at
table_xy(R, I, num_gpu_blocks). An arrow is ax.annotate("", xy=<block centre>,
xytext=<entry centre>, gid=..., arrowprops=...). Patches do not widen the axes by
themselves: finish with ax.set_xlim/ax.set_ylim so the whole picture shows.

中文：本章的图有三部分：物理块池（空闲或在用）、把逻辑块映射到物理块的 Block Table，以及
allocate() 取块的空闲链表。模拟器从不画图，只记录快照；你的 draw_flow 把一个快照变成 matplotlib
图元，每个都带 gid 以便检查找到它：block-B（以 pool_xy(B) 为中心、边长 CELL 的矩形，空闲用
FREE_COLOUR，在用用 USED_COLOUR）、count-B（在用块里的计数）、table-S-I（以 table_xy 为中心的
表项矩形）、map-S-I（从表项指向物理块的箭头）、free-list（表头在前的空闲链表文字）。最后用
set_xlim/set_ylim 让整幅图可见。

Reference: matplotlib's artist tutorial (Rectangle, Text, Axes.annotate, gids).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402, F401  (you will need it)

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
    # (the module docstring describes each artist)
    # TODO(student): add the block-B, count-B, table-S-I, map-S-I and free-list artists.
    raise NotImplementedError("draw_flow")


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
