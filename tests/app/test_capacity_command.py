"""`pagedsim capacity` against hand computations, written out here, and refusing bad input.

Every expected number below is worked by hand from vLLM v1's formulas
(vllm/v1/core/kv_cache_utils.py): page_size_bytes = 2 * B * kv_heads * head_dim * dtype,
num_gpu_blocks = available // page_size_bytes // layers, tokens = num_gpu_blocks * B,
concurrency = num_gpu_blocks / ceil(max_model_len / B).
"""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedsim.app import capacity, cli


def run(capsys, *argv):
    try:
        rc = cli.main(["capacity", *argv])
    except SystemExit as e:  # a usage error: what the process would exit with
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def numbers(capsys, *argv):
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def test_llama_3_8b_in_16_gib_of_kv_cache(capsys):
    r = numbers(capsys, "--model", "llama-3-8b", "--kv-cache-memory-bytes", "16GiB")
    # per token: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B
    assert r["bytes_per_token"] == 131_072
    # one layer's block: 2 x 16 tokens x 8 x 128 x 2 B = 65,536 B; all 32 layers: 2 MiB
    assert (r["page_size_bytes"], r["bytes_per_block"]) == (65_536, 2_097_152)
    # 17,179,869,184 B // 65,536 = 262,144 // 32 layers = 8,192 blocks = 131,072 tokens
    assert (r["num_gpu_blocks"], r["num_tokens"]) == (8_192, 131_072)
    # max_model_len 8,192 (the config's) = 512 blocks a request: 8,192 / 512 = 16x
    assert r["max_model_len"] == 8_192 and r["max_concurrency"] == 16.0


def test_mistral_7b_on_an_a100_80gb_with_estimated_weights(capsys):
    r = numbers(capsys, "--model", "mistral-7b", "--gpu", "A100-80GB")
    # parameters: embeddings and LM head 32,000 x 4,096 x 2 = 262,144,000; per layer
    # q,o 2 x 4,096 x 4,096 + k,v 2 x 4,096 x 1,024 = 41,943,040, MLP 3 x 4,096 x 14,336
    # = 176,160,768; 32 layers: 6,979,321,856; total 7,241,465,856 x 2 B = 14,482,931,712 B
    assert r["weights_bytes"] == 14_482_931_712 and r["weights_estimated"] is True
    # 80 GiB x 0.9 = 77,309,411,328 B; minus the weights: 62,826,479,616 B
    assert (r["requested_bytes"], r["kv_cache_memory_bytes"]) == (77_309_411_328, 62_826_479_616)
    # // 65,536 = 958,656 // 32 = 29,958 blocks = 479,328 tokens; 32,768 tokens = 2,048 blocks
    assert (r["num_gpu_blocks"], r["num_tokens"]) == (29_958, 479_328)
    assert r["max_concurrency"] == pytest.approx(29_958 / 2_048)
    assert r["sliding_window"] == 4096


def test_gemma_2_9b_uses_its_own_head_dim_and_an_fp8_cache(capsys):
    argv = (
        "--model",
        "gemma-2-9b",
        "--gpu-memory",
        "24GiB",
        "--weights-bytes",
        "18.5e9",
        "--kv-cache-dtype",
        "fp8",
    )
    r = numbers(capsys, *argv)
    # head_dim is 256 (config), not hidden 3,584 / 16 heads = 224
    # per token: 2 x 42 x 8 x 256 x 1 B = 172,032 B; page: 2 x 16 x 8 x 256 x 1 = 65,536 B
    assert (r["head_dim"], r["bytes_per_token"], r["page_size_bytes"]) == (256, 172_032, 65_536)
    # 24 GiB x 0.9 = 23,192,823,398 B - 18,500,000,000 = 4,692,823,398 // 65,536 = 71,606
    # // 42 layers = 1,704 blocks = 27,264 tokens; 8,192 tokens = 512 blocks: 3.328125x
    assert (r["kv_cache_memory_bytes"], r["num_gpu_blocks"], r["num_tokens"]) == (
        4_692_823_398,
        1_704,
        27_264,
    )
    assert r["max_concurrency"] == 1_704 / 512


