"""pagedsim's processed next-token distribution against transformers' logits processors.

For random logits and parameters, transformers' RepetitionPenaltyLogitsProcessor,
TemperatureLogitsWarper, MinPLogitsWarper, TopKLogitsWarper and TopPLogitsWarper -- run
in vLLM v1's order (penalties, temperature, min_p, top_k, top_p) -- keep the same tokens
with the same probabilities as pagedsim.engine.sampling. (tests/vllm_oracle/ compares
with vLLM's own functions, frequency and presence penalties included.) transformers'
generate would also apply top_k = 50 by default; vLLM and pagedsim do not.
Needs torch and transformers; skipped without them.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="needs torch (pip install 'pagedsim[oracle]')")
generation = pytest.importorskip("transformers.generation.logits_process")

from pagedsim.engine.sampling import SamplingParams, distribution, process  # noqa: E402


def transformers_distribution(logits, prompt, output, p: SamplingParams) -> np.ndarray:
    ids = torch.tensor([list(prompt) + list(output) or [0]])
    x = torch.tensor([logits], dtype=torch.float32)
    if prompt or output:
        x = generation.RepetitionPenaltyLogitsProcessor(p.repetition_penalty)(ids, x)
    x = generation.TemperatureLogitsWarper(p.temperature)(ids, x)
    if p.min_p > 0:
        x = generation.MinPLogitsWarper(p.min_p)(ids, x)
    if p.top_k > 0:
        x = generation.TopKLogitsWarper(min(p.top_k, len(logits)))(ids, x)
    if p.top_p < 1:
        x = generation.TopPLogitsWarper(p.top_p)(ids, x)
    return torch.softmax(x[0].double(), -1).numpy()


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from([1.0, 1.3, 0.7]),
    st.floats(0.2, 2.0),
    st.sampled_from([0.0, 0.05, 0.3]),
    st.sampled_from([0, 1, 5, 40]),
    st.sampled_from([1.0, 0.9, 0.5, 0.1]),
)
def test_the_processed_distribution_is_transformers(seed, rep, temp, min_p, top_k, top_p):
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(6, 60))
    logits = (rng.standard_normal(vocab) * 3).astype(np.float32)
    prompt = rng.integers(0, vocab, 5).tolist()
    output = rng.integers(0, vocab, 3).tolist()
    p = SamplingParams(
        repetition_penalty=rep, temperature=temp, min_p=min_p, top_k=top_k, top_p=top_p
    )
    got = distribution(process(logits, prompt, output, p))
    want = transformers_distribution(logits.tolist(), prompt, output, p)
    assert np.array_equal(got > 0, want > 0)
    assert np.abs(got - want).max() < 1e-5
