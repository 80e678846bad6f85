"""Chinese for `pagedsim tour --lang zh` and `pagedsim play --lang zh` (English -> Chinese
templates, through `lang.t`): the snapshot view both print, and the tour's own lines.

WHY lists the tour's explanations in the order of tour.SCRIPT; a test checks the lengths
agree. The captions are in `pagedsim/text/captions.py`.
"""

# the snapshot view (`tour.format_snapshot`), which the tour and the playground both print
VIEW_ZH = {
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

WHY_START = "3.1：所有块在开始时一次性创建，全部挂在空闲链表上。"

WHY = [
    "3.4：allocate() 从空闲链表头部取块，所以 A 的 6 个提示词 token 占用前两个块；"
    "第二块只填了一半。",
    "3.3：B 拿到空闲链表上接下来的块。B 的逻辑块 0、1 对应物理块 2、3。",
    "A 解码两个 token。它们正好放进 A 最后那个未满的块：不需要分配。",
    "A 的最后一块已满，下一个 token 需要从空闲链表取一个新块。",
    "3.4 易错点：束搜索把 B 分叉出 B2。什么都不复制；两张块表指向同一批块，每块的引用计数变成 2。",
    "B 要写入它共享的、未写满的最后一块。原地写会破坏 B2，所以 B 得到一份私有副本："
    "一个新块，外加一对留给复制内核的 (src, dst)。",
    "现在 B2 是块 3 的唯一持有者（计数 1），所以原地追加。",
    "A 结束。它的块按从后往前的顺序释放；计数降到 0 的块回到空闲链表（后进先出：放在表头）。",
    "C 带着 20 个 token 的提示词到来，优先复用 A 刚释放的块。",
    "D 拿走剩下的所有块：空闲链表现在是空的。",
    "C 的下一个 token 需要第六个块，但空闲链表已空。管理器抛出 OutOfBlocks，并且不做任何改动。",
]

OUT_OF_BLOCKS_NOTE = (
    "块池用完了。本章的 allocate() 此时会调用 evict_blocks()；真实的调度器（vLLM）则会抢占一个序列"
    "——释放它的块、之后重新计算，或者把它的块换出到 CPU 内存——然后重试。"
    "失败的调用没有改动任何块表和计数。"
    "参见 `pagedsim policies`。"
)

# everything the tour prints: the shared snapshot view, plus the tour's own lines
ZH = {
    **VIEW_ZH,
    "pagedsim tour: chapter 3 on a pool of {n} blocks x {b} tokens (free order: LIFO, as in the "
    "chapter)": "pagedsim tour：第 3 章，块池共 {n} 块 x 每块 {b} 个 token"
    "（空闲顺序：后进先出，与本章一致）",
    "  why: {why}": "  原因：{why}",
    "press Enter for the next step (b back, q to stop)": "按回车看下一步（b 后退，q 结束）",
}
