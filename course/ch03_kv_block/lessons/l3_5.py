"""Lesson 3.5: choosing the block size -- waste against table length and the kernel's lookups.

One waste definition throughout, the same as figure 3.5 (pagedsim/draw/tradeoff.py) and
`pagedsim sweep` (pagedsim/labs/sweep.py): over every decode step of every request,
empty slots / allocated slots, i.e. exercise 3.5's waste_fraction applied to the
sequence length after each step. Workload: synthetic("sharegpt", 500, seed=0).

Reference: Kwon et al., SOSP 2023, section 7.1 (kernel microbenchmark) and 7.2 (block size).
"""

from __future__ import annotations

from course.ch03_kv_block.lessons import reference, verdict
from pagedsim.sizing import preset

TITLE = "Choosing the block size"
TITLE_ZH = "选择 Block 大小"
NUM_REQUESTS, SEED, SIZES = 500, 0, (1, 4, 8, 16, 32, 64, 128, 256)
SHARED_PREFIX = 100  # tokens two prompts share (a system prompt), for the prefix-cache column
FIGURES = [
    (
        "3.5-block-size-tradeoff",
        "waste (%) and table entries against B, the numbers of the table below",
    ),
    (
        "block_size_sweep",
        "the same waste column, plus batch size, preemptions and prefix hits in a fixed memory",
    ),
]
FIGURES_ZH = [
    "浪费（%）和表项数随 B 的变化，即下表中的数字",
    "同样的浪费一列，加上固定显存下的批大小、抢占次数和前缀命中",
]
TEXT = """
A block of B tokens trades two costs against each other, and they pull in opposite directions.

Memory side. A sequence wastes only the empty end of its last block, fewer than B slots.
We define waste once, and use it in this lesson, in figure 3.5 and in `pagedsim sweep`:
over every decode step, empty slots / allocated slots. Small B wastes almost nothing.

Kernel side. The block table is read by the attention kernel at every decode step: one
lookup per block, then B tokens of K and V read from one contiguous place. Small B means
more lookups per token (B = 1: one per token) and shorter contiguous reads, so the GPU
spends more of its time on indirection. The vLLM paper (SOSP 2023) reports, as measured
facts: its attention kernel is 20-26% slower than FasterTransformer's contiguous one,
because of the block-table reads and extra branches (section 7.1); with block sizes 1 to
256 on ShareGPT and Alpaca traces (section 7.2, Fig. 18b), sizes 16 to 128 serve ShareGPT
best, 16 and 32 serve Alpaca best, blocks too small do not keep the GPU's threads busy
reading KV, and blocks larger than the (short) Alpaca sequences waste memory and lose
performance. So vLLM defaults to 16: the smallest size the kernel is efficient with, and
small enough that waste stays near 2% on chat-like traces.

Prefix-cache side. vLLM v1's prefix cache stores and matches *full* blocks only: of a
prefix of P tokens that two prompts share, a hit serves floor(P / B) * B tokens (and
never a prompt's last token, which is always computed). The rest is computed again by
every request. So a large B also loses more of every shared system prompt; the sweep's
hit_rate column falls as B grows for that reason alone.

The demo prints, per B, the waste, the table entries (= lookups per sequence per step) and
the bytes one lookup brings in for Llama-2-7B, and how many tokens of a 100-token shared
prefix a cache hit can serve; then it applies exercise 3.5's rule for a
2% and a 5% waste limit. The rule sees only memory: it picks the largest B under the
limit, so the limit you accept decides between 16 and 32. It cannot see the kernel side,
which is why 8 or smaller is never the answer in practice.

About the sweep's preemption column: in a fixed memory, larger blocks lower the number of
preemptions. That is not a free win: each new block reserves room for B future tokens, so
the scheduler admits fewer sequences at a time (max_batch falls) and a running sequence
needs a new block only every B tokens; with fewer, larger allocations, the pool runs dry
less often mid-decode. The price is a smaller batch and fewer prefix-cache hits (a shared
prefix counts only in whole blocks). The sweep's driver is pagedsim's v0-shaped scheduler,
preempting by recompute. Swap, group preemption and the admission watermark are v0 only;
v1 preempts by recompute alone: the last running request goes back to the front of the
waiting queue, and its full blocks stay in the prefix cache, so part of the recompute is
a cache hit (`pagedsim swapcost` measures that fraction).
"""
TEXT_ZH = """
B 个 token 一个 Block，两种代价方向相反。

显存方面：序列只浪费最后一个 Block 的空尾，少于 B 个槽位。本课程只用一个浪费定义——本节、
图 3.5 和 `pagedsim sweep` 都一样：在每个 decode 步上，空槽位 / 已分配槽位。B 小，几乎不浪费。

内核方面：每个 decode 步，注意力内核都要读 Block Table：每个 Block 查一次表，然后从一处连续
内存读 B 个 token 的 K 和 V。B 越小，每个 token 摊到的查表次数越多（B = 1 时每个 token 一次），
连续读取越短，GPU 更多时间花在间接寻址上。vLLM 论文（SOSP 2023）给出的实测结论：它的注意力内核
因为读 Block Table 和额外分支，比 FasterTransformer 的连续内核慢 20-26%（7.1 节）；在 ShareGPT 和
Alpaca 上把 block size 从 1 扫到 256（7.2 节，图 18b），ShareGPT 上 16 到 128 最好，Alpaca 上 16 和
32 最好；Block 太小时读 KV 的线程吃不满 GPU，Block 比（较短的）Alpaca 序列还大时浪费显存、性能下降。
所以 vLLM 默认 16：内核能高效工作的最小值，同时在对话类负载上浪费约 2%。

前缀缓存方面：vLLM v1 的前缀缓存只存、只匹配"整块"：两个 prompt 共享 P 个 token 的前缀时，命中
只能提供 floor(P / B) × B 个 token（而且永远不含 prompt 的最后一个 token，它总要计算）。其余部分
每个请求都要重算。所以 B 大还会丢掉每个共享 system prompt 的更多部分；sweep 的 hit_rate 列随 B
增大而下降，单是这个原因就够了。

演示对每个 B 打印浪费、表项数（= 每个序列每步的查表次数）、Llama-2-7B 每次查表读入的字节数，
以及 100 个 token 的共享前缀里缓存命中能提供多少 token；
再用练习 3.5 的规则分别以 2% 和 5% 的浪费上限做选择。规则只看显存：取上限内最大的 B，所以你接受
的上限决定了 16 还是 32；它看不到内核那一面，这就是实际中从不选 8 或更小的原因。

关于 sweep 图中的抢占曲线：显存固定时，Block 越大抢占越少。这不是白赚的：每个新 Block 为 B 个
未来 token 预留空间，调度器同时接纳的序列更少（max_batch 下降），运行中的序列每 B 个 token 才
需要一个新 Block，分配更少更大，池在 decode 中途耗尽的次数就少。代价是批更小、前缀缓存命中更少
（共享前缀只按整块计）。
sweep 的驱动是 pagedsim 按 v0 形态写的调度器，用重算做抢占。swap、按组抢占和准入水位线只属于 v0；
v1 只用重算抢占：最后一个运行中的请求回到等待队列的最前面，它的整块留在前缀缓存里，所以重算有一部分
是缓存命中（`pagedsim swapcost` 测量这个比例）。
"""


