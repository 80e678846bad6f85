"""`pagedsim generate`: a real model served from pagedsim's blocks, step by step.

With no --model it serves the shipped character-level Shakespeare model
(models/shakespeare: one token per character, so a block of 16 tokens holds 16
characters); --model DIR serves a local Hugging Face checkpoint (hf.py). With no
--prompt it runs a small mixed workload on a pool too small for all of it at once:

    r0  a speech that starts with a shared prefix, greedy
    r1  the same prefix, another speaker: n = 2 seeded samples (v0 fork + copy-on-write)
    r2  beam search, width 2 (forks, copy-on-write, beams freed)
    r3  r0's prompt again: a prefix-cache hit capped at num_tokens - 1 (v1)

Each step prints its batch and what the block manager did; the end prints each
request's text, its prefix-cache hits, and whether every token and logit matched the
dense engine. --turns N serves a conversation: each turn's prompt is the transcript so far
and the next speaker's cue, so turn 2 on hits turn 1's prompt *and* answer blocks (v1
caches generated blocks too). `serve` goes through `pagedsim.LLM` (llm.py), as a vLLM
user would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..block_table import blocks_needed
from ..config import CacheConfig, SchedulerConfig
from ..trace import Snapshot
from .hf import load_model, load_tokenizer
from .llm import LLM, DenseCheck, EngineStep, Params, RequestOutput
from .lockstep import Pool
from .model import Transformer
from .paged import PagedEngine
from .sampling import BeamSearchParams, SamplingParams

DEFAULT_MODEL = Path(__file__).with_name("models") / "shakespeare"
SHARED = "ROMEO.\nBut soft, what light through yonder window breaks?\n"
CUES = ("\n\nJULIET.\n", "\n\nROMEO.\n")  # --turns: the next speaker, alternating
Fields = dict[str, Any]  # one request as the command line words it (see `params`)


def load(model_dir: str | Path | None = None) -> tuple[Transformer, Any]:
    """(model, tokenizer) from DIR, or the shipped model."""
    directory = DEFAULT_MODEL if model_dir is None else Path(model_dir)
    return load_model(directory), load_tokenizer(directory)


def mix(max_tokens: int) -> list[tuple[str, Fields]]:
    """The default workload (see the module docstring): (prompt, fields) per request."""
    first = SHARED + "It is the east, and Juliet is the sun.\n"
    return [
        (first, dict(max_tokens=max_tokens)),
        (SHARED + "\nJULIET.\n", dict(max_tokens=max_tokens, n=2, temperature=0.8, seed=7)),
        (
            "FRIAR LAWRENCE.\nThese violent delights",
            dict(max_tokens=max_tokens, beam_width=2, eos=False),
        ),
        (first, dict(max_tokens=max(1, max_tokens // 2))),
    ]


def params(fields: Fields) -> Params:
    """One request's fields (eos False: no stop token) as vLLM's parameters; greedy unless
    the fields ask to sample (apply_generation_config)."""
    eos = fields.get("eos", True)
    if fields.get("beam_width"):
        return BeamSearchParams(
            fields["beam_width"],
            fields["max_tokens"],
            ignore_eos=not eos,
            repetition_penalty=fields.get("repetition_penalty", 1.0),
        )
    asked = ("n", "temperature", "top_p", "top_k", "seed", "repetition_penalty")
    chosen = {k: fields[k] for k in asked if k in fields}
    return SamplingParams(
        **{"temperature": 0.0, **chosen}, max_tokens=fields["max_tokens"], ignore_eos=not eos
    )


NOT_CHECKED: dict[str, None] = dict.fromkeys(DenseCheck._fields)


@dataclass(frozen=True)
class LabelledSnapshot(Snapshot):
    block_labels: tuple[str, ...] = ()  # [num_gpu_blocks] the text each block holds ("" when none)


def text(tok: Any, ids: Sequence[int]) -> str | None:
    """The text of token ids, or None without a tokenizer (a --prompt-ids run)."""
    return None if tok is None else str(tok.decode(list(ids)))


DEFAULT_MAX_TOKENS = 32


def apply_generation_config(
    generation: dict[str, Any], overrides: Fields, max_tokens: int | None
) -> tuple[Fields, int, dict[str, Any]]:
    """(request fields, max_tokens, what came from the file), as vLLM's `--generation-config
    auto` reads generation_config.json: the user's flags win; eos_token_id always stops;
    max_new_tokens stands in for --max-tokens. Greedy unless asked to sample (--temperature
    > 0, -n > 1, --seed, --top-p or --top-k: then the file's temperature, top_p and top_k);
    do_sample alone does not sample, and no top_k means none (transformers differ in both)."""
    used: dict[str, Any] = {}
    fields = dict(overrides)
    if "eos_token_id" in generation:
        used["eos_token_id"] = list(generation["eos_token_id"])
    if max_tokens is None:
        max_tokens = generation.get("max_new_tokens", DEFAULT_MAX_TOKENS)
        if "max_new_tokens" in generation:
            used["max_new_tokens"] = max_tokens
    if "repetition_penalty" not in fields and "repetition_penalty" in generation:
        fields["repetition_penalty"] = used["repetition_penalty"] = generation["repetition_penalty"]
    asked = fields.get("n", 1) > 1 or any(k in fields for k in ("seed", "top_p", "top_k"))
    if "temperature" not in fields and asked:
        fields["temperature"] = generation.get("temperature", 1.0)
        if "temperature" in generation:
            used["temperature"] = fields["temperature"]
    if fields.get("temperature", 0) > 0:
        for name in ("top_p", "top_k"):
            if name not in fields and name in generation:
                fields[name] = used[name] = generation[name]
    elif generation.get("do_sample"):
        used["do_sample"] = "true, left aside: greedy unless asked to sample"
    return fields, max_tokens, used


@dataclass(frozen=True)
class Workload:
    """What `generate` serves: the prompts (text or token ids; none: the mix) or `turns`
    turns of a conversation, `max_tokens` each, the sampling flags as `overrides`, and
    generation_config.json applied ("auto", as LLM checks) or not ("none")."""

    prompts: Sequence[str | Sequence[int]] = ()  # kept as a tuple
    max_tokens: int | None = None
    turns: int = 0
    overrides: Fields = field(default_factory=dict)
    generation_config: str = "auto"

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompts", tuple(self.prompts or ()))


@dataclass(frozen=True)
class Plan:
    """A workload in vLLM's terms: token ids (with --turns, the first turn's), parameters,
    the pool's size, and the generation_config.json settings taken."""

    prompts: list[tuple[int, ...]]
    params: list[Params]
    num_gpu_blocks: int
    generation_config: dict[str, Any]


def plan(model: Transformer, tok: Any, workload: Workload, cache: CacheConfig) -> Plan:
    """The workload's prompts, parameters (flags over the generation config) and pool."""
    info = getattr(model, "info", {})
    overrides, max_tokens, from_file = apply_generation_config(
        info.get("generation", {}) if workload.generation_config == "auto" else {},
        dict(workload.overrides),
        workload.max_tokens,
    )
    prompts = workload.prompts
    if (not prompts or workload.turns or any(isinstance(p, str) for p in prompts)) and tok is None:
        raise ValueError(
            "text prompts, the default workload and --turns need the "
            "checkpoint's tokenizer.json; give --prompt-ids instead"
        )
    if prompts:  # text, or token ids
        asked = [(p, {"max_tokens": max_tokens}) for p in prompts]
    else:
        asked = list(mix(max_tokens))
    if workload.turns:
        asked = asked[:1]
    ids = [tuple(tok.encode(p).ids) if isinstance(p, str) else tuple(p) for p, _ in asked]
    every = [params({**f, **overrides}) for _, f in asked]
    num_gpu_blocks = pool_size(
        model, list(zip(ids, every, strict=True)), workload, max_tokens, cache
    )
    return Plan(ids, every, num_gpu_blocks, from_file)


def pool_size(
    model: Transformer,
    requests: list[tuple[tuple[int, ...], Params]],
    workload: Workload,
    max_tokens: int,
    cache: CacheConfig,
) -> int:
    """num_gpu_blocks: the override, else 16 blocks for the mix, else room for every
    request at once (every turn of a conversation), plus 4 for the cache."""
    if cache.num_gpu_blocks_override is not None:
        return cache.num_gpu_blocks_override
    if not workload.prompts and not workload.turns:
        return 16
    longest = (workload.turns or 1) * (len(requests[0][0]) + max_tokens + 16)
    groups = len(model.config.windowed)  # a hybrid model fills two KV cache groups
    need = sum(
        (p.beam_width if isinstance(p, BeamSearchParams) else p.n)
        * blocks_needed(max(longest, len(prompt) + max_tokens), cache.block_size)
        for prompt, p in requests
    )
    return groups * need + 4


def serve(
    model: Transformer | None = None,
    tok: Any = None,
    workload: Workload | None = None,
    cache: CacheConfig | None = None,
    scheduler: SchedulerConfig | None = None,
    *,
    backend: Any = "auto",
    pool: Pool | None = None,
    check_dense: bool = True,
) -> tuple[LLM, dict[str, Any]]:
    """Serve the workload (default: the mix) on a traced LLM, checked on the dense engine
    if `check_dense`: (llm, the summary `generate` reports). With `pool`, summary["pool"]
    says where it parted from the reference (lockstep.PoolFailed if it raises)."""
    if model is None:
        model, tok = load()
    workload, cache = workload or Workload(), cache or CacheConfig()
    planned = plan(model, tok, workload, cache)
    llm = LLM(
        model,
        tokenizer=tok,
        cache_config=replace(cache, num_gpu_blocks_override=planned.num_gpu_blocks),
        scheduler_config=scheduler or SchedulerConfig(),
        backend=backend,
        pool=pool,
        trace=True,
        generation_config=workload.generation_config,
        keep_logits=check_dense,  # the dense check compares every position's logits
    )
    outputs = conversation(llm, planned, workload.turns)
    dense = llm.check_dense(outputs) if check_dense else None
    return llm, summarize(llm, outputs, planned, dense)


def conversation(llm: LLM, planned: Plan, turns: int) -> list[RequestOutput]:
    """`LLM.generate` on the plan's prompts; with `turns`, once per turn (module docstring)."""
    if not turns:
        return llm.generate(planned.prompts, planned.params)
    outputs: list[RequestOutput] = []
    prompt: Sequence[int] = planned.prompts[0]
    for turn in range(turns):
        if turn:  # the transcript so far, then the next speaker
            last = outputs[-1]
            cue = llm.tokenizer.encode(CUES[(turn - 1) % len(CUES)]).ids
            prompt = [*last.prompt_token_ids, *last.outputs[0].token_ids, *cue]
        outputs += llm.generate([list(prompt)], planned.params[:1])
    return outputs


def summarize(
    llm: LLM, outputs: list[RequestOutput], planned: Plan, dense: DenseCheck | None
) -> dict[str, Any]:
    """What `generate` reports of a served run."""
    engine, tok = llm.llm_engine, llm.tokenizer
    assert engine is not None, "summarize a served LLM"
    stats, model = engine.stats, engine.model
    summary: dict[str, Any] = dict(
        model=Path(model.name).name,
        parameters=model.num_parameters,
        backend=engine.backend.name,
        attention=engine.backend.where(),
        steps=len(engine.log),
        num_gpu_blocks=planned.num_gpu_blocks,
        block_size=llm.cache_config.block_size,
        max_num_batched_tokens=llm.scheduler_config.max_num_batched_tokens,
        block_bytes=engine.block_bytes,
        computed_tokens=stats["computed_tokens"],
        skipped_by_prefix_cache=stats["cached_tokens"],
        recomputed_after_preemption=stats["recomputed_tokens"],
        preempted_recompute=stats["preempted_recompute"],
        preempted_swap=stats["preempted_swap"],
        cow_bytes=stats["cow_bytes"],
        swap_bytes=stats["swap_bytes"],
        requests=[report(tok, o) for o in outputs],
        generation_config=planned.generation_config,
        **(dense._asdict() if dense is not None else NOT_CHECKED),
    )
    if llm.lockstep is not None:
        summary["pool"] = llm.lockstep.divergence.summary()
    return summary


def report(tok: Any, out: RequestOutput) -> dict[str, Any]:
    """One request: prompt, generated token ids and text per sequence, prompt hit tokens."""
    return dict(
        prompt=text(tok, out.prompt_token_ids),
        prompt_token_ids=out.prompt_token_ids,
        hit_tokens=out.num_cached_tokens,
        outputs=[dict(token_ids=c.token_ids, text=text(tok, c.token_ids)) for c in out.outputs],
    )


def step_frames(engine: PagedEngine, steps: Sequence[EngineStep]) -> list[LabelledSnapshot]:
    """The manager's snapshot after each engine step (`LLM(trace=True).steps`), numbered
    as `generate` prints, captioned with the batch, with all the step's events and each
    block labelled with its text."""
    trace = engine.manager.trace
    if trace is None:
        raise ValueError("step_frames needs an engine that records a trace (LLM(trace=True))")
    snaps = trace.snapshots
    marks = [s.snapshot for s in steps]
    spans = zip([0, *(m + 1 for m in marks)], marks, strict=False)  # manager steps of engine step i
    return [
        LabelledSnapshot(
            **{
                **vars(snaps[m]),
                "step": i + 1,
                "custom_caption": "batch " + " ".join(engine.log[i]["seqs"]),
                "events": tuple(e for s in snaps[a : m + 1] for e in s.events),
            },
            block_labels=steps[i].block_labels,
        )
        for i, (a, m) in enumerate(spans)
    ]
