"""Every family served from a tiny safetensors checkpoint (no torch): pagedsim's greedy
tokens, with the checkpoint's generation_config.json applied, equal an independent
float64 NumPy forward's (family_reference.py), on a text longer than every window; the
hybrid models keep two KV cache groups whose window group frees blocks as it slides.
The same families against transformers itself: test_hf_families_oracle.py."""

import numpy as np
import pytest

from pagedsim.config import CacheConfig
from pagedsim.engine.dense import sequence_logits
from pagedsim.engine.generate import Workload, serve
from pagedsim.engine.hf import load_model

from .families import FAMILIES, ORACLE_ONLY
from .family_reference import reference_greedy, reference_logits, write_family

PROMPT = (3, 17, 9, 42, 5, 88, 23, 61, 7, 12, 99, 4, 30)
NEW_TOKENS = 12


@pytest.mark.parametrize("name", [n for n in FAMILIES if n not in ORACLE_ONLY])
def test_a_family_decodes_the_tokens_of_an_independent_float64_forward(tmp_path, name):
    directory = write_family(tmp_path / name, name)
    expected = reference_greedy(directory, PROMPT, NEW_TOKENS)
    _, summary = serve(
        load_model(directory),
        None,
        Workload([PROMPT], NEW_TOKENS, overrides={"temperature": 0.0}),
        CacheConfig(block_size=4),
        backend="numpy",
    )
    got = summary["requests"][0]["outputs"][0]["token_ids"]
    assert got == expected, f"{name}: pagedsim {got} vs the NumPy reference {expected}"
    assert summary["tokens_match"]
    # and the logits at every prompt position, which a repeated token could not hide
    got_logits = sequence_logits(load_model(directory), PROMPT)
    want = reference_logits(directory, PROMPT)
    assert np.abs(got_logits - want).max() <= 2e-4 * max(1.0, np.abs(want).max())


@pytest.mark.parametrize(
    "name, kinds",
    [
        ("mistral-windowed", ("window",)),
        ("gemma2", ("full", "window")),
        ("gemma3", ("full", "window")),
    ],
)
def test_a_windowed_model_drops_blocks_as_its_window_slides(tmp_path, name, kinds):
    directory = write_family(tmp_path / name, name)
    llm, summary = serve(
        load_model(directory),
        None,
        Workload([PROMPT], 20, overrides={"temperature": 0.0}),
        CacheConfig(block_size=4),
        backend="numpy",
    )
    engine = llm.llm_engine
    assert engine.groups == kinds
    peak = {g: max(rec[f"{g}_blocks"] for rec in engine.log) for g in kinds}
    total = len(PROMPT) + 20  # 33 tokens: 9 blocks of 4 when nothing is dropped
    # window 8, blocks of 4: after a step, the next query reads 8 positions, at most 3 blocks,
    # plus the block of the token being written; the prompt's blocks go once it is computed
    assert peak["window"] <= -(-len(PROMPT) // 4)
    last_window = engine.log[-2]["window_blocks"]
    assert last_window <= 3, engine.log[-2]
    if "full" in kinds:
        assert engine.log[-2]["full_blocks"] == -(-(total - 1) // 4)