def test_opt_13b_with_32_token_blocks_prints_vllms_two_log_lines(capsys):
    argv = ("--model", "opt-13b", "--kv-cache-memory-bytes", "12e9", "--block-size", "32")
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    # page: 2 x 32 x 40 heads x 128 x 2 B = 655,360 B; 12e9 // 655,360 = 18,310 // 40 = 457
    # blocks = 14,624 tokens; 2,048 tokens = 64 blocks: 457 / 64 = 7.140625
    assert "GPU KV cache size: 14,624 tokens" in out.splitlines()
    assert "Maximum concurrency for 2,048 tokens per request: 7.14x" in out.splitlines()
    assert "per token  819,200 B = 2 (K, V) x 40 layers x 40 KV heads x 128 x 2 B" in out


def test_a_local_config_json_is_read_field_by_field(tmp_path, capsys):
    cfg = dict(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=1000,
        max_position_embeddings=256,
        torch_dtype="float32",
    )
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = numbers(
        capsys,
        "--model",
        str(tmp_path),
        "--kv-cache-memory-bytes",
        "65536",
        "--block-size",
        "8",
        "--max-model-len",
        "248",
    )
    # head_dim 64 / 4 = 16; float32 is served as float16 by vLLM's auto dtype: 2 B
    # per token 2 x 2 layers x 2 KV heads x 16 x 2 B = 256 B; page 2 x 8 x 2 x 16 x 2 = 1,024 B
    # 65,536 // 1,024 = 64 // 2 layers = 32 blocks = 256 tokens; one 256-token request needs
    # 32, and with vLLM's null block 31 are usable: a 248-token max_model_len fits
    assert (r["dtype"], r["kv_cache_dtype"], r["bytes_per_token"], r["page_size_bytes"]) == (
        "float16",
        "float16",
        256,
        1024,
    )
    assert (r["num_gpu_blocks"], r["usable_blocks"], r["num_tokens"]) == (32, 31, 256)
    assert r["max_concurrency"] == 32 / 31
    # parameters: 1,000 x 64 x 2 (embeddings, untied head) = 128,000, plus 2 layers x
    # (q,o 2 x 64 x 64 = 8,192 + k,v 2 x 64 x 32 = 4,096 + MLP 3 x 64 x 128 = 24,576) = 73,728
    assert r["parameters_estimated"] == 201_728


