"""Bad input to the engine is refused with a TypeError or ValueError that names the
argument, before anything changes: requests, model configs, engines, generate, step."""

import math

import pytest

from pagedsim.config import CacheConfig, SchedulerConfig
from pagedsim.engine import DenseEngine, ModelConfig, PagedEngine, Request, TinyModel
from pagedsim.engine.backend import NumpyAttention, choose

SMALL = TinyModel(ModelConfig(layers=1, heads=2, kv_heads=1, head_dim=8, hidden=16, mlp=32))

BAD_REQUESTS = [
    (dict(max_tokens=2.5), TypeError, "max_tokens"),
    (dict(max_tokens=0), ValueError, "max_tokens"),
    (dict(n=True), TypeError, "n must be an int"),
    (dict(n=1.5), TypeError, "n must be an int"),
    (dict(n=0), ValueError, "n must be"),
    (dict(temperature=math.nan), ValueError, "temperature must be a finite number"),
    (dict(temperature=math.inf), ValueError, "temperature must be a finite number"),
    (dict(temperature=-1), ValueError, "temperature must be a finite number"),
    (dict(temperature="hot"), TypeError, "temperature must be a number"),
    (dict(beam_width=1.5), TypeError, "beam_width"),
    (dict(beam_width=-1), ValueError, "beam_width"),
    (dict(seed="x"), TypeError, "seed"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(top_p=0), ValueError, "top_p"),
    (dict(top_p=1.5), ValueError, "top_p"),
    (dict(top_p=math.nan), ValueError, "top_p"),
    (dict(stop_token_ids=5), TypeError, "stop_token_ids"),
    (dict(length_penalty="long"), TypeError, "length_penalty must be a number"),
    (dict(length_penalty=True), TypeError, "length_penalty must be a number"),
    (dict(length_penalty=math.inf), ValueError, "length_penalty must be a finite number"),
    (dict(repetition_penalty=0), ValueError, "repetition_penalty must be > 0"),
    (dict(repetition_penalty=-1.1), ValueError, "repetition_penalty must be a finite number"),
    (dict(repetition_penalty=math.nan), ValueError, "repetition_penalty"),
    (dict(repetition_penalty="x"), TypeError, "repetition_penalty must be a number"),
    (dict(top_k=-1), ValueError, "top_k"),
    (dict(top_k=2.5), TypeError, "top_k"),
]


@pytest.mark.parametrize("kwargs, error, words", BAD_REQUESTS)
def test_a_request_with_a_bad_field_is_refused_with_an_error_naming_it(kwargs, error, words):
    fields = dict(prompt=(1, 2), max_tokens=3) | kwargs
    with pytest.raises(error, match=words):
        Request(**fields)


@pytest.mark.parametrize(
    "prompt, error",
    [
        ((), ValueError),
        ("ab", TypeError),
        (5, TypeError),
        ((1, -2), ValueError),
        ((True,), TypeError),
    ],
)
def test_a_request_needs_a_non_empty_sequence_of_token_ids(prompt, error):
    with pytest.raises(error, match="prompt"):
        Request(prompt, 2)


@pytest.mark.parametrize(
    "field, value, error",
    [
        ("vocab", 0, ValueError),
        ("layers", 0, ValueError),
        ("hidden", 2.0, TypeError),
        ("kv_heads", 3, ValueError),
        ("head_dim", 7, ValueError),
        ("rope_base", math.nan, ValueError),
        ("rms_eps", 0, ValueError),
        ("tie_embeddings", 1, TypeError),
        ("sliding_window", 0, ValueError),
    ],
)
def test_a_model_config_with_a_bad_field_is_refused(field, value, error):
    with pytest.raises(error, match=field):
        ModelConfig(**{field: value})


@pytest.mark.parametrize("budget, error", [(0, ValueError), (-5, ValueError), (2.5, TypeError)])
def test_an_engine_needs_a_positive_token_budget(budget, error):
    with pytest.raises(error, match="max_num_batched_tokens"):
        PagedEngine(
            SMALL,
            CacheConfig(block_size=4, num_gpu_blocks=8, enable_prefix_caching=False),
            SchedulerConfig(max_num_batched_tokens=budget, preemption_mode="recompute"),
            backend="numpy",
        )


