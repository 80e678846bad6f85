"""Local Hugging Face checkpoints, without torch: Llama (GQA, tied and untied), Qwen2
(q/k/v biases) and Mistral, in fp32, fp16 and bf16, single-file or sharded, are served
token for token like an independent NumPy forward of Hugging Face's equations, by both
the paged engine and the dense one; bad directories get a one-line error naming the
file and the field or tensor."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pagedsim.config import CacheConfig
from pagedsim.engine import DenseEngine, PagedEngine, Request
from pagedsim.engine.dense import sequence_logits
from pagedsim.engine.hf import load_model, load_tokenizer
from pagedsim.engine.hf_json import CheckpointError

from .checkpoints import reference_greedy, reference_logits, write_checkpoint

LOGIT_TOL = 2e-4  # float32 engine vs float64 reference; these logits are O(1..10)
PROMPT = (5, 17, 3, 40, 22, 9, 31, 8, 2, 14, 6)

SHAPES = {
    "llama-gqa-untied": dict(family="llama", heads=4, kv_heads=2),
    "llama-mha-tied": dict(family="llama", heads=4, kv_heads=4, tie=True),
    "llama-mqa-head-dim": dict(family="llama", heads=4, kv_heads=1, head_dim=16),
    "qwen2-gqa-biases": dict(family="qwen2", heads=4, kv_heads=2),
    "qwen2-tied-biases": dict(family="qwen2", heads=2, kv_heads=1, tie=True),
    "mistral-gqa": dict(family="mistral", heads=4, kv_heads=2, rope_theta=1e6),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_checkpoint_is_served_like_hugging_faces_equations_by_both_engines(tmp_path, shape):
    d = write_checkpoint(tmp_path, seed=len(shape), **SHAPES[shape])
    model = load_model(d)
    np.testing.assert_allclose(
        sequence_logits(model, PROMPT), reference_logits(d, PROMPT), rtol=0, atol=LOGIT_TOL
    )
    want = reference_greedy(d, PROMPT, 8)
    dense = DenseEngine(model).generate([Request(PROMPT, 8)])
    paged = PagedEngine(
        model,
        CacheConfig(block_size=4, num_gpu_blocks=16, enable_prefix_caching=False),
        backend="numpy",
        check=True,
    ).generate([Request(PROMPT, 8)])
    assert dense[0].outputs() == [want] and paged[0].outputs() == [want]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_weights_are_served_in_float32_with_their_exact_values(tmp_path, dtype):
    d = write_checkpoint(tmp_path, dtype=dtype, shards=3)
    model = load_model(d)
    assert model.embed.dtype == np.float32 and model.lm_head.dtype == np.float32
    np.testing.assert_allclose(
        sequence_logits(model, PROMPT), reference_logits(d, PROMPT), rtol=0, atol=LOGIT_TOL
    )


def test_qwen2_biases_change_the_logits_so_they_are_really_loaded(tmp_path):
    d = write_checkpoint(tmp_path, family="qwen2")
    model = load_model(d)
    assert model.config.qkv_bias and not model.config.o_bias
    before = sequence_logits(model, PROMPT)
    model.layer_weights[0]["q_proj.bias"] = np.zeros_like(model.layer_weights[0]["q_proj.bias"])
    assert np.abs(sequence_logits(model, PROMPT) - before).max() > 1e-3


def test_the_tokenizer_comes_from_tokenizer_json_through_the_tokenizers_library(tmp_path):
    tok = load_tokenizer(write_checkpoint(tmp_path))
    ids = tok.encode("to be, or not").ids
    assert len(ids) == len("to be, or not") and tok.decode(ids) == "to be, or not"


def _break(d, what):
    cfg = json.loads((d / "config.json").read_text())
    if what == "no config":
        (d / "config.json").unlink()
    elif what == "no weights":
        (d / "model.safetensors").unlink()
    elif what == "no tokenizer":
        (d / "tokenizer.json").unlink()
    elif what in ("layers", "hidden", "arch", "rope", "heads", "vocab"):
        key, value = {
            "layers": ("num_hidden_layers", 3),
            "hidden": ("hidden_size", 48),
            "arch": ("architectures", ["BertForMaskedLM"]),
            "rope": ("rope_scaling", {"rope_type": "mrope", "factor": 4.0}),
            "heads": ("num_attention_heads", "four"),
            "vocab": ("vocab_size", 0),
        }[what]
        cfg[key] = value
        (d / "config.json").write_text(json.dumps(cfg))
    elif what == "fewer layers":
        cfg["num_hidden_layers"] = 1
        (d / "config.json").write_text(json.dumps(cfg))
    elif what == "tied":
        cfg["tie_word_embeddings"] = True
        (d / "config.json").write_text(json.dumps(cfg))
    elif what == "bad json":
        (d / "config.json").write_text("{not json")


BROKEN = [
    ("no config", "config.json: missing file"),
    ("no weights", "missing file model.safetensors (or model.safetensors.index.json)"),
    ("layers", "config.json declares num_hidden_layers 3 but the weight files hold 2 layers"),
    (
        "hidden",
        "tensor model.embed_tokens.weight has shape (64, 32) but config.json implies (64, 48)",
    ),
    ("arch", "config.json: field architectures is ['BertForMaskedLM']; supported"),
    ("rope", "config.json: field rope_scaling.rope_type is 'mrope'"),
    ("heads", "config.json: field num_attention_heads must be a positive integer, got 'four'"),
    ("vocab", "config.json: field vocab_size must be a positive integer, got 0"),
    ("fewer layers", "tensor model.layers.1."),
    ("bad json", "config.json: not valid JSON"),
]


@pytest.mark.parametrize("what, message", BROKEN)
def test_a_broken_checkpoint_gets_one_line_naming_the_file_and_the_field(tmp_path, what, message):
    d = write_checkpoint(tmp_path)
    _break(d, what)
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_missing_shard_is_named(tmp_path):
    d = write_checkpoint(tmp_path, shards=2)
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(
        CheckpointError,
        match=r"model-00002-of-00002.safetensors: missing file "
        r"\(listed in model.safetensors.index.json\)",
    ):
        load_model(d)


@pytest.mark.parametrize("what", ["no config", "no tokenizer", "hidden", "rope"])
def test_generate_on_a_broken_checkpoint_exits_2_with_one_stderr_line(tmp_path, what):
    d = write_checkpoint(tmp_path)
    _break(d, what)
    done = subprocess.run(
        [sys.executable, "-m", "pagedsim", "generate", "--model", str(d)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert str(d) in done.stderr


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_loading_a_bf16_checkpoint_peaks_under_two_and_a_half_times_its_size(tmp_path):
    d = write_checkpoint(
        tmp_path, vocab=64, hidden=512, layers=4, heads=8, kv_heads=4, mlp=1536, dtype="bfloat16"
    )
    size = (d / "model.safetensors").stat().st_size
    code = textwrap.dedent(f"""
        import ml_dtypes, safetensors, numpy
        from pagedsim.engine.hf import load_model
        def kib(field):
            for line in open("/proc/self/status"):
                if line.startswith(field):
                    return int(line.split()[1])
        base = kib("VmRSS:")
        model = load_model({str(d)!r})
        print(kib("VmHWM:") - base, model.num_parameters)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr
    peak_kib, params = map(int, done.stdout.split())
    assert params * 2 <= size < params * 2 + 100_000  # the file really is bf16
    assert peak_kib * 1024 < 2.5 * size, f"peak {peak_kib * 1024:,} B for a {size:,} B checkpoint"


