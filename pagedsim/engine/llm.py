"""`LLM(model_dir).generate(prompts, SamplingParams(...))`: vLLM's offline API over the
paged engine.

    llm = LLM("path/to/checkpoint")                       # prefix caching on, as in v1
    out = llm.generate(["Hello"], SamplingParams(max_tokens=8, temperature=0))
    out[0].outputs[0].text, .token_ids, .logprobs, .finish_reason
    llm.chat([{"role": "user", "content": "Hi"}])         # the checkpoint's chat_template
    llm.check_dense(out)                                  # with LLM(..., keep_logits=True)
    llm.llm_engine.log, llm.llm_engine.stats              # what the engine did, per step

Engine arguments are vLLM's, as keywords (`block_size=`, `preemption_mode=`,
`generation_config=` "auto" or "none", ... and pagedsim's `keep_logits=`) or whole, as
`cache_config=` and `scheduler_config=`; a keyword wins. As in vLLM, `llm_engine` (a
PagedEngine) lives across `generate` calls, so a later call hits the blocks an earlier one
cached; it is built again when a batch needs more blocks or the other generation: v1
serves unless a request forks (n > 1, beam search), preemption_mode is "swap" or a pool is
under test (sliding-window models always run v1). A finished request leaves `llm_engine`
unless `keep_logits=True` (for `check_dense`).

`trace=True` records the manager's every call and checks its invariants after every step;
`pool=Pool(...)` serves a block manager under test beside pagedsim's own (lockstep.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..config import CacheConfig, SchedulerConfig
from ..errors import bool_arg
from ..scheduler_common import check_configs
from . import hf
from .dense import DenseEngine
from .hf_json import read_json
from .lockstep import Lockstep, Pool
from .model import Transformer
from .paged import PagedEngine, Run
from .requests import Request, RequestState
from .sampling import BeamSearchParams, SamplingParams, top_logprobs

Params = SamplingParams | BeamSearchParams
# vLLM's engine arguments pagedsim reads -> the config that holds each
ENGINE_ARGS = {
    **dict.fromkeys(
        "block_size enable_prefix_caching num_gpu_blocks_override num_cpu_blocks".split(),
        "cache",
    ),
    **dict.fromkeys(
        "max_num_batched_tokens preemption_mode max_num_seqs max_model_len policy "
        "long_prefill_token_threshold".split(),
        "scheduler",
    ),
}
# the Python API's scheduler: vLLM's budget; v1 preempts by recomputing
LLM_SCHEDULER_CONFIG = SchedulerConfig(max_num_batched_tokens=2048, preemption_mode="recompute")


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, float]] | None
    finish_reason: str | None = None  # "stop" or "length"
    stop_reason: int | str | None = None  # the stop token id or stop string


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = True
    num_cached_tokens: int | None = None  # prompt tokens served by the prefix cache (vLLM's)


@dataclass(frozen=True)
class EngineStep:
    """One step of a traced engine (`LLM(trace=True)`)."""

    snapshot: int  # index of the manager's snapshot after the step (llm_engine.manager.trace)
    block_labels: tuple[str, ...]  # [num_gpu_blocks] the text each block holds ("" when none)


class DenseCheck(NamedTuple):
    """The paged engine's requests served again by the dense engine (`LLM.check_dense`)."""

    tokens_match: bool  # every request's tokens equal
    logit_positions_match: bool  # logits kept at the same positions
    max_logit_diff: float  # the largest logit difference over shared positions


