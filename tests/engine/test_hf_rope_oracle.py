"""Every rope_type against transformers, where the setting matters.

test_hf_families_oracle.py serves the rope entries of tests/engine/families.py (yarn with
its mscale / beta / attention-factor / truncate variants, dynamic NTK crossing its
threshold in decode and with the prompt already past it, Phi-3.5's longrope with the
prompt past it, and a rope_scaling beside rope_parameters) token for token. Here the
logits of one forward pass over 40 positions -- past every threshold -- match
transformers', while the same weights with plain rope move transformers' own logits
far more: a plain rope served in place of the setting could not pass.
Needs torch and transformers (`pip install "pagedsim[oracle]"`); skipped without them.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="the transformers oracle needs torch (pip install 'pagedsim[oracle]')"
)
transformers = pytest.importorskip("transformers", reason="the oracle needs transformers")

from pagedsim.engine.dense import sequence_logits  # noqa: E402
from pagedsim.engine.generate import Workload, serve  # noqa: E402
from pagedsim.engine.hf import load_model  # noqa: E402

from .families import config_json  # noqa: E402
from .test_hf_families_oracle import LOGIT_TOL, build  # noqa: E402

ROPES = [
    "qwen2.5-yarn",
    "yarn-mscale",
    "yarn-attention-factor",
    "dynamic",
    "dynamic-past",
    "phi3.5-long-past",
    "rope-scaling-beside-parameters",
]
TOKENS = [(7 * i + 3) % 128 for i in range(40)]


def transformers_logits(directory) -> np.ndarray:
    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, torch_dtype=torch.float32, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        return model(torch.tensor([TOKENS])).logits[0].numpy()


@pytest.mark.parametrize("name", ROPES)
def test_a_rope_setting_gives_transformers_logits_and_plain_rope_would_not(tmp_path, name):
    directory = build(tmp_path / name, name)
    (directory / "config.json").write_text(json.dumps(config_json(name)))
    want = transformers_logits(directory)
    ours = sequence_logits(load_model(directory), TOKENS)
    scale = max(1.0, np.abs(want).max())
    assert np.abs(ours - want).max() <= LOGIT_TOL * scale
    plain = {
        k: v for k, v in config_json(name).items() if k not in ("rope_scaling", "rope_parameters")
    }
    (directory / "config.json").write_text(json.dumps(plain))
    moved = np.abs(transformers_logits(directory) - want).max()
    assert moved > 100 * LOGIT_TOL * scale, f"{name}: the setting moves the logits by {moved}"


def test_phi3_crossing_its_original_length_in_decode_is_refused_in_one_line(tmp_path):
    """transformers' Phi-3 re-embeds its whole cache with the long factors when a sequence
    first passes original_max_position_embeddings; pagedsim refuses such a request (and
    serves the same checkpoint's requests on either side of it)."""
    directory = build(tmp_path / "phi", "phi3.5-long-past")
    config = {**config_json("phi3.5-long-past"), "original_max_position_embeddings": 20}
    (directory / "config.json").write_text(json.dumps(config))
    model = load_model(directory)
    with pytest.raises(ValueError) as e:
        serve(model, None, Workload([TOKENS[:13]], 24), backend="numpy")
    assert "original_max_position_embeddings 20" in str(e.value)
    assert len(str(e.value).splitlines()) == 1
    for prompt, new in ((13, 7), (21, 10)):  # within it, and a prompt past it
        workload = Workload([TOKENS[:prompt]], new, overrides={"temperature": 0.0})
        _, summary = serve(model, None, workload)
        assert len(summary["requests"][0]["outputs"][0]["token_ids"]) <= new
