"""The oracle for beam search with a stop token: on a tiny random Llama made by
`transformers`' own `save_pretrained`, both engines return the hypotheses of
`generate(num_beams=W, num_return_sequences=W, do_sample=False, eos_token_id=...,
length_penalty=...)`, best first, each cut after its EOS (transformers pads after it).

The cases were picked so that EOS matters: a hypothesis ends with it before max_tokens,
and in the first one the search also stops early (early_stopping=False's heuristic).
num_beams=1 is transformers' greedy search, which stops at EOS the same way.
Needs torch and transformers, like test_hf_transformers_oracle.py.
"""

import pytest

torch = pytest.importorskip(
    "torch", reason="the transformers oracle needs torch (pip install 'pagedsim[oracle]')"
)
pytest.importorskip("transformers", reason="the oracle needs transformers")

from pagedsim.config import CacheConfig  # noqa: E402
from pagedsim.engine import DenseEngine, PagedEngine, Request  # noqa: E402
from pagedsim.engine.hf import load_model  # noqa: E402

from .test_hf_transformers_oracle import PROMPT, save  # noqa: E402

MAX_TOKENS = 12


def transformers_hypotheses(hf, width, eos, length_penalty):
    with torch.no_grad():
        out = hf.generate(
            torch.tensor([PROMPT]),
            do_sample=False,
            num_beams=width,
            num_return_sequences=width,
            max_new_tokens=MAX_TOKENS,
            eos_token_id=eos,
            pad_token_id=eos,
            length_penalty=length_penalty,
            attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
        )
    rows = out[:, len(PROMPT) :].tolist()
    return [row[: row.index(eos) + 1] if eos in row else row for row in rows]


@pytest.mark.parametrize(
    ("width", "eos", "length_penalty"), [(2, 35, 1.0), (3, 1, 0.0), (3, 50, -1.0), (1, 35, 1.0)]
)
def test_beams_with_a_stop_token_equal_transformers_beam_search(
    tmp_path, width, eos, length_penalty
):
    hf = save(tmp_path, "llama-gqa-untied", 0.2)
    want = transformers_hypotheses(hf, width, eos, length_penalty)
    assert any(h[-1] == eos and len(h) < MAX_TOKENS for h in want), "EOS must matter here"
    model = load_model(tmp_path)
    request = Request(
        tuple(PROMPT),
        MAX_TOKENS,
        beam_width=width,
        stop_token_ids=(eos,),
        length_penalty=length_penalty,
    )
    dense = DenseEngine(model).generate([request])[0]
    paged = PagedEngine(
        model,
        CacheConfig(block_size=4, num_gpu_blocks=64, enable_prefix_caching=True),
        backend="numpy",
        check=True,
        mode="v0",
    ).generate([request])[0]
    assert dense.outputs() == want and paged.outputs() == want
    if (width, eos) == (2, 35):  # transformers stopped before max_tokens: so did the engine
        assert dense.generated < MAX_TOKENS
