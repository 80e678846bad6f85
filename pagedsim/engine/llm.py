"""`LLM(model_dir).generate(prompts, SamplingParams(...))`: vLLM's offline API over the
paged engine.

    llm = LLM("path/to/checkpoint")                       # prefix caching on, as in v1
    out = llm.generate(["Hello"], SamplingParams(max_tokens=8, temperature=0))
    out[0].outputs[0].text, .token_ids, .logprobs, .finish_reason
    llm.chat([{"role": "user", "content": "Hi"}])         # the checkpoint's chat_template

Outputs are vLLM's shapes: one RequestOutput per prompt (prompt, prompt_token_ids,
outputs), and one CompletionOutput per sample (n). `logprobs` is a list (one dict per
generated token) of {token id: log-probability}: the top `logprobs` tokens and the
chosen one, of the raw model logits (vLLM's default raw_logprobs). A stop string ends a
sample where it occurs (finish_reason "stop", stop_reason the string), its text cut
before the string unless include_stop_str_in_output, as vLLM's detokenizer cuts; a stop
token (EOS unless ignore_eos, or stop_token_ids) ends it with the token kept in
token_ids and left out of the text.

The chat template is rendered with jinja2's ImmutableSandboxedEnvironment, as
transformers renders it (a template cannot reach Python objects or change its inputs);
jinja2 is the optional extra `pagedsim[chat]`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import CacheConfig, SchedulerConfig
from . import hf
from .hf_json import read_json
from .model import Transformer
from .paged import PagedEngine
from .requests import Request
from .sampling import SamplingParams, find_stop, top_logprobs


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[Any]
    cumulative_logprob: float | None
    logprobs: list[Any] | None
    finish_reason: str | None = None  # "stop" or "length"
    stop_reason: int | str | None = None  # the stop token id or stop string


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[Any]
    outputs: list[Any] = field(default_factory=list)
    finished: bool = True


class LLM:
    """A checkpoint served by the paged engine, with vLLM's offline entry points."""

    def __init__(
        self,
        model: Transformer | str | Path,
        *,
        block_size: int = 16,
        enable_prefix_caching: bool = True,
        max_num_batched_tokens: int = 2048,
        backend: str = "numpy",
    ):
        if isinstance(model, Transformer):
            self.model, self.tokenizer, directory = model, None, None
        else:
            directory = Path(model)
            self.model = hf.load_model(directory)
            self.tokenizer = hf.load_tokenizer(directory)
        self.directory = directory
        info = getattr(self.model, "info", {})
        self.eos = tuple(info.get("stop_token_ids", ()))
        self.block_size = block_size
        self.prefix_caching = enable_prefix_caching
        self.budget = max_num_batched_tokens
        self.backend = backend
        self._next_id = 0

    def generate(
        self, prompts: Any, sampling_params: SamplingParams | list[Any] | None = None
    ) -> list[Any]:
        """One RequestOutput per prompt: a string, or a list of token ids."""
        prompts = [prompts] if isinstance(prompts, str) or _is_ids(prompts) else list(prompts)
        params = sampling_params if sampling_params is not None else SamplingParams()
        every = params if isinstance(params, list) else [params] * len(prompts)
        if len(every) != len(prompts):
            raise ValueError(
                f"{len(every)} SamplingParams for {len(prompts)} prompts; give one or one each"
            )
        ids = [self._encode(p) for p in prompts]
        requests = [self._request(i, p) for i, p in zip(ids, every, strict=True)]
        states = self._serve(requests)
        out = []
        for prompt, prompt_ids, p, state in zip(prompts, ids, every, states, strict=True):
            rid = str(self._next_id)
            self._next_id += 1
            samples = [
                self._completion(k, prompt_ids, s, p, state) for k, s in enumerate(state.outputs())
            ]
            out.append(
                RequestOutput(
                    rid, prompt if isinstance(prompt, str) else None, list(prompt_ids), samples
                )
            )
        return out

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

    def _request(self, prompt_ids: list[Any], p: SamplingParams) -> Request:
        eos = () if p.ignore_eos else self.eos
        stops = tuple(dict.fromkeys([*(p.stop_token_ids or ()), *eos]))
        return Request(
            tuple(prompt_ids),
            p.max_tokens or 16,
            n=p.n,
            stop_token_ids=stops,
            seed=p.seed or 0,
            params=p,
        )

    def _serve(self, requests: list[Any]) -> list[Any]:
        blocks = 4 + sum(
            r.width * -(-(len(r.prompt) + r.max_tokens) // self.block_size) for r in requests
        )
        # v1 serves one sequence per request; n > 1 (parallel sampling) is v0's fork
        forks = any(r.width > 1 or r.beam_width for r in requests)
        engine = PagedEngine(
            self.model,
            CacheConfig(
                block_size=self.block_size,
                num_gpu_blocks=blocks,
                enable_prefix_caching=self.prefix_caching,
            ),
            SchedulerConfig(max_num_batched_tokens=self.budget, preemption_mode="recompute"),
            backend=self.backend,
            mode="v0" if forks else "v1",
        )
        for r in requests:
            engine.submit(r)
        while not all(run.status == "done" for run in engine.runs):
            engine.step()
        return [run.state for run in engine.runs]

    def _completion(
        self, index: int, prompt_ids: list[Any], tokens: list[Any], p: SamplingParams, state: Any
    ) -> CompletionOutput:
        """One sample: stop strings applied, text decoded, logprobs from the raw logits."""
        tokens = list(tokens)
        finish, reason = "length", None
        if (
            tokens
            and tokens[-1] in state.request.stop_token_ids
            and len(tokens) <= (p.max_tokens or 16)
        ):
            finish, reason = "stop", tokens[-1]
        keep = p.include_stop_str_in_output  # a stop token's text is left out, as in vLLM
        text_tokens = tokens[:-1] if finish == "stop" and not keep else tokens
        text = self._decode(text_tokens)
        if p.stop and self.tokenizer is not None:
            cut = self._stop_strings(tokens, p)
            if cut is not None:
                tokens, text, reason = cut
                finish = "stop"
        logprobs = None
        if p.logprobs is not None:
            logprobs = []
            for i, t in enumerate(tokens):
                raw = state.logits[tuple([*prompt_ids, *tokens[:i]])]
                logprobs.append(top_logprobs(raw, t, p.logprobs))
        total = sum(lp[t] for lp, t in zip(logprobs, tokens, strict=True)) if logprobs else None
        return CompletionOutput(index, text, tokens, total, logprobs, finish, reason)

    def _stop_strings(self, tokens: list[Any], p: SamplingParams) -> tuple[Any, ...] | None:
        """(tokens up to the one completing a stop string, the cut text, the string)."""
        stops = list(p.stop or ())
        previous = ""
        for i in range(1, len(tokens) + 1):
            text = self._decode(tokens[:i])
            new = len(text) - len(previous) if text.startswith(previous) else len(text)
            cut = find_stop(text, new, stops, p.include_stop_str_in_output)
            if cut is not None:
                stop = next(s for s in stops if s in text)
                return tokens[:i], text[:cut], stop
            previous = text
        return None

    def _decode(self, ids: list[Any]) -> str:
        return "" if self.tokenizer is None else self.tokenizer.decode(list(ids))


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