def test_generate_serves_a_checkpoint_without_a_tokenizer_from_token_ids(tmp_path):
    d = write_checkpoint(tmp_path, family="qwen2", tie=True)
    (d / "tokenizer.json").unlink()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pagedsim",
            "generate",
            "--model",
            str(d),
            "--prompt-ids",
            ",".join(map(str, PROMPT)),
            "--max-tokens",
            "6",
            "--json",
            "--backend",
            "numpy",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)["summary"]
    (req,) = summary["requests"]
    assert req["prompt"] is None and req["outputs"][0]["text"] is None
    assert req["outputs"][0]["token_ids"] == reference_greedy(d, PROMPT, 6)
    assert summary["tokens_match"] is None  # --model: the dense check is off by default


def test_check_dense_serves_again_densely_and_compares(tmp_path):
    d = write_checkpoint(tmp_path)
    args = ["--model", str(d), "--prompt-ids", "1,2,3", "--max-tokens", "4", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "pagedsim", "generate", *args, "--check-dense"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)["summary"]
    assert summary["tokens_match"] is True and summary["max_logit_diff"] < 1e-4


def test_a_null_kv_head_count_means_as_many_kv_heads_as_query_heads(tmp_path):
    d = write_checkpoint(tmp_path, heads=4, kv_heads=4, extra={"num_key_value_heads": None})
    assert load_model(d).config.kv_heads == 4


def test_a_folder_that_does_not_exist_or_holds_garbage_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        load_model(tmp_path / "absent")
    d = write_checkpoint(tmp_path / "half")
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model.safetensors: cannot read safetensors"):
        load_model(d)
    (d / "tokenizer.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"tokenizer.json: not a tokenizers file"):
        load_tokenizer(d)
