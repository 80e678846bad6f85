"""A `.bin`-only checkpoint (pytorch_model.bin, read by torch.load(weights_only=True))
loads through the same family name maps as safetensors: GPT-2's Conv1D c_attn, Pythia's
per-head fused query_key_value, Falcon's, Mixtral's and Granite-MoE's expert tensors.
Each family's tiny checkpoint (built by transformers' save_pretrained, as the families
oracle builds it) is saved both ways; the two models hold equal weights."""

import numpy as np
import pytest
from safetensors.numpy import load_file

from pagedsim.engine.hf import load_model
from pagedsim.engine.hf_json import CheckpointError

torch = pytest.importorskip("torch", reason="reading .bin needs torch")

from .test_hf_families_oracle import build  # noqa: E402  (skips itself without transformers)


def as_bin(directory, shards: int = 1) -> None:
    """Rewrite DIR's model.safetensors as `shards` pytorch_model*.bin files."""
    tensors = sorted(load_file(str(directory / "model.safetensors")).items())
    for i in range(shards):
        part = {k: torch.from_numpy(v) for k, v in tensors[i::shards]}
        name = "pytorch_model.bin" if shards == 1 else f"pytorch_model-{i + 1:05d}.bin"
        torch.save(part, directory / name)
    (directory / "model.safetensors").unlink()


def tensors(model) -> dict:
    out = {"embed": model.embed, "lm_head": model.lm_head}
    for i, lw in enumerate(model.layer_weights):
        out.update({f"{i}.{k}": v for k, v in lw.items() if v is not None})
    return out


@pytest.mark.parametrize(
    "name, shards",
    [("gpt2", 1), ("pythia", 2), ("falcon", 1), ("phi-2", 1), ("mixtral", 2), ("granite-moe", 1)],
)
def test_a_bin_checkpoint_loads_the_weights_its_safetensors_twin_does(tmp_path, name, shards):
    directory = build(tmp_path / name, name)
    want = tensors(load_model(directory))
    as_bin(directory, shards)
    got = tensors(load_model(directory))
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert np.array_equal(got[key], value), f"{name}: {key} differs"


def test_a_bin_checkpoint_missing_a_family_tensor_is_named(tmp_path):
    directory = build(tmp_path / "gpt2", "gpt2")
    tensors = load_file(str(directory / "model.safetensors"))
    del tensors["transformer.h.1.attn.c_attn.weight"]
    torch.save(
        {k: torch.from_numpy(v) for k, v in tensors.items()}, directory / "pytorch_model.bin"
    )
    (directory / "model.safetensors").unlink()
    with pytest.raises(CheckpointError) as e:
        load_model(directory)
    assert str(e.value) == (
        f"{directory / 'pytorch_model.bin'}: missing tensor transformer.h.1.attn.c_attn.weight"
    )
