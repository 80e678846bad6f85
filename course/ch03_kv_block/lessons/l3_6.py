"""Lesson 3.6: the core flow diagram, drawn from a real trace of your own pool.

The scenario's fork and copy-on-write follow vLLM v0's block manager; v1 has neither
(it shares full blocks through the prefix cache, see lesson 3.4). Your 3.4a pool and 3.4b
functions run the script inside the capstone's WorkspaceManager (capstone.py).
"""

from __future__ import annotations

from typing import NamedTuple

from course.ch03_kv_block.capstone import Workspace, load_module
from course.ch03_kv_block.lessons import NeedsExercise, verdict
from course.i18n import lang, say
from pagedsim import BlockPool, KVCacheManager
from pagedsim.config import SchedulerConfig
from pagedsim.policies import PrefixCachingManager
from pagedsim.scheduler_v1 import SchedulerV1
from pagedsim.text.captions import caption

BLOCK_SIZE = 4
SCRIPT = [
    ("add", "A", 6),
    ("add", "B", 3),
    ("add", "D", 5),
    ("fork", "A", "C"),
    ("free", "B"),
    ("free", "D"),
    ("append", "C", 1),
]


def _yours_or_reference(exercise_id: str, probe):
    """Your workspace file if `probe(module)` runs, else the reference solution."""
    from course import curriculum, workspace

    ex = curriculum.find(exercise_id)
    mine = workspace.find(ex) or ex.path("stub")
    for path, who in ((mine, f"yours ({mine.name})"), (ex.path("solution"), "the reference")):
        if not path.is_file():  # a student build has no solutions
            continue
        try:
            module = load_module(exercise_id, path)
            probe(module)
            return module, who
        except NotImplementedError:
            continue
        except Exception as e:  # noqa: BLE001 - a half-written file: say so, use the reference
            print(
                f"your {exercise_id} raised {type(e).__name__}: {e}; using the reference solution"
            )
    raise NeedsExercise(
        f"this demo runs exercise {exercise_id}'s code: finish {mine.name} first "
        "(this build has no reference solutions)"
    )


def manager_snapshots(m=None):
    """SCRIPT's snapshots on `m` (pagedsim's own KVCacheManager unless another is given)."""
    m = KVCacheManager(8, BLOCK_SIZE) if m is None else m
    calls = {"add": m.add_sequence, "append": m.append_tokens, "fork": m.fork}
    for op, seq, *rest in SCRIPT:
        calls.get(op, m.free_sequence)(seq, *rest)  # "free" is the rest
    return m.trace.snapshots


def compare(yours, reference) -> list[str]:
    """One line per step where your pool differs from the manager: which step, which blocks."""
    out = []
    for a, b in zip(yours, reference, strict=False):  # a half-done run may stop early
        what = []
        if a.free_list != b.free_list:
            pairs = zip(a.free_list + (None,), b.free_list + (None,), strict=False)
            first = next(i for i, (x, y) in enumerate(pairs) if x != y)
            what.append(
                f"free list {list(a.free_list)} vs the manager's {list(b.free_list)} "
                f"(first difference at position {first})"
            )
        counts = enumerate(zip(a.ref_counts, b.ref_counts, strict=False))
        what += [
            f"block {blk} has count {x}, the manager's {y}" for blk, (x, y) in counts if x != y
        ]
        if what:
            out.append(f"step {a.step} ({caption(b, lang())}): " + "; ".join(what))
    return out


# the requests of the scheduler walk: (name, prompt token ids, max_tokens); B's first full
# block is A's, so the prefix cache serves it once A has computed it
WALK = (("A", (1, 2, 3, 4, 5, 6), 4), ("B", (1, 2, 3, 4, 9), 2))
WALK_BLOCKS, WALK_BUDGET = 8, 6  # num_gpu_blocks, max_num_batched_tokens


class WalkStep(NamedTuple):
    """One step of the walk, by request name."""

    scheduled: dict[str, int]  # num_scheduled_tokens
    new: dict[str, tuple[int, tuple[int, ...]]]  # admitted: (num_computed_tokens, block ids)
    tables: dict[str, tuple[int, ...]]  # each scheduled request's blocks after schedule()
    sampled: tuple[str, ...]  # the requests that caught up and sampled a token
    finished: tuple[str, ...]
    free_queue: tuple[int, ...]  # after update_from_output, head first


