"""The testing kit's model-comparison messages (pagedsim/testing/machine.py) in Chinese.

The kit words its failures in English only. Under `--lang zh`, 3.4b's check turns each of
its sentence templates into Chinese here, numbers and calls kept as they are; a message
this table does not know is introduced in Chinese and left as the kit wrote it.
"""

from __future__ import annotations

import re

TOOK = [
    (r"left the free count as it was", "没有改变空闲块数"),
    (r"took (\d+) block\(s\)", r"取走了 \1 个块"),
    (r"gave back (\d+) block\(s\)", r"归还了 \1 个块"),
]
HINTS = {
    " (did it free blocks another sequence still holds? fork must count the child's reference to "
    "every shared block)": "（是不是释放了另一个序列还持有的块？fork 必须为每个共享块记上子序列"
    "的引用）",
    " (a leak: free must release every block whose count drops to 0)": "（泄漏：计数降到 0 的每"
    "个块都必须释放）",
    " (fork shares the parent's blocks; it needs no new ones)": "（fork 共享父序列的块，不需要新"
    "块）",
    " (too few: ceil(tokens / block_size) blocks, plus a copy when appending into a shared, partly "
    "filled last block)": "（太少了：需要 ceil(tokens / block_size) 个块，往共享且未填满的最后一"
    "块追加时还要多一个副本）",
    " (too many: ceil(tokens / block_size) blocks are enough)": "（太多了：ceil(tokens / "
    "block_size) "
    "个块就够了）",
}
COW = (
    r"\. In the model its last block is partly full and shared with seq (.+?) \(fork counted "
    r"the child's reference\), so writing into it needs a private copy first \(copy-on-write\)"
)
TEMPLATES = [
    (
        r"after (.+?), num_free_blocks is (\d+) but the model has (\d+) free: this call (.+?); the "
        r"model (.+?)(?:, (\d+) of them for copy-on-write)?(?P<hint> \(.*\))?$",
        lambda m: (
            f"{m[1]} 之后 num_free_blocks 是 {m[2]}，而模型有 {m[3]} 个空闲块：这次调"
            f"用{_took(m[4])}；模型{_took(m[5])}"
            + (f"，其中 {m[6]} 个用于 copy-on-write" if m[6] else "")
            + HINTS.get(m["hint"] or "", m["hint"] or "")
        ),
    ),
    (
        r"after (.+?), tables hold (\d+) distinct block\(s\) and (\d+) are free, but the pool has "
        r"(\d+)$",
        lambda m: (
            f"{m[1]} 之后，各表共持有 {m[2]} 个不同的块，空闲 {m[3]} 个，但池里一共有 {m[4]} 个"
        ),
    ),
    (
        r"after (.+?), block_table\((.+?)\) is (.+?); with (\S+) free order the model gives (.+)$",
        lambda m: (
            f"{m[1]} 之后 block_table({m[2]}) 是 {m[3]}；按 {m[4]} 的释放顺序，模型给出的是 {m[5]}"
        ),
    ),
    (
        r"block_table\((.+?)\) has (\d+) entries for (\d+) tokens; expected ceil\((\d+)/(\d+)\) = "
        r"(\d+)$",
        lambda m: (
            f"block_table({m[1]}) 有 {m[2]} 项，对应 {m[3]} 个 token；应为 ceil({m[4]}/{m[5]}) = "
            f"{m[6]}"
        ),
    ),
    (
        r"block_table\((.+?)\) is (.+?): ids must be distinct, in 0\.\.(\d+)$",
        lambda m: f"block_table({m[1]}) 是 {m[2]}：块号必须互不相同，且在 0..{m[3]} 之内",
    ),
    (
        r"after (.+?), seq (.+?) does not read back its own tokens: position (\d+) lives in block "
        r"(\d+) \(slot (\d+)\), and (nothing was ever written there \(or it was never copied\)|it "
        r"holds the token seq (.+?) wrote at position (\d+))(?:; block \d+ is also in the table of "
        r"seq (.+))?$",
        lambda m: (
            f"{m[1]} 之后，序列 {m[2]} 读不回自己的 token：位置 {m[3]} 在块 {m[4]}（slot "
            f"{m[5]}）里，"
            + (
                "那里从没写过东西（或者从没被复制过）"
                if m[7] is None
                else f"那里是序列 {m[7]} 在位置 {m[8]} 写的 token"
            )
            + (f"；块 {m[4]} 也在序列 {m[9]} 的表里" if m[9] else "")
        ),
    ),
    (
        r"(.+?) succeeded, but it needs (\d+) free block\(s\) and only (\d+) are free: it must "
        r"raise OutOfBlocks or MemoryError \(the model does\)(?:" + COW + r")?$",
        lambda m: (
            f"{m[1]} 成功了，但它需要 {m[2]} 个空闲块，而只有 {m[3]} 个：它必须抛出 OutOfBlocks 或 "
            "MemoryError（模型会抛出）"
            + (
                f"。在模型里它的最后一块未填满，且与序列 {m[4]} 共享（fork 记上了子序列的引用），"
                "所以写入前需要先复制一份私有块（copy-on-write）"
                if m[4]
                else ""
            )
        ),
    ),
    (
        r"(.+?) ran out of blocks, as it should, but changed the state \(all-or-nothing broken\): "
        r"(.+)$",
        lambda m: (
            f"{m[1]} 按要求因块不够而失败，但改变了状态（违反了全有或全无）："
            + re.sub(r"(\S+) went (.+?) -> ([^;]+)", r"\1 从 \2 变成了 \3", m[2])
        ),
    ),
    (
        r"(.+?) raised (.+?), but the call needs (\d+) block\(s\) and (\d+) are free \(the model "
        r"succeeds\)$",
        lambda m: (
            f"{m[1]} 抛出了 {m[2]}，但这次调用需要 {m[3]} 个块，而有 {m[4]} 个空闲（模型能成功）"
        ),
    ),
    (
        r"after every sequence is freed, num_free_blocks is (\d+) of (\d+): (\d+) block\(s\) "
        r"leaked$",
        lambda m: f"所有序列都释放之后，num_free_blocks 是 {m[1]}/{m[2]}：泄漏了 {m[3]} 个块",
    ),
    (
        r"(.+?) did not return within (\S+) s \(an infinite loop\?\)$",
        lambda m: f"{m[1]} 在 {m[2]} 秒内没有返回（死循环？）",
    ),
    (r"(.+?) raised (.+)$", lambda m: f"{m[1]} 抛出了 {m[2]}"),
]


def _took(text: str) -> str:
    for pattern, zh in TOOK:
        if re.fullmatch(pattern, text):
            return re.sub(pattern, zh, text)
    return text


def in_chinese(problem: str) -> str:
    """The kit's sentence in Chinese (its calls, numbers and lists unchanged)."""
    for pattern, render in TEMPLATES:
        m = re.match(pattern, problem, re.S)
        if m:
            return render(m)
    return "与模型不一致：" + problem