def test_too_little_memory_for_one_request_is_refused_as_vllm_refuses_to_start(capsys):
    rc, out, err = run(capsys, "--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "1GiB")
    # 1 GiB // 65,536 // 32 = 512 blocks; 131,072 tokens need 8,192 blocks + the null block
    assert rc == 2 and out == "" and len(err.splitlines()) == 1
    assert (
        "8,193 blocks (17,181,966,336 B, the null block included) are needed, but only 512 fit"
        in err
        and "--max-model-len 8,176 or less" in err
    )


@pytest.mark.parametrize("mib, fits", [(64, False), (66, True)])
def test_the_null_block_is_reserved_so_exactly_one_requests_blocks_do_not_fit(mib, fits, capsys):
    # llama-3-8b: 2 MiB a block (all layers); 512 tokens = 32 blocks of 16, and vLLM v1 keeps
    # one block as the null block: 32 blocks (64 MiB) are one short, 33 (66 MiB) fit
    rc, out, err = run(
        capsys,
        "--model",
        "llama-3-8b",
        "--kv-cache-memory-bytes",
        f"{mib}MiB",
        "--max-model-len",
        "512",
    )
    if fits:
        assert rc == 0 and "Maximum concurrency for 512 tokens per request: 1.03x" in out
        assert "33 blocks of 16 tokens, one of them vLLM's null block (32 usable)" in out
    else:
        assert rc == 2 and "1.00x" not in out + err and "33 blocks" in err
        assert "but only 32 fit" in err


def test_the_model_dtype_and_the_kv_cache_dtype_are_vllms_two_flags(capsys):
    base = ("--model", "llama-2-7b", "--gpu", "A100-80GB")
    auto = numbers(capsys, *base)
    # llama-2-7b's checkpoint is float16: weights and KV cache 2 B an element
    assert (auto["dtype"], auto["kv_cache_dtype"], auto["kv_bytes_per_element"]) == (
        "float16",
        "float16",
        2,
    )
    wide = numbers(capsys, *base, "--dtype", "float")
    # float32 weights take twice the bytes; the KV cache follows the model's dtype (auto)
    assert (wide["dtype"], wide["kv_bytes_per_element"]) == ("float32", 4)
    assert wide["weights_bytes"] == 2 * auto["weights_bytes"]
    for name in ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"):
        fp8 = numbers(capsys, *base, "--dtype", "half", "--kv-cache-dtype", name)
        assert (fp8["kv_cache_dtype"], fp8["kv_bytes_per_element"]) == (name, 1)
        assert fp8["weights_bytes"] == auto["weights_bytes"]
        assert (
            fp8["num_gpu_blocks"]
            == 2 * auto["num_gpu_blocks"]
            + (auto["kv_cache_memory_bytes"] // (auto["bytes_per_block"] // 2)) % 2
        )
    assert numbers(capsys, *base, "--kv-cache-dtype", "bfloat16")["kv_bytes_per_element"] == 2


def test_presets_are_named_as_on_the_hub_too(capsys):
    assert capacity.load_model("meta-llama/Meta-Llama-3-8B")[0] == "llama-3-8b"
    assert capacity.load_model("Mistral-7B")[0] == "mistral-7b"
    assert numbers(capsys, "--model", "llama-3-8b", "--gpu", "h100-80gb")["gpu"] == "H100-80GB"


BAD = [
    ("--model", "gpt-9", "--gpu", "L4"),
    ("--model", "llama-3-8b", "--gpu", "Z100"),
    ("--model", "llama-3-8b"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--gpu-memory", "24GiB"),
    ("--model", "llama-3-8b", "--gpu-memory", "12XB"),
    ("--model", "llama-3-8b", "--gpu-memory", "-5"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--gpu-memory-utilization", "0"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--gpu-memory-utilization", "1.5"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--gpu-memory-utilization", "nan"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--block-size", "0"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--dtype", "int4"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--dtype", "fp8"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--kv-cache-dtype", "float32"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--kv-cache-memory", "1GiB"),
    ("--model", "llama-3-8b", "--gpu-memory", "1e400"),
    ("--model", "llama-3-8b", "--gpu-memory", "1e309"),
    ("--model", "llama-3-8b", "--kv-cache-memory-bytes", "9e999"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--weights-bytes", "1e400"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--other-bytes", "1e400"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--other-bytes", "1e99999999999999999999"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--max-model-len", "100000"),
    ("--model", "llama-3-70b", "--gpu", "L4"),
    ("--model", "llama-3-8b", "--gpu", "L4", "--weights-bytes", "1e30"),
]


@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a[2:]) or a[1])
def test_bad_arguments_exit_2_with_one_line_and_no_traceback(argv, capsys):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("pagedsim capacity: error:")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "cfg, says",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "a JSON object"),
        ("[" * 100_000, "nested too deeply"),  # was a line that named no file
        ('{"num_hidden_layers": ' + "9" * 5000 + "}", "not valid JSON"),  # and this one
        ('{"hidden_size": 64}', "no 'num_hidden_layers'"),
        (
            '{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 6, '
            '"num_key_value_heads": 4}',
            "not a multiple of num_key_value_heads",
        ),
        (
            '{"num_hidden_layers": true, "hidden_size": 64, "num_attention_heads": 4}',
            "num_hidden_layers must be a positive integer",
        ),
        ('{"num_hidden_layers": 2, "hidden_size": 60, "num_attention_heads": 8}', "no head_dim"),
        (
            '{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, '
            '"torch_dtype": "int3", "intermediate_size": 8, "vocab_size": 8}',
            "torch_dtype 'int3'",
        ),
        *[
            (
                json.dumps(
                    {
                        **dict(
                            num_hidden_layers=2,
                            hidden_size=64,
                            num_attention_heads=4,
                            intermediate_size=8,
                            vocab_size=8,
                        ),
                        key: 10**400,
                    }
                ),
                f"{key} must be a positive integer up to 2**32",
            )
            for key in (
                "vocab_size",
                "hidden_size",
                "head_dim",
                "num_hidden_layers",
                "intermediate_size",
                "max_position_embeddings",
            )
        ],
    ],
)
def test_a_broken_config_json_is_named_in_one_line(cfg, says, tmp_path, capsys):
    (tmp_path / "config.json").write_text(cfg)
    rc, out, err = run(capsys, "--model", str(tmp_path), "--kv-cache-memory-bytes", "1GiB")
    assert rc == 2 and out == "" and len(err.splitlines()) == 1
    assert says in err and str(tmp_path) in err


