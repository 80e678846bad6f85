"""Lesson 3.4: allocating and freeing blocks -- the free list and reference counts.

Mechanisms and versions: the plain pool's free list is a stack of ids, as vLLM v0's block
allocator keeps it; the prefix cache's is vLLM v1's FreeKVCacheBlockQueue; fork and
copy-on-write are vLLM v0 (BlockSpaceManager); sharing through the prefix cache, with a
hit capped at num_tokens - 1, is v1 (pagedsim.policies.prefix_cache).
"""

from __future__ import annotations

from course.ch03_kv_block.lessons import verdict
from course.i18n import lang
from pagedsim import BlockError, BlockPool, KVCacheManager
from pagedsim.policies.prefix_cache import PrefixCachingManager
from pagedsim.text.captions import caption

NAME_MAP = [
    ("BlockPool.allocate()", "v0: pop from the block allocator's free ids"),
    ("LinkedBlockPool.allocate()", "FreeKVCacheBlockQueue.popleft()"),
    ("LinkedBlockPool.take(b)", "FreeKVCacheBlockQueue.remove(block)"),
    ("BlockPool.ref_count(b)", "KVCacheBlock.ref_cnt"),
    ("PrefixCachingManager.get_computed_blocks", "KVCacheManager.get_computed_blocks"),
    ("PrefixCachingManager.allocate_slots", "KVCacheManager.allocate_slots"),
]


def _v0_fork_demo() -> dict:
    m = KVCacheManager(6, 4)
    m.add_sequence("A", 6)
    m.fork("A", "B")
    m.append_tokens("B", 1)  # block 1 is shared and only half full: copy-on-write
    m.free_sequence("A")
    for snap in m.trace.snapshots:
        counts = {b: c for b, c in enumerate(snap.ref_counts) if c}
        print(f"step {snap.step}: {caption(snap, lang())}")
        print(f"         free list {list(snap.free_list)}  counts {counts}")
    copies = m.drain_copies()
    print(f"copy-on-write pairs for copy_blocks: {copies}")
    pool = BlockPool(2, 4)
    b = pool.allocate()
    pool.free(b)
    refused = False
    try:
        pool.free(b)
    except BlockError as e:
        refused = True
        print(f"a double free is refused: BlockError: {e}")
    return {"copies": copies, "refused": refused}


def _v1_cache_demo() -> dict:
    m = PrefixCachingManager(8, 16)
    prompt = list(range(1000, 1032))  # 32 tokens: exactly two full blocks of 16
    for seq in ("A", "B"):
        before = (m.stats.hit_tokens, m.stats.prompt_tokens)
        computed = m.get_computed_blocks(prompt)
        new = m.allocate_slots(
            seq, len(prompt) - computed.num_tokens, new_token_ids=prompt, computed=computed
        )
        hit, looked_up = m.stats.hit_tokens - before[0], m.stats.prompt_tokens - before[1]
        print(
            f"request {seq}: block table {m.block_table(seq).blocks}, cached blocks reused "
            f"{list(computed.blocks)}, new blocks {new}; hit_tokens/prompt_tokens = "
            f"{hit}/{looked_up}"
        )
    counts = {
        b: m.pool.ref_count(b)
        for b in sorted(set(m.block_table("A").blocks + m.block_table("B").blocks))
    }
    print(
        f"reference counts {counts}: block 0 is shared (count 2). Block 1 is full and cached too, "
        "but B's hit is capped at n - 1 = 31 tokens, which holds one full block, so B computes "
        "its last 16 tokens again, into block 2"
    )
    return {"shared": sorted(b for b, c in counts.items() if c > 1)}


# The side-by-side run below, recorded with vllm==0.34.0 (printed where vLLM is missing).
RECORDED_VLLM_RUN = """\
A takes a 10-token prompt      vLLM [3, 4, 5, 6, 7]           pagedsim [3, 4, 5, 6, 7]
B shares A's first 8 tokens    vLLM [4, 5, 6, 7]              pagedsim [4, 5, 6, 7]
A finishes                     vLLM [2, 4, 5, 6, 7]           pagedsim [2, 4, 5, 6, 7]
B finishes                     vLLM [3, 2, 4, 5, 6, 7, 1, 0]  pagedsim [3, 2, 4, 5, 6, 7, 1, 0]"""
HOW_TO_VLLM = (
    "to run it with vLLM itself: scripts/vllm_oracle_env (in the repository; it makes .venv-vllm "
    "with vllm==0.34.0 and a CPU torch), then .venv-vllm/bin/python -m pagedsim lesson 3.4"
)
STEPS = ("A takes a 10-token prompt", "B shares A's first 8 tokens", "A finishes", "B finishes")


