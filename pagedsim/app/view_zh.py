"""Chinese for the text view of a snapshot, which the tour and the playground share.

`tour.format_snapshot` prints the free list, the block tables, pending copies and the
physical blocks under a "step k: caption" line; `pagedsim tour` and `pagedsim play`
both print it, so both look their lines up here (English template -> Chinese, through
`lang.t`). The captions themselves come from `pagedsim/text/captions.py`; the tour's own lines
(its header, "why", the step prompt) from `tour_zh.py`.
"""

ZH = {
    "step {k}: {caption}": "第 {k} 步：{caption}",
    "  free list, head first ({n} free): {free}": "  空闲链表，表头在前（{n} 块空闲）：{free}",
    "  block tables:": "  块表：",
    "    {seq:<3} {n:>3} tokens   logical->physical: {mapping}": (
        "    {seq:<3} {n:>3} 个 token   逻辑->物理：{mapping}"
    ),
    "dropped": "已丢弃",
    "    (no sequences)": "    （没有序列）",
    "(empty)": "（空）",
    "  copy-on-write pairs for the copy_blocks kernel (src, dst): {pairs}": (
        "  写时复制对，交给 copy_blocks 内核 (src, dst)：{pairs}"
    ),
    "  physical blocks (owners, ref count, fill): {used} used, {shared} shared, {free} free": (
        "  物理块（持有者、引用计数、填充）：已用 {used}，共享 {shared}，空闲 {free}"
    ),
    "free": "空闲",
}