def schedule_walk() -> list[WalkStep]:
    """The same flow driven as `generate` drives it (vLLM v1): requests enter with
    `add_request`, and each step is `schedule()` -> the model -> `update_from_output()`.
    `PagedEngine.step` runs this loop on this SchedulerV1 with a real model, and
    tests/vllm_oracle/test_lesson_3_6.py runs WALK through vLLM's own Scheduler to the same
    steps; here the model's token is 100 + the step number."""
    manager = PrefixCachingManager(WALK_BLOCKS, BLOCK_SIZE)
    config = SchedulerConfig(max_num_batched_tokens=WALK_BUDGET, max_num_seqs=4)
    sched = SchedulerV1([], manager, config)
    names = {sched.add_request(list(prompt), max_tokens=n): name for name, prompt, n in WALK}
    steps = []
    while not sched.done:
        out = sched.schedule()
        sampled = {rid: 100 + sched.now for rid in sched.sampling_req_ids(out)}  # the model
        tables = {names[r]: sched.block_ids(r) for r in out.num_scheduled_tokens}
        done = sched.update_from_output(out, sampled)
        steps.append(
            WalkStep(
                {names[r]: n for r, n in out.num_scheduled_tokens.items()},
                {
                    names[r.req_id]: (r.num_computed_tokens, r.block_ids)
                    for r in out.scheduled_new_reqs
                },
                tables,
                tuple(names[r] for r in sampled),
                tuple(names[r] for r in done),
                tuple(manager.pool.free_list()),
            )
        )
    return steps


def walk_lines(steps: list[WalkStep]) -> list[str]:
    """One line per step of `schedule_walk`."""
    lines = []
    for k, step in enumerate(steps, 1):
        what = []
        for name, n in step.scheduled.items():
            if name in step.new:
                hit, blocks = step.new[name]
                cached = f", {hit} tokens from the prefix cache" if hit else ""
                what.append(f"{name} +{n} (new: blocks {list(blocks)}{cached})")
            else:
                what.append(f"{name} +{n} (blocks {list(step.tables[name])})")
        ends = f"; finished {', '.join(step.finished)}" if step.finished else ""
        lines.append(
            f"schedule() #{k}: {', '.join(what)}; sampled {', '.join(step.sampled) or 'none'}"
            f"{ends}; free queue {list(step.free_queue)}"
        )
    return lines


def demo(out_dir) -> None:
    import matplotlib.pyplot as plt

    pool_mod, who_pool = _yours_or_reference("3.4a", lambda m: m.FreeListPool(2).allocate())
    cow_mod, who_cow = _yours_or_reference("3.4b", lambda m: m.fork(BlockPool(2, BLOCK_SIZE), []))

    def probe_draw(m):
        fig, ax = m.new_axes(manager_snapshots()[1])
        try:
            m.draw_flow(manager_snapshots()[1], ax)
        finally:
            plt.close(fig)

    draw_mod, who_draw = _yours_or_reference("3.6", probe_draw)
    print(
        f"pool: {who_pool} (3.4a); fork and copy-on-write: {who_cow} (3.4b); draw_flow: "
        f"{who_draw} (3.6)"
    )
    try:
        snaps = manager_snapshots(Workspace(pool_mod, cow_mod).manager(8, BLOCK_SIZE))
    except Exception as e:  # a half-finished exercise: say so and draw the reference run instead
        print(
            f"your pool or copy-on-write raised {type(e).__name__}: {e} -- run `pagedsim check "
            "3.4a` and `pagedsim check 3.4b`; drawing pagedsim's manager's run instead"
        )
        snaps = manager_snapshots()
    differences = compare(snaps, manager_snapshots())
    if not differences:
        print("the pool's free list and counts match pagedsim's manager at every step")
    for line in differences:
        print(f"DIFFERENT {line}")
    if differences:
        print("  -> `pagedsim check 3.4a` and `pagedsim check 3.4b` say which rule the code breaks")
    paths = draw_mod.draw_trace(snaps, out_dir)
    print(f"{len(paths)} pictures: {paths[0].parent}/step-00.png ... {paths[-1].name}")
    for snap in snaps:
        print(f"  step {snap.step}: {caption(snap, lang())}; free list {list(snap.free_list)}")
    print(
        "look at: the arrows of A and C both reach block 0 (count 2); C's last entry is its "
        "private copy (v0 copy-on-write)."
    )
    print(
        say(
            "the same pool under vLLM v1's scheduler, as `generate` runs it (no fork, no copy):",
            "同一个块池在 vLLM v1 调度器下的运行，与 `generate` 相同（没有 fork，也没有复制）：",
        )
    )
    for line in walk_lines(schedule_walk()):
        print(f"  {line}")
    if differences:
        verdict(
            f"your run differs from pagedsim's manager at {len(differences)} point(s): the "
            "pictures show where, and the checks of 3.4a and 3.4b say which rule is broken",
            f"你的运行与 pagedsim 的管理器有 {len(differences)} 处不同：图里能看到在哪"
            f"里，3.4a 和 3.4b 的检查会指出违反了哪条规则",
        )
    else:
        verdict(
            f"all {len(snaps)} steps match pagedsim's manager, so the {len(paths)} pictures show "
            "the real free list and counts: sharing is visible as two arrows into one block with "
            "count 2",
            f"全部 {len(snaps)} 步都与 pagedsim 的管理器一致，所以这 {len(paths)} 张图显示的是真实"
            "的空闲链表和计数：共享就是两支箭头指向计数为 2 的同一个块",
        )