def test_a_huge_config_json_is_refused_by_its_size_before_a_byte_is_read(tmp_path, capsys):
    """A sparse file one byte over the checkpoint reader's cap: before the fix capacity read
    all of it (6 GiB resident for a 3 GiB file)."""
    from pagedsim.engine.hf_json import MAX_JSON_BYTES

    with open(tmp_path / "config.json", "wb") as f:
        f.truncate(MAX_JSON_BYTES + 1)
    rc, out, err = run(capsys, "--model", str(tmp_path), "--kv-cache-memory-bytes", "1GiB")
    assert rc == 2 and out == "" and len(err.splitlines()) == 1
    assert f"over {MAX_JSON_BYTES:,} bytes is refused" in err and str(tmp_path) in err


@given(
    st.one_of(
        st.text(max_size=12), st.builds("{}e{}".format, st.integers(0, 99), st.integers(0, 10**6))
    ),
    st.sampled_from(
        [
            "--gpu-memory",
            "--kv-cache-memory-bytes",
            "--max-model-len",
            "--block-size",
            "--gpu-memory-utilization",
            "--weights-bytes",
            "--other-bytes",
            "--tensor-parallel-size",
        ]
    ),
)
def test_any_text_for_a_number_is_either_used_or_refused_in_one_line(text, flag):
    import contextlib
    import io

    err, out = io.StringIO(), io.StringIO()
    argv = ["capacity", "--model", "llama-3-8b", "--gpu", "H100-80GB", f"{flag}={text}"]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = cli.main(argv)
        except SystemExit as e:
            rc = e.code
    if rc == 0:
        assert "GPU KV cache size:" in out.getvalue()
    else:
        assert rc == 2 and len(err.getvalue().splitlines()) == 1
        assert "Traceback" not in err.getvalue()


def test_a_config_with_only_the_kv_fields_is_enough_given_the_kv_memory(tmp_path, capsys):
    cfg = dict(
        hidden_size=5120,
        num_attention_heads=40,
        num_key_value_heads=8,
        head_dim=128,
        num_hidden_layers=40,
        torch_dtype="bfloat16",
        sliding_window=None,
    )
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = numbers(
        capsys,
        "--model",
        str(tmp_path),
        "--kv-cache-memory-bytes",
        "10GiB",
        "--max-model-len",
        "32768",
    )
    # page 2 x 16 x 8 x 128 x 2 = 65,536 B; 10 GiB // 65,536 = 163,840 // 40 = 4,096 blocks
    # = 65,536 tokens; 32,768 tokens = 2,048 blocks: 2.00x
    assert (r["num_gpu_blocks"], r["num_tokens"], r["max_concurrency"]) == (4_096, 65_536, 2.0)
    assert r["parameters_estimated"] is None and r["sliding_window"] is None
    rc, out, err = run(capsys, "--model", str(tmp_path), "--gpu", "L4", "--max-model-len", "64")
    assert rc == 2 and "cannot estimate the weights" in err and "--weights-bytes" in err


def test_gpt2_style_field_names_are_understood(tmp_path, capsys):
    cfg = dict(
        n_layer=12,
        n_embd=768,
        n_head=12,
        n_inner=3072,
        vocab_size=50257,
        max_position_embeddings=1024,
        torch_dtype="float32",
        model_type="gpt2",
        tie_word_embeddings=True,
    )
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = numbers(capsys, "--model", str(tmp_path), "--kv-cache-memory-bytes", "1GiB")
    # head_dim 768 / 12 = 64; fp32 served as fp16: page 2 x 16 x 12 x 64 x 2 = 49,152 B
    # 1 GiB // 49,152 = 21,845 // 12 layers = 1,820 blocks = 29,120 tokens
    assert (r["head_dim"], r["page_size_bytes"], r["num_gpu_blocks"]) == (64, 49_152, 1_820)
    # about 124 M parameters (GPT-2 small: 124 M)
    assert 120e6 < r["parameters_estimated"] < 126e6


