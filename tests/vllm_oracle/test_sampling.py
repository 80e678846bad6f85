"""pagedsim's processed next-token distribution against vLLM's own sampling functions.

A script run by the oracle tier's own interpreter (the venv scripts/vllm_oracle_env makes)
applies vLLM v1's steps in its CPU sampler's order -- `apply_penalties` (repetition,
frequency, presence), temperature, `_apply_min_p`, `apply_top_k_top_p_pytorch` -- to
random logits for random SamplingParams; pagedsim.engine.sampling.process must give the
same distribution (the same tokens masked, the same probabilities). Data passes as JSON
both ways. Stop strings: `cut_at_stop` against vLLM's `check_stop_strings`, fed one token's
text at a time. Skipped, in the tier's one line, where vLLM is not importable.
"""

import json
import subprocess
import sys
import textwrap

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim.engine.llm import cut_at_stop
from pagedsim.engine.sampling import SamplingParams, distribution, process
from tests.vllm_oracle.sides import needs_vllm

needs_vllm()
PYTHON = sys.executable  # the tier's venv: vLLM and torch import here

SCRIPT = textwrap.dedent("""
    import json, sys, torch
    from vllm.model_executor.layers.utils import apply_penalties
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch
    from vllm.v1.worker.cpu.sampler import _apply_min_p
    out = []
    for case in json.load(sys.stdin):
        p, vocab = case["params"], len(case["logits"])
        x = torch.tensor([case["logits"]], dtype=torch.float32)
        pad = lambda ids: torch.tensor([ids or [vocab]], dtype=torch.long)
        apply_penalties(x, pad(case["prompt"]), pad(case["output"]),
                        torch.tensor([p["presence_penalty"]]),
                        torch.tensor([p["frequency_penalty"]]),
                        torch.tensor([p["repetition_penalty"]]))
        x = x / p["temperature"]
        if p["min_p"] > 0:
            _apply_min_p(x, torch.tensor([0]), torch.tensor([p["min_p"]]))
        k = min(p["top_k"], vocab) if p["top_k"] > 0 else vocab  # vLLM clamps k to the vocab
        x = apply_top_k_top_p_pytorch(x, torch.tensor([k]), torch.tensor([p["top_p"]]))
        out.append(torch.softmax(x[0].double(), -1).tolist())
    json.dump(out, sys.stdout)
""")


def cases(count: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        vocab = int(rng.integers(8, 200))
        params = dict(
            presence_penalty=float(rng.choice([0.0, rng.uniform(-2, 2)])),
            frequency_penalty=float(rng.choice([0.0, rng.uniform(-2, 2)])),
            repetition_penalty=float(rng.choice([1.0, rng.uniform(0.5, 2.0)])),
            temperature=float(rng.uniform(0.2, 2.0)),
            top_p=float(rng.choice([1.0, rng.uniform(0.05, 1.0)])),
            top_k=int(rng.choice([0, -1, rng.integers(1, vocab + 3)])),
            min_p=float(rng.choice([0.0, rng.uniform(0.0, 0.5)])),
        )
        out.append(
            dict(
                logits=(rng.standard_normal(vocab) * rng.uniform(0.5, 4)).tolist(),
                prompt=rng.integers(0, vocab, int(rng.integers(0, 12))).tolist(),
                output=rng.integers(0, vocab, int(rng.integers(0, 12))).tolist(),
                params=params,
            )
        )
    return out


def test_the_processed_distribution_is_vllms():
    batch = cases(150, seed=int(np.random.default_rng().integers(1 << 31)))
    done = subprocess.run(
        [str(PYTHON), "-c", SCRIPT],
        input=json.dumps(batch),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout)
    for case, want in zip(batch, theirs, strict=True):
        params = SamplingParams(**case["params"])
        got = distribution(
            process(np.array(case["logits"]), case["prompt"], case["output"], params)
        )
        want = np.array(want)
        assert np.array_equal(got > 0, want > 0), case["params"]  # the same tokens kept
        assert np.abs(got - want).max() < 1e-5, case["params"]


def vllms_stop(pieces: list[str], stop: list[str], keep: bool):
    """vLLM v1's detokenizer, one token's text at a time: (tokens kept, text, stop string)."""
    from vllm.v1.engine.detokenizer import check_stop_strings

    text = ""
    for i, piece in enumerate(pieces):
        text += piece
        hit = check_stop_strings(text, len(piece), stop, keep)
        if hit is not None:
            string, offset = hit
            return list(range(i + 1)), text if offset == -1 else text[:offset], string
    return None


@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(st.text("ab c\n\u00e9", max_size=3), max_size=14),
    stop=st.lists(st.text("ab c\n\u00e9", min_size=1, max_size=3), min_size=1, max_size=4),
    keep=st.booleans(),
)
def test_a_stop_string_ends_a_sample_where_vllms_detokenizer_ends_it(pieces, stop, keep):
    decode = lambda ids: "".join(pieces[i] for i in ids)  # noqa: E731
    got = cut_at_stop(decode, list(range(len(pieces))), stop, keep)
    assert got == vllms_stop(pieces, stop, keep)
