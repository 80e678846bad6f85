"""The oracle: tiny random checkpoints made by `transformers`' own `save_pretrained`
(Llama, Qwen2, Mistral; GQA; tied and untied embeddings), served by pagedsim, give the
token ids of `transformers`' greedy `generate(do_sample=False)` on both the paged and
the dense engine, and logits within LOGIT_TOL of its forward pass.

Needs torch and transformers (`pip install "pagedsim[oracle]"`); CI has neither, and
the checks without them are in test_hf_checkpoints.py.
"""

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="the transformers oracle needs torch (pip install 'pagedsim[oracle]')"
)
transformers = pytest.importorskip("transformers", reason="the oracle needs transformers")

from pagedsim.config import CacheConfig  # noqa: E402
from pagedsim.engine import DenseEngine, PagedEngine, Request  # noqa: E402
from pagedsim.engine.dense import sequence_logits  # noqa: E402
from pagedsim.engine.hf import load_model  # noqa: E402

LOGIT_TOL = 1e-4  # float32 NumPy vs float32 torch; these logits are O(0.1..10)
PROMPT = [3, 17, 9, 42, 5, 88, 23, 61, 7, 12, 99, 4, 30]
COMMON = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    max_position_embeddings=256,
)

CASES = {
    "llama-gqa-untied": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(num_attention_heads=4, num_key_value_heads=2),
    ),
    "llama-mha-tied": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True),
    ),
    "llama-head-dim-theta": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=32,
            rope_theta=500000.0,
            rms_norm_eps=1e-5,
        ),
    ),
    "qwen2-gqa-untied": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
    ),
    "qwen2-gqa-tied": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
    ),
    "mistral-gqa": (
        "MistralConfig",
        "MistralForCausalLM",
        dict(num_attention_heads=4, num_key_value_heads=2),
    ),
}


def save(tmp_path, case, init=None, dtype=None):
    config_cls, model_cls, kwargs = CASES[case]
    torch.manual_seed(sum(map(ord, case)))
    config = getattr(transformers, config_cls)(**COMMON, **kwargs)
    if init is not None:
        config.initializer_range = init
    model = getattr(transformers, model_cls)(config).eval()
    if "qwen2" in case:  # biases start at zero: make them count
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0, 0.5)
    (model if dtype is None else model.to(dtype)).save_pretrained(tmp_path)
    return model


@pytest.mark.parametrize("init", [None, 0.2], ids=["default-init", "init-0.2"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_greedy_tokens_equal_transformers_generate_on_both_engines(tmp_path, case, init):
    hf = save(tmp_path, case, init)
    with torch.no_grad():
        out = hf.generate(
            torch.tensor([PROMPT]),
            do_sample=False,
            max_new_tokens=16,
            attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
        )
        ref_logits = hf(torch.tensor([PROMPT])).logits[0].numpy()
    want = out[0, len(PROMPT) :].tolist()
    model = load_model(tmp_path)
    stop = model.info["stop_token_ids"]
    np.testing.assert_allclose(sequence_logits(model, PROMPT), ref_logits, rtol=0, atol=LOGIT_TOL)
    request = Request(tuple(PROMPT), 16, stop_token_ids=stop)
    dense = DenseEngine(model).generate([request])[0].outputs()
    paged = (
        PagedEngine(
            model,
            CacheConfig(block_size=4, num_gpu_blocks=32, enable_prefix_caching=True),
            backend="numpy",
            check=True,
        )
        .generate([request])[0]
        .outputs()
    )
    assert dense == [want] and paged == [want]


def test_a_bf16_checkpoint_matches_transformers_reading_it_in_float32(tmp_path):
    save(tmp_path, "llama-gqa-untied", 0.2, dtype=torch.bfloat16)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    with torch.no_grad():
        ref_logits = hf(torch.tensor([PROMPT])).logits[0].numpy()
    model = load_model(tmp_path)
    assert model.info["dtype"] == "bfloat16"
    np.testing.assert_allclose(sequence_logits(model, PROMPT), ref_logits, rtol=0, atol=LOGIT_TOL)


def test_a_sharded_save_pretrained_checkpoint_loads_through_its_index(tmp_path):
    hf = save(tmp_path, "qwen2-gqa-untied", 0.2)
    hf.save_pretrained(tmp_path, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    (tmp_path / "model.safetensors").unlink(missing_ok=True)
    with torch.no_grad():
        ref_logits = hf(torch.tensor([PROMPT])).logits[0].numpy()
    np.testing.assert_allclose(
        sequence_logits(load_model(tmp_path), PROMPT), ref_logits, rtol=0, atol=LOGIT_TOL
    )


@pytest.mark.parametrize("case", ["llama-gqa-untied", "qwen2-gqa-tied"])
def test_the_command_line_gives_transformers_greedy_tokens(tmp_path, case):
    import json
    import subprocess
    import sys

    hf = save(tmp_path, case)
    with torch.no_grad():
        out = hf.generate(
            torch.tensor([PROMPT]),
            do_sample=False,
            max_new_tokens=12,
            attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
        )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pagedsim",
            "generate",
            "--model",
            str(tmp_path),
            "--prompt-ids",
            ",".join(map(str, PROMPT)),
            "--max-tokens",
            "12",
            "--temperature",
            "0",
            "--json",
            "--check-dense",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)["summary"]
    assert summary["tokens_match"]  # paged == dense
    assert summary["requests"][0]["outputs"][0]["token_ids"] == out[0, len(PROMPT) :].tolist()
