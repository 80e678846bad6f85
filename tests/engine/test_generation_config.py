"""generation_config.json applied as transformers' generate() and vLLM's
--generation-config auto do, and ignored with --generation-config none."""

import json

import pytest

from pagedsim.engine.generate import DEFAULT_MAX_TOKENS, apply_generation_config
from pagedsim.engine.generate_cli import main
from pagedsim.engine.hf import load_model
from pagedsim.engine.hf_json import CheckpointError

from .family_reference import reference_greedy, write_family

QWEN = dict(
    eos_token_id=(2, 3),
    repetition_penalty=1.1,
    do_sample=True,
    temperature=0.7,
    top_p=0.8,
    top_k=20,
)


def test_greedy_decoding_takes_the_penalty_and_eos_but_not_the_sampling_defaults():
    fields, max_tokens, used = apply_generation_config(QWEN, {"temperature": 0.0}, None)
    assert fields == {"temperature": 0.0, "repetition_penalty": 1.1}
    assert max_tokens == DEFAULT_MAX_TOKENS
    assert used == {
        "eos_token_id": [2, 3],
        "repetition_penalty": 1.1,
        "do_sample": "true, left aside: greedy unless asked to sample",
    }


def test_asking_to_sample_takes_the_files_temperature_top_p_and_top_k():
    fields, _, used = apply_generation_config(QWEN, {"seed": 3}, 5)
    assert fields == {
        "seed": 3,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "repetition_penalty": 1.1,
    }
    assert used["temperature"] == 0.7 and used["top_k"] == 20


def test_do_sample_in_the_file_alone_stays_greedy_and_says_so():
    fields, _, used = apply_generation_config(QWEN, {}, 5)
    assert fields == {"repetition_penalty": 1.1}
    assert used["do_sample"].startswith("true, left aside")


def test_the_users_flags_win_over_the_file():
    fields, max_tokens, used = apply_generation_config(
        {**QWEN, "max_new_tokens": 50},
        {"temperature": 1.5, "top_p": 0.5, "repetition_penalty": 1.0},
        7,
    )
    assert fields == {"temperature": 1.5, "top_p": 0.5, "top_k": 20, "repetition_penalty": 1.0}
    assert max_tokens == 7 and "max_new_tokens" not in used and "repetition_penalty" not in used


def test_max_new_tokens_stands_in_for_an_absent_max_tokens():
    _, max_tokens, used = apply_generation_config({"max_new_tokens": 9}, {}, None)
    assert max_tokens == 9 and used == {"max_new_tokens": 9}


def checkpoint(tmp_path, **gen):
    d = write_family(tmp_path / "qwen", "qwen2.5")
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 3], **gen}))
    return d


def test_generate_says_which_settings_came_from_the_file(tmp_path, capsys):
    d = checkpoint(tmp_path, repetition_penalty=1.3)
    main(
        [
            "--model",
            str(d),
            "--prompt-ids",
            "3,17,9,42,5",
            "--max-tokens",
            "6",
            "--temperature",
            "0",
            "--backend",
            "numpy",
        ]
    )
    out = capsys.readouterr().out
    assert "from generation_config.json: eos_token_id [2, 3], repetition_penalty 1.3" in out
    tokens = reference_greedy(d, (3, 17, 9, 42, 5), 6)
    assert f"output 0: {tokens}" in out


def test_generation_config_none_ignores_the_file(tmp_path, capsys):
    d = checkpoint(tmp_path, repetition_penalty=1.3)
    main(
        [
            "--model",
            str(d),
            "--prompt-ids",
            "3,17,9,42,5",
            "--max-tokens",
            "6",
            "--temperature",
            "0",
            "--backend",
            "numpy",
            "--generation-config",
            "none",
            "--json",
        ]
    )
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["generation_config"] == {}
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))
    assert summary["requests"][0]["outputs"][0]["token_ids"] == reference_greedy(
        d, (3, 17, 9, 42, 5), 6
    )  # config.json's eos_token_id 2 still stops, no penalty


@pytest.mark.parametrize(
    "field, value",
    [
        ("no_repeat_ngram_size", 3),
        ("min_new_tokens", 4),
        ("suppress_tokens", [5]),
        ("repetition_penalty", -1),
        ("top_k", -2),
        ("eos_token_id", [999]),
    ],
)
def test_a_generation_config_field_that_cannot_be_honoured_is_refused(tmp_path, field, value):
    d = checkpoint(tmp_path, **{field: value})
    with pytest.raises(CheckpointError, match=f"generation_config.json: field {field}"):
        load_model(d)