def test_generate_refuses_something_that_is_not_a_request_before_submitting_any():
    engine = PagedEngine(
        SMALL,
        CacheConfig(block_size=4, num_gpu_blocks=8, enable_prefix_caching=False),
        backend="numpy",
    )
    with pytest.raises(TypeError, match="a request must be a Request, got int"):
        engine.generate([Request((1, 2), 2), 5])
    with pytest.raises(TypeError, match="requests must be a list of Request"):
        engine.generate(Request((1, 2), 2))
    assert engine.runs == {} and engine.manager.num_free_blocks == 8


def test_stepping_an_engine_with_nothing_submitted_says_so():
    engine = PagedEngine(
        SMALL,
        CacheConfig(block_size=4, num_gpu_blocks=8, enable_prefix_caching=False),
        backend="numpy",
    )
    with pytest.raises(RuntimeError, match="nothing to step: no request is waiting or running"):
        engine.step()
    assert engine.log == []


def test_the_backend_is_chosen_in_one_place_and_an_object_can_be_injected():
    assert choose("numpy").name == "numpy"
    with pytest.raises(ValueError, match="backend must be one of auto, numpy, kernels"):
        choose("cuda")
    with pytest.raises(TypeError, match="lacks new_cache"):
        choose(object())
    calls = []

    class Counting(NumpyAttention):
        def decode(self, *args):
            calls.append("decode")
            return super().decode(*args)

    engine = PagedEngine(
        SMALL,
        CacheConfig(block_size=4, num_gpu_blocks=8, enable_prefix_caching=False),
        backend=Counting(),
    )
    engine.generate([Request((1, 2, 3), 3)])
    assert calls and engine.backend.name == "numpy"


@pytest.mark.parametrize("model", [5, "model", None, ModelConfig()])
def test_the_dense_engine_refuses_what_is_not_a_model(model):
    with pytest.raises(TypeError, match="model must be a Transformer"):
        DenseEngine(model)


@pytest.mark.parametrize(
    "request_, message",
    [
        (Request((1, 2), 3, n=10**8), "request runs 100000000 sequences; max_num_seqs is 256"),
        (Request((1, 2), 3, beam_width=300), "request runs 300 sequences"),
        (Request((1, 2), 10**9), r"prompt \+ max_tokens = 1000000002 exceeds max_model_len"),
    ],
)
def test_the_dense_engine_refuses_a_request_it_could_never_serve(request_, message):
    engine = DenseEngine(SMALL)
    with pytest.raises(ValueError, match=message):
        engine.generate([Request((1, 2), 2), request_])  # all refused: nothing ran


@pytest.mark.parametrize("temperature", [5e-324, 1e-300, 1e-30])
def test_a_tiny_temperature_is_computed_in_the_log_domain_and_acts_as_greedy(temperature):
    greedy = DenseEngine(SMALL).generate([Request((1, 2, 3), 6)])[0].outputs()
    tiny = (
        DenseEngine(SMALL)
        .generate([Request((1, 2, 3), 6, temperature=temperature, seed=4)])[0]
        .outputs()
    )
    assert tiny == greedy


@pytest.mark.parametrize("field, value", [("layers", 10**9), ("hidden", 10**7), ("vocab", 10**8)])
def test_a_model_too_large_to_allocate_is_refused_before_allocating(field, value):
    with pytest.raises(ValueError, match=field if field == "layers" else "parameters"):
        TinyModel(ModelConfig(**{field: value}))


def test_the_repetition_penalty_divides_positive_and_multiplies_negative_seen_logits():
    from pagedsim.engine.sampling import SamplingParams, process

    logits = [2.0, -2.0, 1.0, 0.5]
    out = process(logits, [0, 1], [1], SamplingParams(temperature=0, repetition_penalty=2.0))
    assert out.tolist() == [1.0, -4.0, 1.0, 0.5]  # tokens 2 and 3 were never seen


def test_top_k_keeps_only_the_k_largest_logits_when_sampling():
    from pagedsim.engine.sampling import SamplingParams, draw, process

    logits = [5.0, 4.0, 0.0, -1.0, 3.0]
    params = SamplingParams(temperature=50.0, top_k=2)
    picks = {draw(process(logits, [], [], params), params, 0, step) for step in range(200)}
    assert picks == {0, 1}
