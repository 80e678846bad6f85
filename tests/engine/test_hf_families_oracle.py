"""The oracle for every family: tiny random-weight checkpoints built by transformers itself
from real config.json files (tests/engine/families.py), served by `pagedsim generate`'s
code path with the checkpoint's generation_config.json applied, give exactly the tokens of
transformers' `generate(do_sample=False)` -- Llama 3.1/3.2 (llama3 rope), Qwen2.5 (its
repetition_penalty), Qwen3, Gemma, Gemma 2 (hybrid sliding layers, soft-caps), Gemma 3,
Phi-3 (and longrope), OLMo-2, SmolLM3, Granite, and Mistral run past its window.

Each checkpoint is served twice: with the config.json as the model ships it, and with the
one transformers' own save_pretrained writes (transformers 5: rope_parameters).
Needs torch and transformers (`pip install "pagedsim[oracle]"`); skipped without them.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="the transformers oracle needs torch (pip install 'pagedsim[oracle]')"
)
transformers = pytest.importorskip("transformers", reason="the oracle needs transformers")

from pagedsim.config import CacheConfig  # noqa: E402
from pagedsim.engine.dense import sequence_logits  # noqa: E402
from pagedsim.engine.generate import Workload, serve  # noqa: E402
from pagedsim.engine.hf import load_model  # noqa: E402

from .families import FAMILIES, config_json, generation_json  # noqa: E402

PROMPT = [3, 17, 9, 42, 5, 88, 23, 61, 7, 12, 99, 4, 30]  # 13 tokens: past every window of 8
NEW_TOKENS = 24
LOGIT_TOL = 1e-4  # float32 NumPy vs float32 torch, relative to the largest logit


def build(directory, name):
    """save_pretrained of a random model of the family; returns (dir, transformers' model)."""
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config_json(name)))
    config = transformers.AutoConfig.from_pretrained(directory)
    config.tie_word_embeddings = config_json(name).get(
        "tie_word_embeddings", config.tie_word_embeddings
    )
    torch.manual_seed(sum(map(ord, name)))
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    offset = "gemma" in name  # Gemma norms scale by (1 + w)
    raw = config_json(name)  # undo the family's embedding and residual multipliers
    embed = 0.5 / (
        raw["hidden_size"] ** 0.5 if offset else raw.get("embedding_multiplier", 1) ** 0.5
    )
    out_gain = 2.0 / raw.get("residual_multiplier", 1.0)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith("norm.weight") or (".ln_" in key and key.endswith("weight")):
                p.copy_((0.0 if offset else 1.0) + 0.1 * torch.randn_like(p))
            elif key.endswith("bias"):
                p.normal_(0, 0.5)
            elif "embed_tokens" in key:
                p.normal_(0, embed)
            else:  # layers strong enough that a tied head does not echo the last token
                gain = (
                    3.0
                    if "lm_head" in key
                    else out_gain
                    if ("o_proj" in key or "down" in key)
                    else 1.0
                )
                p.normal_(0, gain / p.shape[-1] ** 0.5)
    model.save_pretrained(directory, safe_serialization=True)
    (directory / "generation_config.json").write_text(json.dumps(generation_json(name)))
    return directory


def transformers_tokens(directory, with_logits: bool = False):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, torch_dtype=torch.float32, attn_implementation="eager"
    ).eval()
    with torch.no_grad():  # logits first: a dynamic rope remembers the longest length seen
        logits = model(torch.tensor([PROMPT])).logits[0].numpy()  # [T, V]
        out = model.generate(
            torch.tensor([PROMPT]),
            do_sample=False,
            max_new_tokens=NEW_TOKENS,
            attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
        )
    tokens = out[0, len(PROMPT) :].tolist()
    return (tokens, logits) if with_logits else tokens


def pagedsim_tokens(directory) -> tuple:
    _, summary = serve(
        load_model(directory),
        None,
        Workload([PROMPT], NEW_TOKENS, overrides={"temperature": 0.0}),
        CacheConfig(block_size=4),
        backend="numpy",
    )
    return summary["requests"][0]["outputs"][0]["token_ids"], summary


@pytest.mark.parametrize("config_source", ["shipped", "saved"])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_family_gives_transformers_greedy_tokens_with_its_generation_config(
    tmp_path, name, config_source
):
    directory = build(tmp_path / name, name)
    if config_source == "shipped":  # the file as the model ships it, not as transformers wrote it
        (directory / "config.json").write_text(json.dumps(config_json(name)))
    expected, logits = transformers_tokens(directory, with_logits=True)
    got, summary = pagedsim_tokens(directory)
    assert got == expected, f"{name}: pagedsim {got} vs transformers {expected}"
    assert summary["tokens_match"]  # and the dense engine agrees with the paged one
    # the logits at every prompt position too, which a repeated token could not hide
    ours = sequence_logits(load_model(directory), PROMPT)
    assert np.abs(ours - logits).max() <= LOGIT_TOL * max(1.0, np.abs(logits).max())


def test_the_repetition_penalty_from_the_file_is_applied_and_none_ignores_it(tmp_path):
    """A Qwen2.5 checkpoint whose generation_config.json sets repetition_penalty (1.8 here,
    so that it surely changes the text): pagedsim applies it as transformers does, and
    --generation-config none decodes as transformers does without it."""
    directory = build(tmp_path / "qwen2.5", "qwen2.5")
    gen = {**generation_json("qwen2.5"), "repetition_penalty": 1.8}
    (directory / "generation_config.json").write_text(json.dumps(gen))
    with_file, summary = pagedsim_tokens(directory)
    assert summary["generation_config"]["repetition_penalty"] == 1.8
    assert with_file == transformers_tokens(directory)
    _, plain = serve(
        load_model(directory),
        None,
        Workload([PROMPT], NEW_TOKENS, overrides={"temperature": 0.0}, generation_config="none"),
        backend="numpy",
    )
    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, torch_dtype=torch.float32
    ).eval()
    out = model.generate(
        torch.tensor([PROMPT]),
        do_sample=False,
        max_new_tokens=NEW_TOKENS,
        repetition_penalty=1.0,
        eos_token_id=2,
    )
    assert plain["requests"][0]["outputs"][0]["token_ids"] == out[0, len(PROMPT) :].tolist()
    assert plain["generation_config"] == {}
    assert with_file != plain["requests"][0]["outputs"][0]["token_ids"]