class LLM:
    """A checkpoint served by the paged engine, with vLLM's offline entry points."""

    def __init__(
        self,
        model: Transformer | str | Path,
        *,
        tokenizer: Any = None,
        cache_config: CacheConfig | None = None,
        scheduler_config: SchedulerConfig | None = None,
        backend: Any = "numpy",
        pool: Pool | None = None,
        trace: bool = False,
        **engine_args: Any,
    ):
        """`model`: a checkpoint directory, or a loaded Transformer (then `tokenizer`, a
        `tokenizers.Tokenizer`, is the only one: without it prompts are token ids)."""
        if isinstance(model, Transformer):
            self.model, directory = model, None
        else:
            directory = Path(model)
            self.model = hf.load_model(directory)
            tokenizer = tokenizer if tokenizer is not None else hf.load_tokenizer(directory)
        self.directory, self.tokenizer = directory, tokenizer
        generation = engine_args.pop("generation_config", "auto")
        if generation not in ("auto", "none"):
            raise ValueError(f"generation_config must be 'auto' or 'none', got {generation!r}")
        info = getattr(self.model, "info", {})
        # "auto": generation_config.json's eos_token_id, else config.json's (vLLM's EOS)
        eos = info.get("stop_token_ids" if generation == "auto" else "config_eos_token_ids")
        self.eos = tuple(eos or ())
        # every position's logits, and every served request, for check_dense
        self.keep_logits = bool_arg("keep_logits", engine_args.pop("keep_logits", False))
        self.cache_config, self.scheduler_config = engine_configs(
            cache_config or CacheConfig(), scheduler_config or LLM_SCHEDULER_CONFIG, engine_args
        )
        self.backend, self.pool, self.trace = backend, pool, trace or pool is not None
        self.llm_engine: PagedEngine | None = None  # vLLM's name; built at the first call
        self.lockstep: Lockstep | None = None  # with `pool`: the reference beside it
        self.steps: list[EngineStep] = []  # trace: one per engine step of llm_engine
        self._served: dict[str, Run] = {}  # keep_logits: request id -> its run in llm_engine
        self._num_gpu_blocks = 0  # llm_engine's pool
        self._next_id = 0

    def generate(
        self, prompts: Any, sampling_params: Params | Sequence[Params] | None = None
    ) -> list[RequestOutput]:
        """One RequestOutput per prompt: a string, or a list of token ids."""
        prompts = [prompts] if isinstance(prompts, str) or _is_ids(prompts) else list(prompts)
        params = sampling_params if sampling_params is not None else SamplingParams()
        every = list(params) if isinstance(params, Sequence) else [params] * len(prompts)
        if len(every) != len(prompts):
            raise ValueError(
                f"{len(every)} SamplingParams for {len(prompts)} prompts; give one or one each"
            )
        ids = [self._encode(p) for p in prompts]
        runs = self._run_engine([self._request(i, p) for i, p in zip(ids, every, strict=True)])
        out = []
        for prompt, prompt_ids, p, run in zip(prompts, ids, every, runs, strict=True):
            rid = str(self._next_id)
            self._next_id += 1
            if self.keep_logits:
                self._served[rid] = run
            state = run.state
            samples = [
                self._completion(k, prompt_ids, s, p, state) for k, s in enumerate(state.outputs())
            ]
            text = prompt if isinstance(prompt, str) else None
            out.append(RequestOutput(rid, text, list(prompt_ids), samples, True, run.hit_tokens))
        return out

    def check_dense(self, outputs: Sequence[RequestOutput]) -> DenseCheck:
        """Serve the requests behind `outputs` (of an LLM with keep_logits=True) again on
        the dense engine (dense.py) and compare tokens and logits."""
        states = [self._run_of(o.request_id).state for o in outputs]
        dense = DenseEngine(self.model).generate([s.request for s in states])
        return compare(dense, states)

    def chat(
        self, messages: Any, sampling_params: SamplingParams | None = None, **template_kwargs: Any
    ) -> list[Any]:
        """generate() on the checkpoint's chat template applied to `messages` (one
        conversation, a list of {"role", "content"} dicts, or a list of them)."""
        conversations = messages if messages and isinstance(messages[0], list) else [messages]
        texts = [self.apply_chat_template(c, **template_kwargs) for c in conversations]
        return self.generate(texts, sampling_params)

    def apply_chat_template(
        self, messages: list[Any], add_generation_prompt: bool = True, **extra: Any
    ) -> str:
        """The text of a conversation, by tokenizer_config.json's chat_template (sandboxed)."""
        template, special = self._template()
        return render_chat(template, messages, add_generation_prompt, {**special, **extra})

    def _template(self) -> tuple[Any, ...]:
        if self.directory is None:
            raise ValueError("chat needs a checkpoint directory with tokenizer_config.json")
        path = self.directory / "tokenizer_config.json"
        config = read_json(path)
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: the "default" one
            template = next(
                (t.get("template") for t in template if t.get("name") == "default"), None
            )
        if not isinstance(template, str):
            raise ValueError(
                f"{path}: field chat_template is missing; this checkpoint has no chat template"
            )
        special = {
            k: _token_text(config.get(k))
            for k in ("bos_token", "eos_token", "unk_token", "pad_token")
        }
        return template, special

    def _encode(self, prompt: Any) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("a text prompt needs the checkpoint's tokenizer; give token ids")
            return list(self.tokenizer.encode(prompt).ids)
        return [int(t) for t in prompt]

    def _request(self, prompt_ids: list[int], p: Params) -> Request:
        eos = () if p.ignore_eos else self.eos
        if isinstance(p, BeamSearchParams):
            return Request(
                tuple(prompt_ids),
                p.max_tokens,
                beam_width=p.beam_width,
                stop_token_ids=eos,
                length_penalty=p.length_penalty,
                repetition_penalty=p.repetition_penalty,
            )
        stops = tuple(dict.fromkeys([*(p.stop_token_ids or ()), *eos]))
        return Request(
            tuple(prompt_ids),
            p.max_tokens or 16,
            n=p.n,
            stop_token_ids=stops,
            seed=p.seed or 0,
            params=p,
        )

    def _run_engine(self, requests: list[Request]) -> list[Run]:
        """Submit, then step the engine (and the reference pool beside it) until every
        request is done; vLLM's LLM._run_engine. Returns the requests' runs."""
        engine = self._engine_for(requests)
        if not self.trace:  # the step log of this call only; a trace keeps every step's
            engine.log.clear()
        beside = self.lockstep
        try:
            runs = [(beside or engine).submit(r, self.keep_logits) for r in requests]
            while engine.runs or (beside is not None and beside.reference.runs):
                serving = bool(engine.runs)
                if beside is not None:
                    beside.step()
                else:
                    engine.step()
                trace = engine.manager.trace
                if serving and self.trace:
                    assert trace is not None, "a traced LLM's engine records a trace"
                    last = len(trace.snapshots) - 1
                    self.steps.append(EngineStep(last, self._block_labels(engine)))
        except BaseException:  # a half-served batch stays in no engine: the next call builds one
            self.llm_engine, self.lockstep, self._served = None, None, {}
            raise
        return runs

    def _engine_for(self, requests: list[Request]) -> PagedEngine:
        """llm_engine, built (again) when it cannot serve `requests` (module docstring)."""
        forks = any(r.width > 1 or r.beam_width for r in requests)
        v1 = "sliding" in self.model.config.windowed or (
            self.scheduler_config.preemption_mode == "recompute" and self.pool is None and not forks
        )
        size = self.cache_config.block_size
        num_gpu_blocks = self.cache_config.num_gpu_blocks_override or 4 + sum(
            r.width * -(-(len(r.prompt) + r.max_tokens) // size) for r in requests
        )
        engine = self.llm_engine
        if engine is not None and engine.mode == ("v1" if v1 else "v0"):
            if num_gpu_blocks <= self._num_gpu_blocks:
                return engine
        return self._build(v1, num_gpu_blocks)

    def _build(self, v1: bool, num_gpu_blocks: int) -> PagedEngine:
        cache = replace(self.cache_config, num_gpu_blocks=num_gpu_blocks)
        scheduler = self.scheduler_config
        if v1:  # v1 always recomputes
            scheduler = replace(scheduler, preemption_mode="recompute")

        def engine(manager: Any, backend: Any, check: bool) -> PagedEngine:
            return PagedEngine(
                self.model,
                cache,
                scheduler,
                backend=backend,
                trace=self.trace,
                check=check,
                manager=manager,
                mode="v1" if v1 else "v0",
            )

        self.lockstep, self.steps, self._served = None, [], {}
        self._num_gpu_blocks = num_gpu_blocks
        if self.pool is None:
            self.llm_engine = engine(None, self.backend, self.trace)
            return self.llm_engine
        # the pool under test, compared with the reference manager call by manager call
        tested = engine(self.pool.manager(num_gpu_blocks, cache.block_size), self.backend, False)
        reference = engine(None, tested.backend, True)
        decode = None if self.tokenizer is None else self._decode
        self.lockstep = Lockstep(tested, reference, self.pool.name, decode)
        self.llm_engine = tested
        return tested

    def _block_labels(self, engine: PagedEngine) -> tuple[str, ...]:
        """The text each physical block holds (live blocks and cache-hittable free ones)."""
        held = engine.block_tokens()
        blocks = range(engine.manager.num_gpu_blocks)
        return tuple(self._decode(held[b]) if b in held else "" for b in blocks)

    def _run_of(self, request_id: str) -> Run:
        if not self.keep_logits:
            raise ValueError(
                "check_dense needs the logits of every position: build the LLM with "
                "keep_logits=True (pagedsim generate --check-dense does)"
            )
        if request_id not in self._served:
            raise ValueError(
                f"request {request_id!r} was not served by this LLM's current engine "
                f"(another LLM served it, or the engine was built again since)"
            )
        return self._served[request_id]

    def _completion(
        self, index: int, prompt_ids: list[int], tokens: list[int], p: Params, state: RequestState
    ) -> CompletionOutput:
        """One sample: stop strings applied, text decoded, logprobs from the raw logits."""
        tokens = list(tokens)
        finish = "length"
        reason: int | str | None = None  # a stop token id, or a stop string
        if (
            tokens
            and tokens[-1] in state.request.stop_token_ids
            and len(tokens) <= (p.max_tokens or 16)
        ):
            finish, reason = "stop", tokens[-1]
        keep = p.include_stop_str_in_output  # a stop token's text is left out, as in vLLM
        text_tokens = tokens[:-1] if finish == "stop" and not keep else tokens
        text = self._decode(text_tokens)
        sampled = p if isinstance(p, SamplingParams) else None
        if sampled is not None and sampled.stop and self.tokenizer is not None:
            cut = cut_at_stop(self._decode, tokens, sampled.stop, keep)
            if cut is not None:
                tokens, text, reason = cut
                finish = "stop"
        logprobs = None
        if sampled is not None and sampled.logprobs is not None:
            logprobs = []
            for i, t in enumerate(tokens):
                raw = state.logits[tuple([*prompt_ids, *tokens[:i]])]
                logprobs.append(top_logprobs(raw, t, sampled.logprobs))
        total = sum(lp[t] for lp, t in zip(logprobs, tokens, strict=True)) if logprobs else None
        return CompletionOutput(index, text, tokens, total, logprobs, finish, reason)

    def _decode(self, ids: Iterable[int]) -> str:
        return "" if self.tokenizer is None else self.tokenizer.decode(list(ids))


def cut_at_stop(
    decode: Callable[[list[int]], str], tokens: list[int], stop: Sequence[str], keep: bool
) -> tuple[list[int], str, str] | None:
    """(the tokens up to the one that completes a stop string, the text cut there, that
    string), or None, as vLLM v1's `check_stop_strings` decides token by token: the string
    ending earliest wins, ties in `stop`'s order. Bisection: O(log n) decodes."""
    if not stop or not any(s in decode(tokens) for s in stop):
        return None
    lo, hi = 1, len(tokens)  # the shortest prefix whose text holds a stop string
    while lo < hi:
        mid = (lo + hi) // 2
        text = decode(tokens[:mid])
        lo, hi = (lo, mid) if any(s in text for s in stop) else (mid + 1, hi)
    text = decode(tokens[:lo])
    end, first = min((text.find(s) + len(s), k) for k, s in enumerate(stop) if s in text)
    return tokens[:lo], text[: end if keep else end - len(stop[first])], stop[first]


def engine_configs(
    cache: CacheConfig, scheduler: SchedulerConfig, engine_args: dict[str, Any]
) -> tuple[CacheConfig, SchedulerConfig]:
    """vLLM's engine arguments given as keywords, over the configs (a keyword wins)."""
    check_configs(scheduler, cache)
    for name in engine_args:
        if name not in ENGINE_ARGS:
            raise TypeError(
                f"LLM() got an unknown engine argument {name!r}; it takes "
                f"{', '.join([*ENGINE_ARGS, 'generation_config', 'keep_logits'])}"
            )
    by = {
        kind: {k: v for k, v in engine_args.items() if ENGINE_ARGS[k] == kind}
        for kind in ENGINE_ARGS.values()
    }
    return replace(cache, **by.get("cache", {})), replace(scheduler, **by.get("scheduler", {}))


def compare(dense: list[RequestState], paged: list[RequestState]) -> DenseCheck:
    """Tokens equal per request, and the largest logit difference over shared positions."""
    pairs = list(zip(dense, paged, strict=True))
    diffs = [
        float(np.abs(d.logits[k] - p.logits[k]).max())
        for d, p in pairs
        for k in d.logits
        if k in p.logits
    ]
    return DenseCheck(
        tokens_match=all(d.outputs() == p.outputs() for d, p in pairs),
        logit_positions_match=all(set(d.logits) == set(p.logits) for d, p in pairs),
        max_logit_diff=max(diffs, default=0.0),
    )


def _is_ids(prompt: object) -> bool:
    return (
        isinstance(prompt, (list, tuple))
        and bool(prompt)
        and all(isinstance(t, int) for t in prompt)
    )


def _token_text(value: object) -> str:
    if isinstance(value, dict):  # {"content": "<s>", ...} (AddedToken as saved)
        value = value.get("content")
    return value if isinstance(value, str) else ""


def render_chat(
    template: str, messages: list[Any], add_generation_prompt: bool, variables: dict[str, Any]
) -> str:
    """Render a chat template in jinja2's ImmutableSandboxedEnvironment (transformers'
    settings: trim_blocks, lstrip_blocks, raise_exception, tojson)."""
    try:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ImportError("chat templates need jinja2 (pip install 'pagedsim[chat]')") from None

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(
            messages=messages, add_generation_prompt=add_generation_prompt, **variables
        )
    except TemplateError as e:
        raise ValueError(f"chat_template: {e}") from None
