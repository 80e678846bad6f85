"""pagedsim.LLM: vLLM's offline API over the paged engine, on a tiny checkpoint.

Greedy tokens equal an independent float64 forward of the checkpoint files; text,
stop strings (cut as vLLM cuts), stop tokens, min_tokens, logprobs (of the raw logits),
n samples and the sandboxed chat template are each checked.
"""

import json

import numpy as np
import pytest

import pagedsim
from pagedsim.engine.sampling import SamplingParams

from .checkpoints import reference_greedy, reference_logits, write_checkpoint

PROMPT = "the cat sat on"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("llm"), vocab=40, layers=2, seed=3)


@pytest.fixture(scope="module")
def llm(checkpoint):
    return pagedsim.LLM(checkpoint, block_size=4)


def test_greedy_text_and_tokens_match_an_independent_forward(llm, checkpoint):
    assert llm.cache_config.enable_prefix_caching  # on by default, as in vLLM v1
    (out,) = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=12))
    ids = out.prompt_token_ids
    assert ids == llm.tokenizer.encode(PROMPT).ids
    sample = out.outputs[0]
    assert sample.token_ids == reference_greedy(checkpoint, ids, 12)
    assert sample.text == llm.tokenizer.decode(sample.token_ids)
    assert sample.finish_reason == "length"


def test_a_stop_string_cuts_the_text_as_vllm_does(llm):
    plain = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=12))[0].outputs[0]
    stop = plain.text[3:5]  # two characters the greedy text holds
    assert stop and plain.text.find(stop) == 3
    cut = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=12, stop=stop))
    sample = cut[0].outputs[0]
    assert sample.text == plain.text[:3] and sample.finish_reason == "stop"
    assert sample.stop_reason == stop and sample.token_ids == plain.token_ids[:5]
    kept = llm.generate(
        PROMPT,
        SamplingParams(temperature=0, max_tokens=12, stop=[stop], include_stop_str_in_output=True),
    )[0].outputs[0]
    assert kept.text == plain.text[:5]


def test_stop_token_ids_min_tokens_and_ignore_eos(llm):
    plain = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=10))[0].outputs[0]
    token = plain.token_ids[2]
    first = plain.token_ids.index(token)
    stopped = llm.generate(
        PROMPT, SamplingParams(temperature=0, max_tokens=10, stop_token_ids=[token])
    )[0].outputs[0]
    assert stopped.token_ids == plain.token_ids[: first + 1]
    assert stopped.finish_reason == "stop" and stopped.stop_reason == token
    late = llm.generate(
        PROMPT,
        SamplingParams(temperature=0, max_tokens=10, stop_token_ids=[token], min_tokens=first + 2),
    )[0].outputs[0]
    assert token not in late.token_ids[: first + 2]  # masked until min_tokens


def test_logprobs_are_the_top_n_of_the_raw_logits(llm, checkpoint):
    out = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=4, logprobs=3))[0]
    sample, ids = out.outputs[0], out.prompt_token_ids
    assert len(sample.logprobs) == 4
    for i, (token, lp) in enumerate(zip(sample.token_ids, sample.logprobs, strict=True)):
        raw = reference_logits(checkpoint, ids + sample.token_ids[:i])[-1]
        want = raw - raw.max() - np.log(np.exp(raw - raw.max()).sum())
        best = set(np.argsort(-want)[:3].tolist()) | {token}
        assert set(lp) == best
        assert all(abs(lp[t] - want[t]) < 1e-4 for t in lp)
    assert sample.cumulative_logprob == pytest.approx(
        sum(lp[t] for lp, t in zip(sample.logprobs, sample.token_ids, strict=True))
    )


def test_n_seeded_samples_repeat_and_differ_from_each_other(llm):
    params = SamplingParams(n=3, temperature=1.5, seed=7, max_tokens=8, ignore_eos=True)
    one, two = llm.generate(PROMPT, params), llm.generate(PROMPT, params)
    a = [s.token_ids for s in one[0].outputs]
    assert a == [s.token_ids for s in two[0].outputs] and len(a) == 3
    assert len({tuple(t) for t in a}) > 1


def test_chat_applies_the_template_in_a_sandbox(checkpoint, llm):
    template = (
        "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }};{% endfor %}"
        "{% if add_generation_prompt %}a:{% endif %}"
    )
    (checkpoint / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    messages = [{"role": "user", "content": "hi"}]
    assert llm.apply_chat_template(messages) == "u:hi;a:"
    (out,) = llm.chat(messages, SamplingParams(temperature=0, max_tokens=3))
    assert out.prompt == "u:hi;a:"
    escape = "{{ messages.__class__.__mro__ }}{{ messages.append(1) }}"
    (checkpoint / "tokenizer_config.json").write_text(json.dumps({"chat_template": escape}))
    with pytest.raises(ValueError, match="chat_template"):
        llm.apply_chat_template(messages)
    assert messages == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "field, value",
    [
        ("temperature", -1.0),
        ("top_p", 0.0),
        ("top_k", -2),
        ("min_p", 1.5),
        ("presence_penalty", 3.0),
        ("repetition_penalty", 0.0),
        ("max_tokens", 0),
        ("stop", [""]),
    ],
)
def test_a_bad_sampling_parameter_is_one_line_naming_it(field, value):
    with pytest.raises((ValueError, TypeError)) as e:
        SamplingParams(**{field: value})
    assert field in str(e.value) and len(str(e.value).splitlines()) == 1
