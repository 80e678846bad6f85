"""Bytes per block and token, presets, aligned blocks in a budget (3.2, 3.7), KV capacity."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedsim.sizing import ModelSpec, align_up, fit_blocks, kv_capacity, padding_to, preset


def test_the_chapters_16_token_block_is_8_mib():
    spec = preset("chapter3")
    # 16 tokens x 32 layers x 2 (K, V) x 32 heads x 128 dims x 2 bytes
    assert spec.bytes_per_block(16) == 16 * 32 * 2 * 32 * 128 * 2 == 8_388_608


def test_opt_13b_needs_about_800_kb_per_token():
    per_token = preset("opt-13b").bytes_per_token()
    assert per_token == 2 * 40 * 40 * 128 * 2
    assert 780_000 <= per_token <= 840_000


def test_gqa_shrinks_the_block_by_the_group_size():
    assert preset("llama-2-7b").bytes_per_block(16) == 4 * preset("llama-3-8b").bytes_per_block(16)


def test_align_up_rounds_up_to_the_boundary():
    assert [align_up(n) for n in (0, 1, 127, 128, 129)] == [0, 128, 128, 128, 256]
    with pytest.raises(ValueError, match="power of two"):
        align_up(10, 96)


def test_fit_blocks_reports_count_and_padding():
    fit = fit_blocks(10_000, 1000)  # stride 1024: 9 blocks, 24 bytes of padding each
    assert (fit.num_gpu_blocks, fit.stride_bytes, fit.padding_bytes) == (9, 1024, 9 * 24)
    assert fit.unused_bytes == 10_000 - 9 * 1024
    assert fit_blocks(10_000, 1024).padding_bytes == 0


def test_a_model_spec_rejects_nonsense():
    with pytest.raises(ValueError):
        ModelSpec("x", num_layers=0, num_kv_heads=1, head_dim=1)
    with pytest.raises(ValueError, match="multiple"):
        ModelSpec("x", num_layers=1, num_kv_heads=3, head_dim=1, num_heads=4)
    with pytest.raises(ValueError, match="unknown model preset"):
        preset("gpt-9")


# ---- kv_capacity: vLLM v1's startup arithmetic (vllm/v1/core/kv_cache_utils.py) ----------------


def test_kv_capacity_of_llama_3_8b_in_16_gib_worked_by_hand():
    cap = kv_capacity(preset("llama-3-8b"), 16, 16 * 2**30, 8192)
    # page: 2 x 16 x 8 x 128 x 2 = 65,536 B; 2**34 // 65,536 = 262,144 // 32 layers = 8,192
    assert (cap.page_size_bytes, cap.bytes_per_block, cap.num_gpu_blocks) == (
        65_536,
        2_097_152,
        8_192,
    )
    assert (cap.num_tokens, cap.blocks_per_request, cap.max_concurrency) == (131_072, 512, 16.0)


@given(
    st.integers(1, 2**44),
    st.integers(1, 128),
    st.integers(1, 64),
    st.integers(1, 256),
    st.integers(1, 4),
    st.sampled_from([1, 8, 16, 32, 128]),
    st.integers(1, 2**20),
)
def test_kv_capacity_is_vllms_two_step_division(
    available, layers, kv_heads, head_dim, dtype, block_size, max_len
):
    spec = ModelSpec(
        "m", num_layers=layers, num_kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=dtype
    )
    cap = kv_capacity(spec, block_size, available, max_len)
    page = 2 * block_size * kv_heads * head_dim * dtype  # vLLM's FullAttentionSpec.page_size_bytes
    assert cap.num_gpu_blocks == int(available // page // layers)  # get_num_blocks
    assert cap.num_gpu_blocks == available // spec.bytes_per_block(block_size)  # the same, once
    used = cap.num_gpu_blocks * cap.bytes_per_block
    assert used <= available < used + cap.bytes_per_block
    assert cap.num_tokens == cap.num_gpu_blocks * block_size
    assert cap.max_concurrency == cap.num_gpu_blocks / -(-max_len // block_size)


def test_kv_capacity_refuses_nonsense_naming_the_argument():
    for args, name in (
        ((0, 10, 10), "block_size"),
        ((16, -1, 10), "available_bytes"),
        ((16, 10, 0), "max_model_len"),
    ):
        with pytest.raises(ValueError, match=name):
            kv_capacity(preset("llama-3-8b"), *args)
    with pytest.raises(TypeError, match="block_size"):
        kv_capacity(preset("llama-3-8b"), 16.0, 10, 10)


@given(st.integers(0, 2**40), st.integers(0, 12))
def test_padding_to_is_the_least_addition_reaching_a_multiple(n, log2):
    a = 2**log2
    pad = padding_to(n, a)
    assert 0 <= pad < a and (n + pad) % a == 0 and align_up(n, a) == n + pad


def test_the_library_does_not_ship_exercise_3_7s_answer_verbatim():
    root = Path(__file__).resolve().parents[2]
    solution = (root / "course/ch03_kv_block/solutions/ex3_7_align_and_pop.py").read_text()
    body = solution.split("def align_up", 1)[1].split("@cuda.jit", 1)[0]
    answer = [
        ln.strip()
        for ln in body.splitlines()
        if ln.strip() and not ln.strip().startswith(("def ", '"""', "#"))
    ]
    assert answer  # the solution's code lines: the align_up expression, the stride, the starts
    library = (root / "pagedsim/sizing.py").read_text()
    assert [ln for ln in answer if ln in library] == []
