"""The loader's own one-line error, before any large allocation, for the checkpoints a
fuzz run found mishandled: non-float weights, a config declaring more layers than the
files hold (or absurdly many), nested or huge JSON, and a .bin-only checkpoint."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from pagedsim.engine.hf import MAX_TOKENIZER_BYTES, load_model, load_tokenizer
from pagedsim.engine.hf_config import load_config
from pagedsim.engine.hf_json import MAX_JSON_BYTES, CheckpointError

from .checkpoints import write_checkpoint
from .families import config_json


def one_line(e) -> str:
    text = str(e.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize(
    "dtype, name", [(np.int64, "I64"), (np.int8, "I8"), (np.bool_, "BOOL"), (np.uint8, "U8")]
)
def test_an_integer_or_bool_weight_tensor_is_refused_naming_its_dtype(tmp_path, dtype, name):
    d = write_checkpoint(tmp_path)
    tensors = load_file(str(d / "model.safetensors"))
    key = "model.layers.0.mlp.up_proj.weight"
    tensors[key] = (tensors[key] > 0).astype(dtype)
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    assert f"tensor {key} has dtype {name}; weights must be floating point" in one_line(e)


@pytest.mark.parametrize(
    "layers, message",
    [
        (100_000_000, "field num_hidden_layers is 100000000; at most 4096 layers are served"),
        (4000, "config.json declares num_hidden_layers 4000 but the weight files hold 2 layers"),
    ],
)
def test_more_layers_than_the_files_hold_fail_before_any_name_table(tmp_path, layers, message):
    d = write_checkpoint(tmp_path)
    config = json.loads((d / "config.json").read_text())
    config["num_hidden_layers"] = layers
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    assert message in one_line(e)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"architectures": ' + "[" * 50_000 + "]" * 50_000 + "}",
    ],
)
def test_deeply_nested_json_is_the_loaders_error_not_a_recursion_error(tmp_path, text):
    d = write_checkpoint(tmp_path)
    (d / "config.json").write_text(text)
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    assert "config.json" in one_line(e)


@pytest.mark.parametrize("name", ["config.json", "generation_config.json"])
def test_an_integer_too_long_for_python_to_parse_is_the_loaders_error_naming_the_file(
    tmp_path, name
):
    """Python refuses to parse an integer of over 4,300 digits: a ValueError that named no
    file before it became the loader's CheckpointError."""
    d = write_checkpoint(tmp_path)
    (d / name).write_text('{"max_new_tokens": ' + "9" * 5000 + "}")
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    assert f"{name}: not valid JSON" in one_line(e)


def test_a_huge_config_json_is_refused_by_its_size_before_parsing(tmp_path):
    d = write_checkpoint(tmp_path)
    with open(d / "config.json", "w") as f:
        f.write('{"pad": "' + "x" * (MAX_JSON_BYTES + 1) + '"}')
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    assert f"a JSON file over {MAX_JSON_BYTES:,} bytes is refused" in one_line(e)


def test_a_huge_tokenizer_json_is_refused_by_its_size_without_reading_it(tmp_path, monkeypatch):
    """A sparse file: its size says 1 byte over the cap, and no byte of it is read."""
    d = write_checkpoint(tmp_path)
    with open(d / "tokenizer.json", "wb") as f:
        f.truncate(MAX_TOKENIZER_BYTES + 1)
    monkeypatch.setattr(Path, "read_text", lambda *a, **k: pytest.fail("read the file"))
    monkeypatch.setattr(Path, "read_bytes", lambda *a, **k: pytest.fail("read the file"))
    with pytest.raises(CheckpointError) as e:
        load_tokenizer(d)
    assert f"tokenizer.json over {MAX_TOKENIZER_BYTES:,} bytes is refused" in one_line(e)


def test_a_config_eos_outside_the_vocab_that_generation_config_overrides_is_served(tmp_path):
    """transformers uses generation_config.json's eos_token_id; config.json's (here past
    the vocabulary, as a shrunk checkpoint may leave it) is no error."""
    d = write_checkpoint(tmp_path, vocab=64)
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "eos_token_id": [2, 32000]}))
    with pytest.raises(CheckpointError) as e:
        load_config(d)
    assert "eos_token_id" in one_line(e)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": 3}))
    _, info = load_config(d)
    assert info["stop_token_ids"] == (3,) and info["config_eos_token_ids"] == (2,)


