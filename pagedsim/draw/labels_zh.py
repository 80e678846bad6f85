"""Chinese labels for the step pictures and the 3.1 figure (English text -> Chinese).

`style.tr(text)` looks text up here under `lang="zh"` with a CJK font; anything missing
stays English.
"""

ZH = {
    "block tables (logical \u2192 physical)": "块表（逻辑 \u2192 物理）",
    "physical blocks (B = {b} tokens)": "物理块（B = {b} 个 token）",
    "free list, head first = allocate() order ({n} free)": (
        "空闲链表，表头在前 = allocate() 的顺序（{n} 块空闲）"
    ),
    "empty: the next allocate() fails": "空：下一次 allocate() 会失败",
    "... +{n} more": "…… 另有 {n} 块",
    "(no sequences)": "（没有序列）",
    "finished: its blocks are freed": "已结束：它的块已释放",
    "preempted: out of the pool until step {k}": "被抢占：直到第 {k} 步才回到池中",
    "... and {n} more sequences": "…… 另有 {n} 个序列",
    "seq {s}": "序列 {s}",
    "step {k}: {caption}": "第 {k} 步：{caption}",
    "free block": "空闲块",
    "ref count (badge)": "引用计数（圆标）",
    "fill (tokens / B)": "填充（token / B）",
    "changed this step": "本步改动",
    "copy-on-write src\u2192dst": "写时复制 src\u2192dst",
    "head": "表头",
    "{n} tok": "{n} 个 token",
    "copy {src}\u2192{dst}": "复制 {src}\u2192{dst}",
    "cached": "已缓存",
    "cached (free, reusable)": "已缓存（空闲，可复用）",
    "3.1  External fragmentation: first-fit holes vs fixed blocks": (
        "3.1  外部碎片：首次适配留下的空洞 vs 固定大小的块"
    ),
    "{slots} token slots. A..E arrive, B and D finish, then F needs {n} slots.": (
        "共 {slots} 个 token 槽位。A..E 依次到来，B 和 D 结束，然后 F 需要 {n} 个槽位。"
    ),
    "first fit": "首次适配",
    "blocks of {b}": "每块 {b} 个",
    "empty slot": "空槽位",
    "a request's tokens": "请求的 token",
    "block boundary": "块边界",
    "free: {free} slots in holes of {holes}  \u2192  F ({n}) is refused: no hole is big enough "
    "(external fragmentation)": "空闲：{free} 个槽位，分散在大小为 {holes} 的空洞里 \u2192 "
    "F（{n}）被拒绝：没有足够大的空洞（外部碎片）",
    "F takes blocks {blocks}: they need not be next to each other. Waste: {waste} slots, "
    "only inside last blocks (internal, < B per request)": (
        "F 取得块 {blocks}：这些块不必相邻。浪费：{waste} 个槽位，"
        "只在各请求的最后一块里（内部碎片，每个请求 < B）"
    ),
}
