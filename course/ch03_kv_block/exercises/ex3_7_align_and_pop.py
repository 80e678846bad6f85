"""Exercise 3.7 (your file): 128-byte aligned block starts, and a concurrent block pop with atomics.

Alignment. A GPU reads global memory in 32-byte sectors grouped in 128-byte lines;
a block whose start is not a multiple of 128 makes every read of it touch one more
line than it needs. So the pool places block i at i * stride, where the stride is the
block's size rounded *up* to the next multiple of 128 (rounding down would overlap
blocks).

Concurrent pop. Many threads allocate at once. The free blocks sit in `free_stack`,
and `top[0]` counts them. A thread that reads top and then writes top - 1 in two
steps can be overtaken by another thread reading the same top: both hand out the
same block and one block is lost. `cuda.atomic.sub(top, 0, 1)` does the read and the
write as one indivisible step and returns the old value, so each thread gets its
own index.

中文：对齐：GPU 以 32 字节扇区、128 字节缓存行读取全局内存；起始地址不是 128 倍数的块，每次
读取都会多碰一行。所以第 i 个块放在 i × 步长，步长是块大小向上取整到 128 的倍数——只取整一次，
不要对每个起点分别取整（1200 字节的块会重叠）。并发弹栈：空闲块放在 free_stack，top[0] 是个数。
分两步读 top 再写 top - 1，会被另一个读到同一个 top 的线程插队，两个线程拿到同一个块；
cuda.atomic.sub(top, 0, 1) 一步完成读和写并返回旧值。旧值 <= 0 表示栈已空，写 -1；
i >= out.shape[0] 的线程什么也不做。

Reference: CUDA C++ Best Practices Guide, "Coalesced Access to Global Memory";
CUDA C++ Programming Guide, "Atomic Functions"; Numba's cuda.atomic documentation.
"""

from __future__ import annotations

import numpy as np

from course.ch03_kv_block._cuda import cuda


def align_up(nbytes: int, alignment: int = 128) -> int:
    """The smallest multiple of `alignment` (a power of two) that is >= nbytes."""
    # TODO(student): round nbytes up (never down) to a multiple of alignment.
    raise NotImplementedError("align_up")


def block_starts(num_gpu_blocks: int, block_bytes: int, alignment: int = 128) -> list[int]:
    """Byte offset of each block in a pool whose base is aligned: block i at i * stride."""
    # TODO(student): the stride is block_bytes rounded up with align_up.
    raise NotImplementedError("block_starts")


@cuda.jit
def pop_kernel(free_stack, top, out):
    """One thread per request, one block of threads. Thread i pops one block into out[i].

    free_stack[0:top[0]] are the free block ids; a thread that finds the stack empty
    writes -1. top[0] may end below 0 when more threads ask than blocks are free.
    Threads with i >= out.shape[0] (a launch rounded up to a block size) do nothing.
    """
    # TODO(student): pop one block per thread; reading and decrementing top must be ONE atomic step.
    raise NotImplementedError("pop_kernel")


def pop_blocks(free_stack, num_threads: int):
    """Launch pop_kernel with `num_threads` threads. Returns (handed out [num_threads], top)."""
    stack = np.asarray(free_stack, np.int32)
    top = np.array([len(stack)], np.int32)
    out = np.full(num_threads, -2, np.int32)  # -2: a thread that never wrote
    pop_kernel[1, num_threads](stack, top, out)
    return out, int(top[0])
