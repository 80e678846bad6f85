"""Chinese captions for one step's events: the counterpart of `trace.describe` (same cases, same facts).

Used by `pagedsim tour --lang zh`, `pagedsim play --lang zh` and Chinese figure
captions. Ids, counts and call names stay as they are; only the sentence is Chinese.
A test compares the numbers in both captions for every step of the tour.
"""

from __future__ import annotations

from .. import trace as tr


def _ids(blocks) -> str:
    return "块 " + "、".join(map(str, blocks))


def describe_zh(events) -> str:
    events = list(events)
    if not events:
        return "没有变化"
    head = events[0]
    allocated = [e.block for e in events if isinstance(e, tr.BlockAllocated)]
    if isinstance(head, tr.AllocationFailed):
        return (f"序列 {head.seq_id} 的 {head.what} 需要 {head.needed} 个空闲块，但只有 {head.available} 个："
                f"OutOfBlocks，没有任何改动")
    if isinstance(head, tr.SequenceAdded):
        text = f"序列 {head.seq_id} 带着 {head.num_tokens} 个 token 到来"
        shared = [e.block for e in events if isinstance(e, tr.BlockShared)]
        if shared:
            text += f"，共享已缓存的{_ids(shared)}"
        if allocated:
            text += f"，取得{_ids(allocated)}"
        return text
    if isinstance(head, tr.SequenceForked):
        shared = [e for e in events if isinstance(e, tr.BlockShared)]
        if not shared:
            return f"序列 {head.child} 从空序列 {head.parent} 分叉"
        values = {e.ref_count for e in shared}
        counts = (f"计数变为 {values.pop()}" if len(values) == 1 else
                  "计数：" + "、".join(f"块 {e.block} 为 {e.ref_count}" for e in shared))
        return f"序列 {head.child} 从序列 {head.parent} 分叉，共享{_ids(e.block for e in shared)}（{counts}）"
    if isinstance(head, tr.SequenceFreed):
        released = [e for e in events if isinstance(e, tr.BlockReleased)]
        back = [e.block for e in released if e.ref_count == 0]
        kept = [e for e in released if e.ref_count > 0]
        text = f"序列 {head.seq_id} 结束"
        if back:
            text += f"：{_ids(back)} 回到空闲链表"
        if kept:
            text += "；" + "，".join(f"块 {e.block} 保留（计数 {e.ref_count}）" for e in kept)
        return text
    appended = [e for e in events if isinstance(e, tr.TokensAppended)]
    if len(appended) > 1:  # a decode step: one token for each of several sequences
        text = f"解码一步：{len(appended)} 个序列各追加一个 token"
        cow = [e for e in events if isinstance(e, tr.CopyOnWrite)]
        if cow:
            text += "；写时复制 " + "、".join(f"{e.src} -> {e.dst}" for e in cow)
        fresh = [b for b in allocated if b not in {c.dst for c in cow}]
        if fresh:
            text += f"；已满的最后一块取得{_ids(fresh)}"
        return text
    if isinstance(head, tr.TokensAppended):
        n = len(head.slots)
        where = (f"token {head.first_position}（槽位 {head.slots[0]}）" if n == 1 else
                 f"token {head.first_position}..{head.first_position + n - 1}")
        text = f"序列 {head.seq_id} 追加 {where}"
        cow = [e for e in events if isinstance(e, tr.CopyOnWrite)]
        for e in cow:
            text += f"：块 {e.src} 被共享（计数 {e.src_ref_count}），写时复制给序列 {e.seq_id} 块 {e.dst}"
        fresh = [b for b in allocated if b not in {c.dst for c in cow}]
        if fresh:
            text += f"；最后一块已满，取得{_ids(fresh)}"
        dropped = [e.block for e in events if isinstance(e, tr.BlockReleased) and e.block not in {c.src for c in cow}]
        if dropped:
            text += f"；{_ids(dropped)} 滑出窗口，被释放"
        return text
    return "；".join(e.kind for e in events)


def caption(snapshot, lang: str) -> str:
    """The snapshot's caption in `lang` (English: the recorded one)."""
    if lang != "zh" or snapshot.caption != tr.describe(snapshot.events):  # English, or a custom caption
        if lang == "zh" and snapshot.step == 0 and not snapshot.events:
            return f"块池：{snapshot.num_blocks} 块 x 每块 {snapshot.block_size} 个 token，全部空闲"
        return snapshot.caption
    return describe_zh(snapshot.events)
