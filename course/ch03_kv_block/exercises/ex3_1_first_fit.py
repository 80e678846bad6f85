"""Exercise 3.1 (your file): a variable-size first-fit allocator, to watch external fragmentation
appear.

Before paging, a serving system gave each sequence one contiguous range of KV slots
sized to the sequence. This allocator does exactly that over `capacity` slots. Its
free space is a list of *holes* (start, size), sorted by start and always merged,
so no two holes touch:

    allocate(size)  first fit: the first hole (lowest start) with room; None if none
    free(start, size)  give a range back and merge it with the holes on either side

After some frees the free space is split into holes too small for the next request
even though their sum would be enough: *external fragmentation*. Fixed-size blocks
(the chapter's answer) cannot suffer from it, because any free block fits any need.

中文：分页之前，服务系统给每个序列分配一段与其长度相同的连续 KV 槽位。这个分配器在 capacity
个槽位上做同样的事。空闲空间是一串"空洞" (start, size)，按起点排序且总是合并，任何两个空洞都不相邻：
allocate(size) 用首次适配，取第一个放得下的空洞（没有就返回 None；size 不是正整数时抛 ValueError
且不改变任何状态）；free(start, size) 归还一段并与两侧相邻的空洞合并。几次释放之后，空闲空间
被切成许多小洞，单个放不下下一个请求，加起来却够：这就是外部碎片。固定大小的 Block 不会有
这个问题，因为任何空闲 Block 都能满足任何需求。

Reference: Kwon et al., "Efficient Memory Management for Large Language Model Serving
with PagedAttention" (SOSP 2023), section 3: reserved contiguous chunks and fragmentation.
"""

from __future__ import annotations


class FirstFit:
    def __init__(self, capacity: int):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        self.capacity = capacity  # slots in the whole region
        self.holes: list[tuple[int, int]] = [(0, capacity)]  # (start, size), sorted, never touching

    def free_slots(self) -> int:
        return sum(size for _, size in self.holes)

    def allocate(self, size: int) -> int | None:
        """Take `size` slots from the front of the first hole that has room; None if none has.

        A size that is not a positive int raises ValueError and changes nothing.
        """
        # TODO(student): scan self.holes in order; shrink or delete the first hole of size >= size.
        raise NotImplementedError("allocate")

    def free(self, start: int, size: int) -> None:
        """Return [start, start + size) and merge it with a hole that touches it on either side."""
        # TODO(student): insert (start, size) in order, then merge it with touching neighbours.
        raise NotImplementedError("free")


def external_fragmentation(holes: list[tuple[int, int]]) -> float:
    """1 - largest hole / all free slots: 0 when the free space is one piece (or empty)."""
    # TODO(student): sum the hole sizes, find the largest, and mind the empty case.
    raise NotImplementedError("external_fragmentation")
