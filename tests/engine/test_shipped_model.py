"""The model `pagedsim generate` serves by default: trained by scripts/train_tiny_model.py
on Shakespeare, shipped in the Hugging Face layout inside the package (at most 2 MB), far
better than chance on held-out text, and served as readable text by the paged engine
exactly as the dense engine serves it -- in one conversation, turn 2 hits turn 1's
prompt *and* answer in the prefix cache."""

import fnmatch
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pagedsim.config import CacheConfig
from pagedsim.engine.dense import sequence_logits
from pagedsim.engine.generate import DEFAULT_MODEL, load

ROOT = Path(__file__).resolve().parents[2]
HELDOUT_BOUND = 2.0  # nats/char; measured 1.679 (training.json), uniform ln(74) = 4.304


def heldout_loss(model, ids: list, context: int = 128) -> float:
    """Mean next-character NLL over windows of `context` characters, as training scored it."""
    losses = []
    for start in range(0, len(ids) - context + 1, context):
        window = ids[start : start + context]
        logits = sequence_logits(model, window).astype(np.float64)[:-1]  # [T - 1, V]
        logz = logits.max(-1) + np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1))
        losses.append(logz - logits[np.arange(len(window) - 1), window[1:]])
    return float(np.concatenate(losses).mean())


def test_the_shipped_model_predicts_held_out_shakespeare_far_better_than_chance():
    model, tok = load()
    text = (DEFAULT_MODEL / "heldout.txt").read_text(encoding="utf-8")
    loss = heldout_loss(model, tok.encode(text).ids)
    uniform = math.log(model.config.vocab)
    assert loss < HELDOUT_BOUND < uniform / 1.9, f"{loss:.3f} nats/char (uniform {uniform:.2f})"
    recorded = json.loads((DEFAULT_MODEL / "training.json").read_text())
    assert abs(loss - recorded["heldout_loss_nats_per_char"]) < 0.01  # NumPy agrees with torch


def test_the_shipped_model_is_small_and_part_of_the_package_data():
    files = [p for p in DEFAULT_MODEL.iterdir() if p.is_file()]
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in files}
    assert sum(p.stat().st_size for p in files) <= 2 * 1024 * 1024
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = data["package-data"]["pagedsim"]
    for p in files:
        rel = p.relative_to(ROOT / "pagedsim").as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), f"{rel} would miss the wheel"


def run_generate(*args):
    done = subprocess.run(
        [sys.executable, "-m", "pagedsim", "generate", *args],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_generate_with_no_model_prints_text_equal_to_the_dense_engines():
    out = run_generate("--backend", "numpy")
    assert "matches the dense engine: tokens yes" in out
    assert "attention: NumPy paged attention on the CPU" in out
    texts = [line.split(": ", 1)[1] for line in out.splitlines() if "output 0:" in line]
    assert len(texts) == 4
    letters = sum(c.isalpha() for t in texts for c in t)
    assert letters > 0.5 * sum(len(t) for t in texts), texts  # words, not noise


def test_generate_json_gives_each_requests_prompt_token_ids_text_and_hits():
    out = json.loads(
        run_generate(
            "--backend",
            "numpy",
            "--json",
            "--prompt",
            "JULIET.\nO Romeo",
            "--prompt",
            "JULIET.\nGood night",
            "--max-tokens",
            "20",
        )
    )
    reqs = out["summary"]["requests"]
    assert [r["prompt"] for r in reqs] == ["JULIET.\nO Romeo", "JULIET.\nGood night"]
    _, tok = load()
    for r in reqs:
        (o,) = r["outputs"]
        assert len(o["token_ids"]) == 20 and tok.decode(o["token_ids"]) == o["text"]
        assert r["prompt_token_ids"] == tok.encode(r["prompt"]).ids
    assert out["summary"]["tokens_match"]


def test_turn_two_is_served_from_turn_ones_prompt_and_answer():
    out = json.loads(
        run_generate("--backend", "numpy", "--json", "--turns", "3", "--max-tokens", "40")
    )
    turns = out["summary"]["requests"]
    assert len(turns) == 3 and out["summary"]["tokens_match"]
    for before, after in zip(turns, turns[1:], strict=False):
        computed = len(before["prompt_token_ids"]) + 40 - 1  # KV exists for all but the last
        assert after["hit_tokens"] == computed // 16 * 16 > len(before["prompt_token_ids"])
        answer = before["outputs"][0]["token_ids"]
        assert (
            after["prompt_token_ids"][: len(before["prompt_token_ids"]) + 40]
            == before["prompt_token_ids"] + answer
        )


@pytest.mark.kernels
def test_the_kernels_serve_the_shipped_model_as_the_dense_engine_does():
    from pagedsim.engine import DenseEngine, PagedEngine, Request

    model, tok = load()
    requests = [
        Request(tuple(tok.encode("JULIET.\nO Romeo, Romeo").ids), 3),
        Request(tuple(tok.encode("JULIET.\nO Romeo, wherefore").ids), 2, beam_width=2),
    ]
    engine = PagedEngine(
        model,
        CacheConfig(block_size=16, num_gpu_blocks=12, enable_prefix_caching=True),
        backend="kernels",
        check=True,
        mode="v0",
    )
    paged = engine.generate(requests)
    assert "cuda_kernels" in engine.backend.where()
    for p, d in zip(paged, DenseEngine(model).generate(requests), strict=True):
        assert p.outputs() == d.outputs()