def step_lengths():
    """The sequence length after every decode step of the workload (the figure's lengths)."""
    from pagedsim.workloads import synthetic

    requests = synthetic("sharegpt", NUM_REQUESTS, seed=SEED)
    return [n for r in requests for n in range(r.prompt_len + 1, r.total_len + 1)]


def demo(out_dir) -> None:
    ref = reference("3.5")
    choose_block_size, waste_fraction = ref.choose_block_size, ref.waste_fraction

    lengths = step_lengths()
    spec = preset("llama-2-7b")
    per_lookup = lambda b: b * 2 * spec.num_kv_heads * spec.head_dim * spec.dtype_bytes  # noqa: E731 - one layer
    print(
        f"workload: synthetic ShareGPT, {NUM_REQUESTS} requests, seed {SEED}: {len(lengths):,} "
        f"decode steps"
    )
    print(
        f"{'B':>4} {'waste':>7} {'lookups/seq/step':>17} {'KV bytes per lookup (1 layer)':>30} "
        f"{'hit of a ' + str(SHARED_PREFIX) + '-token prefix':>26}"
    )
    for b in SIZES:
        entries = sum(-(-n // b) for n in lengths) / len(lengths)
        hit = SHARED_PREFIX // b * b  # full blocks only (v1)
        print(
            f"{b:>4} {waste_fraction(lengths, b):>7.1%} {entries:>17.1f} {per_lookup(b):>30,} "
            f"{hit:>26}"
        )
    print(
        "same waste numbers: `pagedsim figures --only 3.5-block-size-tradeoff` and "
        f"`pagedsim sweep --num-requests {NUM_REQUESTS} --figure DIR`"
    )
    unbounded = 10**18  # the pool's size is set by the GPU, not by B: no budget limit here
    chosen = {}
    for limit in (0.02, 0.05):
        chosen[limit] = choose_block_size(lengths, spec.bytes_per_token(), unbounded, SIZES, limit)
        print(f"exercise 3.5's rule, waste <= {limit:.0%}: block_size {chosen[limit]}")
    print(
        "look at: B=16 is the first size whose lookups per step drop below ~30 while waste stays "
        "under 2%."
    )
    w16 = waste_fraction(lengths, 16)
    verdict(
        f"the rule picks {chosen[0.02]} at a 2% waste limit and {chosen[0.05]} at 5%; at "
        f"vLLM's default 16 this workload wastes {w16:.1%}, so 16 is "
        f"{'inside' if w16 <= 0.02 else 'outside'} the 2% limit, and smaller "
        "blocks would save little memory while multiplying the kernel's lookups",
        f"浪费上限 2% 时规则选 {chosen[0.02]}，5% 时选 {chosen[0.05]}；在 vLLM 默认的 16 下这个负载"
        f"浪费 {w16:.1%}，{'在' if w16 <= 0.02 else '超出'} 2% 上限"
        f"{'之内' if w16 <= 0.02 else ''}；更小的 Block 省不了多少显存，却让内核的查表次数成倍增加",
    )
