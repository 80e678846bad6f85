"""What the oracle machines share: vLLM's side, built once, and the comparisons.

vLLM's pool holds one block more than pagedsim's: its block 0 is the null block, never
handed out. So vLLM block id `v` is pagedsim block id `v - 1` throughout (`P`).

Hashes differ by design (vLLM hashes with sha256 over bytes; pagedsim chains Python ints),
so every comparison of a hash goes through `HashMap`: the first time a vLLM hash meets a
pagedsim hash they are paired, and from then on each must always meet its partner (the
map stays one-to-one), which is as strong as comparing values would be.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import types
from collections.abc import Sequence
from typing import Any, NamedTuple

import pytest

HOW = (
    "vLLM is not importable: make the oracle tier's venv with scripts/vllm_oracle_env, "
    "then run .venv-vllm/bin/python -m pytest tests/vllm_oracle"
)


def needs_vllm() -> None:
    """Skip the calling test module unless vLLM is importable (tests/vllm_oracle/conftest.py)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip(HOW, allow_module_level=True)


def load_vllm() -> types.SimpleNamespace:
    """Import the vLLM pieces the machines drive (about 7 s, once per test run)."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # the Scheduler needs a platform
    os.environ.setdefault("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "1")
    mods = {
        name: importlib.import_module(name)
        for name in (
            "vllm",
            "torch",
            "vllm.v1.core.block_pool",
            "vllm.v1.core.kv_cache_manager",
            "vllm.v1.core.kv_cache_utils",
            "vllm.v1.kv_cache_interface",
            "vllm.v1.request",
            "vllm.v1.outputs",
            "vllm.sampling_params",
            "vllm.utils.hashing",
            "vllm.distributed.kv_events",
        )
    }
    utils = mods["vllm.v1.core.kv_cache_utils"]
    utils.init_none_hash(mods["vllm.utils.hashing"].sha256)
    ns = types.SimpleNamespace(version=mods["vllm"].__version__, mods=mods)
    ns.BlockPool = mods["vllm.v1.core.block_pool"].BlockPool
    ns.KVCacheManager = mods["vllm.v1.core.kv_cache_manager"].KVCacheManager
    ns.Request = mods["vllm.v1.request"].Request
    ns.ModelRunnerOutput = mods["vllm.v1.outputs"].ModelRunnerOutput
    ns.SamplingParams = mods["vllm.sampling_params"].SamplingParams
    ns.sha256 = mods["vllm.utils.hashing"].sha256
    ns.utils = utils
    ns.spec = mods["vllm.v1.kv_cache_interface"]
    ns.events = mods["vllm.distributed.kv_events"]
    ns.float32 = mods["torch"].float32
    return ns


def P(v: int) -> int:
    """pagedsim's id for vLLM block id v (vLLM's block 0 is its null block)."""
    return v - 1


def vllm_request(
    vllm: Any, request_id: str, tokens: Sequence[int], block_size: int, **kw: Any
) -> Any:
    """A vLLM v1 Request hashing its full blocks as they fill, as the engine core makes."""
    hasher = vllm.utils.get_request_block_hasher(block_size, vllm.sha256)
    params = vllm.SamplingParams(max_tokens=kw.pop("max_tokens", 10_000))
    return vllm.Request(request_id, list(tokens), params, None, block_hasher=hasher, **kw)


def external(vllm: Any, block_hash: Any) -> int:
    """A block's hash as vLLM's KV events carry it (an unsigned 64-bit int)."""
    return int(vllm.utils.maybe_convert_block_hash(vllm.utils.get_block_hash(block_hash)))


class HashMap:
    """vLLM hash -> pagedsim hash, kept one-to-one (module doc)."""

    def __init__(self) -> None:
        self.fwd: dict[Any, Any] = {}
        self.back: dict[Any, Any] = {}

    def same(self, theirs: Any, ours: Any, what: str = "hash") -> None:
        if theirs is None or ours is None:
            assert theirs is None and ours is None, f"{what}: vLLM {theirs} vs pagedsim {ours}"
            return
        want = self.fwd.setdefault(theirs, ours)
        assert want == ours, f"{what}: vLLM hash {theirs} was pagedsim {want}, now {ours}"
        back = self.back.setdefault(ours, theirs)
        assert back == theirs, f"{what}: pagedsim hash {ours} was vLLM {back}, now {theirs}"


def vllm_free_list(pool: Any) -> list[int]:
    """vLLM's whole free queue, head first, as pagedsim ids."""
    return [P(b.block_id) for b in pool.free_block_queue.get_all_free_blocks()]


