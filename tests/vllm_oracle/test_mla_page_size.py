"""`pagedsim capacity`'s page size against vLLM's own KV-cache specs: MLAAttentionSpec for
a multi-head latent attention model (one latent of kv_lora_rank + qk_rope_head_dim values
per token, vllm/model_executor/layers/attention/mla_attention.py's head_size, no V) and
FullAttentionSpec for grouped-query attention."""

from tests.vllm_oracle.sides import needs_vllm  # noqa: E402

needs_vllm()

import pytest  # noqa: E402

from pagedsim.app import capacity  # noqa: E402

DTYPES = {"bfloat16": "bfloat16", "fp8": "float8_e4m3fn"}  # --kv-cache-dtype -> torch's


def ours(model: str, block_size: int, kv_cache_dtype: str) -> dict:
    argv = ["--model", model, "--kv-cache-memory-bytes", "8GiB", "--block-size", str(block_size)]
    return capacity.plan(capacity.parser().parse_args([*argv, "--kv-cache-dtype", kv_cache_dtype]))


@pytest.mark.parametrize("block_size", [1, 16, 64])
@pytest.mark.parametrize("kv_cache_dtype", ["bfloat16", "fp8"])
def test_an_mla_block_is_vllms_mla_page(vllm, block_size, kv_cache_dtype):
    spec_types = vllm.mods["vllm.v1.kv_cache_interface"]
    torch = vllm.mods["torch"]
    r = ours("deepseek-v2-lite", block_size, kv_cache_dtype)
    theirs = spec_types.MLAAttentionSpec(
        block_size=block_size,
        num_kv_heads=1,  # vLLM's ModelConfig.get_num_kv_heads: 1 under MLA
        head_size=r["kv_lora_rank"] + r["qk_rope_head_dim"],
        dtype=getattr(torch, DTYPES[kv_cache_dtype]),
    )
    assert r["page_size_bytes"] == theirs.page_size_bytes
    # and it is not the page per-head K and V would take
    full = spec_types.FullAttentionSpec(
        block_size=block_size, num_kv_heads=16, head_size=128, dtype=theirs.dtype
    )
    assert r["page_size_bytes"] < full.page_size_bytes


@pytest.mark.parametrize("model", ["llama-3-8b", "gemma-2-9b", "llama-2-7b"])
def test_a_grouped_query_block_is_vllms_full_attention_page(vllm, model):
    spec_types = vllm.mods["vllm.v1.kv_cache_interface"]
    r = ours(model, 16, "bfloat16")
    theirs = spec_types.FullAttentionSpec(
        block_size=16,
        num_kv_heads=r["num_kv_heads"],
        head_size=r["head_dim"],
        dtype=vllm.mods["torch"].bfloat16,
    )
    assert r["page_size_bytes"] == theirs.page_size_bytes