@pytest.mark.parametrize(
    "family, key",
    [
        ("llama-3.2", "hidden_act"),
        ("gemma2", "hidden_activation"),
        ("gpt2", "activation_function"),
        ("llama-3.2", "num_hidden_layers"),
        ("gpt2", "n_layer"),
    ],
)
@pytest.mark.parametrize("value", [["silu"], {"silu": 1}])
def test_an_activation_or_layer_count_of_the_wrong_json_type_is_refused_by_name(
    tmp_path, family, key, value
):
    """A list or an object where a string or a number belongs (a fuzz run found the
    activation raising TypeError: unhashable type)."""
    (tmp_path / "config.json").write_text(json.dumps({**config_json(family), key: value}))
    with pytest.raises(CheckpointError) as e:
        load_config(tmp_path)
    assert f"config.json: field {key} " in one_line(e)


def test_a_classic_layer_count_past_the_limit_names_its_own_field(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**config_json("gpt2"), "n_layer": 5000}))
    with pytest.raises(CheckpointError) as e:
        load_config(tmp_path)
    assert "field n_layer is 5000; at most 4096 layers are served" in one_line(e)


def test_a_bin_only_checkpoint_without_torch_says_how_to_read_it(tmp_path, monkeypatch):
    d = write_checkpoint(tmp_path)
    (d / "model.safetensors").rename(d / "pytorch_model.bin")
    monkeypatch.setitem(sys.modules, "torch", None)  # as on a machine without torch
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    assert "pytorch_model.bin checkpoint needs torch to read" in one_line(e)
    assert "convert it to model.safetensors" in str(e.value)


def test_a_bin_only_checkpoint_is_read_with_torch_weights_only(tmp_path):
    torch = pytest.importorskip("torch", reason="reading .bin needs torch")
    d = write_checkpoint(tmp_path)
    tensors = load_file(str(d / "model.safetensors"))
    torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, d / "pytorch_model.bin")
    want = load_model(d)
    (d / "model.safetensors").unlink()
    got = load_model(d)
    assert np.array_equal(got.embed, want.embed)
    assert all(
        np.array_equal(a, b)
        for la, lb in zip(got.layer_weights, want.layer_weights, strict=True)
        for a, b in zip(la.values(), lb.values(), strict=True)
        if a is not None
    )


@pytest.mark.parametrize(
    "family, edit, field",
    [
        ("llama", {"rope_scaling": {"rope_type": "dynamic"}}, "rope_scaling.factor"),
        (
            "llama",
            {"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4, "factor": 4.0}},
            "rope_parameters.rope_type",
        ),
        # beside rope_parameters, a legacy rope_scaling is read (transformers 5's rule)
        ("llama", {"rope_parameters": {"rope_type": "default"}, "rope_scaling": 5}, "rope_scaling"),
        (
            "llama",
            {"rope_parameters": {"rope_type": "default"}, "rope_scaling": {"type": None}},
            "rope_scaling.rope_type",
        ),
        (
            "llama",
            {"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 4}},
            "rope_scaling.long_factor",
        ),
        ("llama", {"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
        ("llama", {"architectures": ["DeepseekV2ForCausalLM"]}, "architectures"),
        ("llama", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
        ("llama", {"mlp_bias": True}, "mlp_bias"),
        ("llama", {"hidden_act": "relu"}, "hidden_act"),
        ("mistral", {"sliding_window": 4, "layer_types": ["chunked_attention"] * 2}, "layer_types"),
        (
            "llama",
            {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
            "rope_scaling.low_freq_factor",
        ),
    ],
)
def test_a_config_that_cannot_be_served_is_refused_naming_the_field(tmp_path, family, edit, field):
    d = write_checkpoint(tmp_path, family)
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, **edit}))
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    assert f"config.json: field {field}" in one_line(e)