def _vllm_manager(num_gpu_blocks: int, block_size: int):
    """vLLM v1's own KVCacheManager, and a function that makes its requests."""
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.core.kv_cache_manager import KVCacheManager as VllmManager
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request

    kv_cache_utils.init_none_hash(sha256)
    spec = FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    config = KVCacheConfig(num_gpu_blocks + 1, [], [KVCacheGroupSpec(["layer"], spec)])
    manager = VllmManager(config, 256, scheduler_block_size=block_size, hash_block_size=block_size)
    hasher = kv_cache_utils.get_request_block_hasher(block_size, sha256)

    def request(rid: str, tokens: list[int]):
        return Request(rid, tokens, SamplingParams(max_tokens=8), None, block_hasher=hasher)

    return manager, request


PROMPTS = {"A": list(range(100, 110)), "B": list(range(100, 108)) + [7, 8, 9]}


def _ours_queues() -> list[list[int]]:
    """pagedsim's free queue, head first, after each of STEPS."""
    ours, out = PrefixCachingManager(8, 4), []
    for rid in ("A", "B"):
        computed = ours.get_computed_blocks(PROMPTS[rid])
        n = len(PROMPTS[rid]) - computed.num_tokens
        ours.allocate_slots(rid, n, new_token_ids=PROMPTS[rid], computed=computed)
        out.append(ours.pool.free_list())
    for rid in ("A", "B"):
        ours.free_sequence(rid)
        out.append(ours.pool.free_list())
    return out


def _vllm_queues() -> list[list[int]]:
    """vLLM's free queue after each of STEPS, as pagedsim ids (vLLM's b is our b - 1)."""
    theirs, request = _vllm_manager(8, 4)
    reqs, out = {}, []

    def queue() -> list[int]:
        return [b.block_id - 1 for b in theirs.block_pool.free_block_queue.get_all_free_blocks()]

    for rid in ("A", "B"):
        reqs[rid] = req = request(rid, PROMPTS[rid])
        hit, n = theirs.get_computed_blocks(req)[:2]
        theirs.allocate_slots(req, len(PROMPTS[rid]) - n, n, hit)
        req.num_computed_tokens = len(PROMPTS[rid])
        out.append(queue())
    for rid in ("A", "B"):
        theirs.free(reqs[rid])
        out.append(queue())
    return out


def _vllm_section() -> bool:
    """Print the side-by-side run: live where vLLM imports, else the recorded one."""
    import importlib.util

    print(
        "\nthe same blocks in vLLM's own code (vLLM v1 KVCacheManager vs pagedsim), "
        "free queues head first:"
    )
    if importlib.util.find_spec("vllm") is None:
        print(RECORDED_VLLM_RUN)
        print(f"(recorded with vllm==0.34.0; vLLM is not installed here: {HOW_TO_VLLM})")
        return True
    print("(importing vLLM: about 7 s)")
    rows = list(zip(_vllm_queues(), _ours_queues(), strict=True))
    for what, (theirs, ours) in zip(STEPS, rows, strict=True):
        print(f"{what:<30} vLLM {str(theirs):<25} pagedsim {ours}")
    return all(theirs == ours for theirs, ours in rows)


def demo(out_dir) -> None:
    print("v0: fork and copy-on-write")
    v0 = _v0_fork_demo()
    print("\nv1: no fork; two requests share a full prompt block through the prefix cache")
    v1 = _v1_cache_demo()
    print(
        "\nnames here -> vLLM v1 (the full map is in the project's docs: docs/vllm-name-map.md "
        "in the repository):"
    )
    for ours, theirs in NAME_MAP:
        print(f"  {ours:<42} {theirs}")
    print(
        "look at: the counts after the fork (2 on both of A's blocks), the one copy-on-write "
        "pair when B writes into the half-full shared block, and the v1 counts (block 0 shared "
        "without any fork)."
    )
    same = _vllm_section()
    v0_ok = len(v0["copies"]) == 1 and v0["refused"] and same
    verdict(
        (
            f"v0 shared both blocks at the fork and copied exactly {len(v0['copies'])} (the "
            "half-full one B wrote into), a double free was refused, and v1 shared block(s) "
            f"{v1['shared']} through the prefix cache: counts, not copies, make sharing cheap"
        )
        if v0_ok
        else f"expected one copy-on-write pair and a refused double free, got {v0['copies']} and "
        f"refused={v0['refused']}",
        (
            f"v0 在 fork 时共享了两个 Block，只复制了 {len(v0['copies'])} 个（B 写入的那个半满 "
            f"Block），重复释放被拒绝，v1 通过前缀缓存共享了 Block {v1['shared']}：让共享变便宜"
            f"的是计数，而不是复制"
        )
        if v0_ok
        else f"应有一对 copy-on-write 和一次被拒绝的重复释放，实际是 {v0['copies']} 和 "
        f"refused={v0['refused']}",
    )