def compare_events(theirs: list[Any], ours: list[Any], hashes: HashMap, kinds: Any = None) -> None:
    """The KV events of one step, in order: type, hashes (through the map), parents, token
    ids, block size, group and medium. `kinds` keeps only events of those type names."""
    if kinds is not None:
        theirs = [e for e in theirs if type(e).__name__ in kinds]
        ours = [e for e in ours if type(e).__name__ in kinds]
    names = [type(e).__name__ for e in theirs], [type(e).__name__ for e in ours]
    assert names[0] == names[1], f"events: vLLM {names[0]} vs pagedsim {names[1]}"
    for a, b in zip(theirs, ours, strict=True):
        if type(a).__name__ == "AllBlocksCleared":
            continue
        assert len(a.block_hashes) == len(b.block_hashes), f"event hashes: {a} vs {b}"
        for x, y in zip(a.block_hashes, b.block_hashes, strict=True):
            hashes.same(x, y, f"{type(a).__name__} hash")
        assert (a.medium, a.group_idx) == (b.medium, b.group_idx), f"event: {a} vs {b}"
        if type(a).__name__ == "BlockStored":
            hashes.same(a.parent_block_hash, b.parent_block_hash, "parent_block_hash")
            assert list(a.token_ids) == list(b.token_ids), f"token_ids: {a} vs {b}"
            assert (a.block_size, a.lora_id) == (b.block_size, b.lora_id), f"{a} vs {b}"


STEPS_AGREED: dict[str, int] = {}  # machine name -> steps after which both sides agreed


def agreed(machine: object) -> None:
    """Count one step on which the two sides agreed (the tier's summary prints the counts)."""
    name = type(machine).__name__
    STEPS_AGREED[name] = STEPS_AGREED.get(name, 0) + 1


# A 12-key Llama config.json: vLLM's ModelConfig reads it from a local directory instead of
# the hub (its tokenizer is skipped), the first of the Scheduler's three workarounds.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 1,
    "vocab_size": 256,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "torch_dtype": "float32",
}


class SchedulerArgs(NamedTuple):
    num_gpu_blocks: int  # vLLM's pool, its null block included
    block_size: int
    max_num_batched_tokens: int  # the token budget of a step
    max_num_seqs: int
    policy: str  # "fcfs" or "priority"
    max_model_len: int
    long_prefill_token_threshold: int = 0  # 0: no cap on one request's prefill chunk
    enable_prefix_caching: bool = True
    num_lookahead_tokens: int = 0  # slots reserved past each request's tokens
    # one KV cache group per entry: "full" attention or a "window" of sliding_window tokens
    kv_cache_groups: tuple[str, ...] = ("full",)
    sliding_window: int = 0


def vllm_scheduler(vllm: Any, model_dir: str, args: SchedulerArgs) -> Any:
    """vLLM's v1 Scheduler, built as upstream tests/v1/core/utils.py's create_scheduler does,
    with the three workarounds of a CPU machine: the local config.json, VLLM_TARGET_DEVICE=cpu
    (load_vllm) and vllm.triton_utils.HAS_TRITON = True before the config is built."""
    config = importlib.import_module("vllm.config")
    importlib.import_module("vllm.triton_utils").HAS_TRITON = True
    sched = importlib.import_module("vllm.v1.core.sched.scheduler")
    structured = importlib.import_module("vllm.v1.structured_output")
    vllm_config = config.VllmConfig(
        scheduler_config=config.SchedulerConfig(
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_model_len=args.max_model_len,
            enable_chunked_prefill=True,
            policy=args.policy,
            long_prefill_token_threshold=args.long_prefill_token_threshold,
            is_encoder_decoder=False,
            async_scheduling=False,
            # 0.34's default (True) admits a request only if its whole prompt fits; pagedsim's
            # SchedulerV1 admits on its first chunk, as v1 did before (docs/vllm-name-map.md)
            scheduler_reserve_full_isl=False,
        ),
        model_config=config.ModelConfig(
            model=model_dir, skip_tokenizer_init=True, max_model_len=args.max_model_len
        ),
        cache_config=config.CacheConfig(
            block_size=args.block_size,
            cache_dtype="auto",
            enable_prefix_caching=args.enable_prefix_caching,
        ),
    )
    spec = vllm.spec
    shape = dict(block_size=args.block_size, num_kv_heads=1, head_size=1, dtype=vllm.float32)
    kv_cache_config = spec.KVCacheConfig(
        num_blocks=args.num_gpu_blocks,  # vLLM v1 KVCacheConfig's own name
        kv_cache_tensors=[],
        kv_cache_groups=[
            spec.KVCacheGroupSpec(
                [f"layer{i}"],
                spec.FullAttentionSpec(**shape)
                if kind == "full"
                else spec.SlidingWindowSpec(sliding_window=args.sliding_window, **shape),
            )
            for i, kind in enumerate(args.kv_cache_groups)
        ],
    )
    vllm_config.cache_config.num_gpu_blocks = args.num_gpu_blocks
    scheduler = sched.Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=structured.StructuredOutputManager(vllm_config),
        block_size=args.block_size,
        log_stats=False,
    )
    # vLLM takes lookahead slots from a speculative config (a drafter); the scheduler reads
    # only this field to reserve them in allocate_slots, so it is set directly
    scheduler.num_lookahead_tokens = args.num_lookahead_tokens
    return scheduler
