"""Bytes per block and per token, presets, and fitting aligned blocks into a budget (3.2, 3.7)."""

import pytest

from pagedsim.sizing import ModelSpec, align_up, fit_blocks, preset


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
    assert (fit.num_blocks, fit.stride_bytes, fit.padding_bytes) == (9, 1024, 9 * 24)
    assert fit.unused_bytes == 10_000 - 9 * 1024
    assert fit_blocks(10_000, 1024).padding_bytes == 0


def test_a_model_spec_rejects_nonsense():
    with pytest.raises(ValueError):
        ModelSpec("x", num_layers=0, num_kv_heads=1, head_dim=1)
    with pytest.raises(ValueError, match="multiple"):
        ModelSpec("x", num_layers=1, num_kv_heads=3, head_dim=1, num_heads=4)
    with pytest.raises(ValueError, match="unknown model preset"):
        preset("gpt-9")