def test_llama_3_70b_over_four_h100s_is_reported_per_gpu(capsys):
    r = numbers(
        capsys, "--model", "llama-3-70b", "--gpu", "H100-80GB", "--tensor-parallel-size", "4"
    )
    # parameters 128,256 x 8,192 x 2 = 2,101,346,304 + 80 layers x (q,o 2 x 8,192 x 8,192 +
    # k,v 2 x 8,192 x 1,024 + MLP 3 x 8,192 x 28,672 = 855,638,016) = 70,552,387,584;
    # x 2 B / 4 GPUs = 35,276,193,792 B each; 77,309,411,328 - that = 42,033,217,536 B
    assert (r["weights_bytes"], r["kv_cache_memory_bytes"]) == (35_276_193_792, 42_033_217_536)
    # 8 KV heads / 4 = 2 per GPU: page 2 x 16 x 2 x 128 x 2 = 16,384 B
    # 42,033,217,536 // 16,384 = 2,565,504 // 80 = 32,068 blocks = 513,088 tokens; / 512 = 62.63x
    assert (r["kv_heads_per_gpu"], r["page_size_bytes"], r["num_gpu_blocks"]) == (2, 16_384, 32_068)
    assert r["num_tokens"] == 513_088 and f"{r['max_concurrency']:.2f}" == "62.63"
    rc, _, err = run(
        capsys, "--model", "llama-3-70b", "--gpu", "H100-80GB", "--tensor-parallel-size", "3"
    )
    assert rc == 2 and "must divide num_attention_heads (64)" in err


def test_deepseek_v2_lite_caches_one_mla_latent_per_token_and_layer(capsys):
    r = numbers(capsys, "--model", "deepseek-v2-lite", "--kv-cache-memory-bytes", "20GiB")
    # per token: 27 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 B = 31,104 B, where
    # per-head K and V would take 27 x 16 x (128 + 64 + 128) x 2 B = 276,480 B
    assert (r["latent_dim"], r["uncompressed_values"]) == (576, 5_120)
    assert r["bytes_per_token"] == 31_104 and r["kv_heads_per_gpu"] == 1
    # one layer's block (vLLM's MLAAttentionSpec page): 16 x 576 x 2 B = 18,432 B
    assert (r["page_size_bytes"], r["bytes_per_block"]) == (18_432, 497_664)
    # 21,474,836,480 // 18,432 = 1,165,084 // 27 = 43,151 blocks = 690,416 tokens
    assert (r["num_gpu_blocks"], r["num_tokens"]) == (43_151, 690_416)


def test_an_mla_latent_is_whole_on_every_tensor_parallel_gpu(capsys):
    one = numbers(capsys, "--model", "deepseek-v2-lite", "--kv-cache-memory-bytes", "8GiB")
    two = numbers(
        capsys, "--model", "deepseek-v2-lite", "--kv-cache-memory-bytes", "8GiB",
        "--tensor-parallel-size", "2",
    )  # fmt: skip
    assert two["page_size_bytes"] == one["page_size_bytes"] == 18_432


def test_deepseek_v2_lites_weights_are_estimated_from_mla_and_its_experts(capsys):
    r = numbers(capsys, "--model", "deepseek-v2-lite", "--gpu", "H100-80GB")
    # per layer, MLA: q 2,048 x 16 x 192 + kv_a 2,048 x 576 + kv_b 512 x 16 x 256
    # + o 16 x 128 x 2,048 = 13,762,560; 27 layers: 371,589,120. MLP: one dense layer
    # 3 x 2,048 x 10,944 = 67,239,936, then 26 MoE layers of (64 + 2) x 3 x 2,048 x 1,408
    # + a 2,048 x 64 router = 571,080,704: 14,848,098,304. Embeddings and head: 2 x
    # 102,400 x 2,048 = 419,430,400. Total 15,706,357,760 (the model card: 15.7 B).
    assert r["parameters_estimated"] == 15_706_357_760


def test_the_report_says_what_an_mla_block_holds(capsys):
    rc, out, _ = run(capsys, "--model", "deepseek-v2-lite", "--kv-cache-memory-bytes", "8GiB")
    assert rc == 0
    assert "31,104 B = 27 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 B (bfloat16)" in out
    assert "instead of 5,120 values of per-head K and V" in out
    assert "one layer's block (vLLM's page_size_bytes) 18,432 B" in out


def test_an_mla_config_without_its_rope_dim_is_named_in_one_line(tmp_path, capsys):
    cfg = dict(capacity.MODELS["deepseek-v2-lite"])
    del cfg["qk_rope_head_dim"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rc, out, err = run(capsys, "--model", str(tmp_path), "--kv-cache-memory-bytes", "8GiB")
    assert rc != 0 and out == ""
    assert "config has no 'qk_rope_head_dim'" in err and len(err.strip().splitlines()) == 1
