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
request's text, the tokens its prompt hit in the prefix cache, and whether every token
and logit matched the dense engine. --turns N serves a conversation instead: each turn's
prompt is the previous prompt, its answer and the next speaker's cue, so turn 2 on hits
the blocks of turn 1's prompt *and* answer (v1 caches generated blocks too).
--json prints the same as JSON; --draw DIR writes the manager's snapshot after each
engine step, every block labelled with the text it holds.

A checkpoint's generation_config.json applies as vLLM's --generation-config auto applies
it (apply_generation_config). A file without top_k means no top-k, as in vLLM;
transformers' generate() would apply top_k = 50 there (sampling.py). The report says
which settings came from it, and --generation-config none ignores it. A model with
sliding-window layers is served by v1's window manager, or by the hybrid allocator when it
mixes full and sliding layers, on SchedulerV1: each step then prints the blocks each KV
cache group holds.

`run(..., manager=)` serves from another block manager (`--pool workspace`: the student's
own 3.4a and 3.4b, course/ch03_kv_block/capstone.py) with pagedsim's own serving the same
requests beside it, compared after every manager call (lockstep.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..block_table import blocks_needed
from ..config import CacheConfig, SchedulerConfig
from ..trace import Snapshot
from .dense import DenseEngine
from .hf import load_model, load_tokenizer
from .lockstep import Lockstep
from .paged import PagedEngine
from .requests import Request, RequestState

DEFAULT_MODEL = Path(__file__).with_name("models") / "shakespeare"
SHARED = "ROMEO.\nBut soft, what light through yonder window breaks?\n"
CUES = ("\n\nJULIET.\n", "\n\nROMEO.\n")  # --turns: the next speaker, alternating


def load(model_dir=None) -> tuple:
    """(model, tokenizer) from DIR, or the shipped model."""
    directory = DEFAULT_MODEL if model_dir is None else Path(model_dir)
    return load_model(directory), load_tokenizer(directory)


def mix(tok, max_tokens: int, stop=()) -> list:
    """The default workload (see the module docstring)."""

    def enc(text):
        return tuple(tok.encode(text).ids)

    first = enc(SHARED + "It is the east, and Juliet is the sun.\n")
    return [
        Request(first, max_tokens, stop_token_ids=stop),
        Request(
            enc(SHARED + "\nJULIET.\n"),
            max_tokens,
            n=2,
            temperature=0.8,
            seed=7,
            stop_token_ids=stop,
        ),
        Request(enc("FRIAR LAWRENCE.\nThese violent delights"), max_tokens, beam_width=2),
        Request(first, max(1, max_tokens // 2), stop_token_ids=stop),
    ]


NOT_CHECKED = dict(tokens_match=None, logit_positions_match=None, max_logit_diff=None)


def compare(dense: list, paged: list) -> dict:
    """Tokens equal per request, and the largest logit difference over shared positions."""
    pairs = list(zip(dense, paged, strict=True))
    diffs = [
        float(np.abs(d.logits[k] - p.logits[k]).max())
        for d, p in pairs
        for k in d.logits
        if k in p.logits
    ]
    return dict(
        tokens_match=all(d.outputs() == p.outputs() for d, p in pairs),
        logit_positions_match=all(set(d.logits) == set(p.logits) for d, p in pairs),
        max_logit_diff=max(diffs, default=0.0),
    )


@dataclass(frozen=True)
class LabelledSnapshot(Snapshot):
    block_labels: tuple = ()  # [num_blocks] the text each block holds ("" when none)


def text(tok, ids):
    """The text of token ids, or None without a tokenizer (a --prompt-ids run)."""
    return None if tok is None else tok.decode(list(ids))


def labels(engine: PagedEngine, tok) -> tuple:
    """The text each physical block holds (live blocks and cache-hittable free ones)."""
    held = engine.block_tokens()
    return tuple(
        text(tok, held[b]) or "" if b in held else "" for b in range(engine.manager.num_blocks)
    )


def serve(engine: PagedEngine, requests: list, tok, beside: Lockstep | None = None) -> tuple:
    """Submit and step to the end. Returns (states, marks, block labels per step). With
    `beside` (whose tested engine is `engine`), the reference engine steps alongside and
    the two are compared after every step."""
    marks, texts = [], []
    first = len(engine.runs)
    for r in requests:
        (beside or engine).submit(r)
    while not Lockstep.done(engine) or (beside and not Lockstep.done(beside.reference)):
        serving = not Lockstep.done(engine)
        if beside is not None:
            beside.step()
        else:
            engine.step()
        if not serving:
            continue
        marks.append(len(engine.manager.trace.snapshots) - 1)
        texts.append(labels(engine, tok))
    return [run.state for run in engine.runs[first:]], marks, texts


def report(tok, states, runs) -> list:
    """Per request: prompt, generated token ids and text per sequence, prompt hit tokens."""
    return [
        dict(
            prompt=text(tok, s.request.prompt),
            prompt_token_ids=list(s.request.prompt),
            hit_tokens=run.hit_tokens,
            outputs=[dict(token_ids=out, text=text(tok, out)) for out in s.outputs()],
        )
        for s, run in zip(states, runs, strict=True)
    ]


DEFAULT_MAX_TOKENS = 32


def apply_generation_config(generation: dict, overrides: dict, max_tokens) -> tuple:
    """(request fields, max_tokens, what came from the file) for a checkpoint's
    generation_config.json fields `generation`, as transformers' generate() and vLLM's
    `--generation-config auto` use them: the user's flags win; eos_token_id always stops;
    max_new_tokens stands in for an absent --max-tokens; repetition_penalty applies in
    greedy decoding too. `pagedsim generate` decodes greedily unless asked to sample
    (--temperature > 0, or -n > 1, --seed, --top-p or --top-k without a temperature: then
    the file's temperature, else 1); when sampling, the file's top_p and top_k are the
    defaults. A file's do_sample alone does not switch sampling on (transformers would;
    vLLM would sample at the file's temperature): the report says it was left aside.
    --temperature 0 is always greedy."""
    used: dict = {}
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
    """What `generate` serves: the prompts (text or token ids; none: the mix), or `turns`
    turns of a conversation, `max_tokens` each (None: the generation config's
    max_new_tokens, else 32), with `overrides` of the Request fields (the command line's
    sampling flags) and the checkpoint's generation_config.json applied ("auto", as
    transformers and vLLM do, see apply_generation_config) or not ("none")."""

    prompts: Sequence[str | Sequence[int]] = ()  # kept as a tuple
    max_tokens: int | None = None
    turns: int = 0
    overrides: dict = field(default_factory=dict)
    generation_config: str = "auto"

    def __post_init__(self) -> None:
        if self.generation_config not in ("auto", "none"):
            raise ValueError(
                f"generation_config must be 'auto' or 'none', got {self.generation_config!r}"
            )
        object.__setattr__(self, "prompts", tuple(self.prompts or ()))


@dataclass(frozen=True)
class Pool:
    """A block manager under test (`--pool`): `manager(num_blocks, block_size)` makes an
    empty KVCacheManager; pagedsim's own, the reference pool, serves beside it."""

    manager: Callable
    name: str = "tested"


def requests_of(model, tok, workload: Workload) -> tuple:
    """(requests, max_tokens, settings taken from the generation config) for a workload."""
    generation = getattr(model, "info", {}).get("generation", {})
    overrides, max_tokens, from_file = apply_generation_config(
        generation if workload.generation_config == "auto" else {},
        dict(workload.overrides),
        workload.max_tokens,
    )
    # without the file, config.json's eos_token_id still stops (vLLM: the model's EOS)
    stop = tuple(
        from_file.get("eos_token_id", getattr(model, "info", {}).get("config_eos_token_ids", ()))
    )
    prompts = workload.prompts
    if (not prompts or workload.turns or any(isinstance(p, str) for p in prompts)) and tok is None:
        raise ValueError(
            "text prompts, the default workload and --turns need the "
            "checkpoint's tokenizer.json; give --prompt-ids instead"
        )
    if prompts:  # text, or token ids
        requests = [
            Request(
                tuple(tok.encode(p).ids) if isinstance(p, str) else tuple(p),
                max_tokens,
                stop_token_ids=stop,
                **overrides,
            )
            for p in prompts
        ]
    else:
        requests = [replace(r, **overrides) for r in mix(tok, max_tokens, stop)]
    return (requests[:1] if workload.turns else requests), max_tokens, from_file


def pool_size(model, requests: list, workload: Workload, max_tokens: int, cache) -> int:
    """num_gpu_blocks: the override, else 16 blocks for the mix, else room for every
    request at once (every turn of a conversation), plus 4 for the cache."""
    if cache.num_gpu_blocks_override is not None:
        return cache.num_gpu_blocks_override
    if not workload.prompts and not workload.turns:
        return 16
    longest = (workload.turns or 1) * (len(requests[0].prompt) + max_tokens + 16)
    groups = len(model.config.windowed)  # a hybrid model fills two KV cache groups
    need = sum(
        r.width * blocks_needed(max(longest, len(r.prompt) + max_tokens), cache.block_size)
        for r in requests
    )
    return groups * need + 4


def engines(model, requests: list, num_gpu_blocks: int, configs: tuple, options: tuple) -> tuple:
    """(the engine that serves, the Lockstep beside it or None). v1 serves what vLLM v1's
    scheduler serves; beams, n > 1, swapping and a pool under test (the workspace's fork
    and copy-on-write) are v0's. `configs`: (cache, scheduler); `options`: (backend, pool,
    tokenizer)."""
    (cache, scheduler), (backend, pool, tok) = configs, options
    v1 = "sliding" in model.config.windowed or (
        scheduler.preemption_mode == "recompute"
        and pool is None
        and all(r.width == 1 and not r.beam_width for r in requests)
    )

    def engine(manager, **flags) -> PagedEngine:
        return PagedEngine(
            model,
            replace(cache, num_gpu_blocks=num_gpu_blocks),
            replace(scheduler, preemption_mode="recompute" if v1 else scheduler.preemption_mode),
            mode="v1" if v1 else "v0",
            trace=True,
            manager=manager,
            **flags,
        )

    if pool is None:
        return engine(None, backend=backend, check=True), None
    # the pool under test is compared with the reference, manager call by manager call
    tested = engine(pool.manager(num_gpu_blocks, cache.block_size), backend=backend)
    reference = engine(None, backend=tested.backend, check=True)
    decode = None if tok is None else (lambda ids: tok.decode(list(ids)))
    return tested, Lockstep(tested, reference, pool.name, decode)


def run(
    model=None,
    tok=None,
    workload: Workload | None = None,
    cache: CacheConfig | None = None,
    scheduler: SchedulerConfig | None = None,
    *,
    backend="auto",
    pool: Pool | None = None,
    check_dense: bool = True,
) -> tuple:
    """Serve the workload (default: the mix), then the dense engine. Returns (engine,
    marks, summary): marks[i] is the manager snapshot index after engine step i + 1;
    summary is what `generate` reports. `cache.num_gpu_blocks_override` sizes the pool
    (pool_size) and the engine takes the result as num_gpu_blocks. `pool`: serve from a
    block manager under test, with pagedsim's own manager, the reference pool, serving the
    same requests beside it step by step (lockstep.py); summary["pool"] says where the two
    first part, and lockstep.PoolFailed is raised if it raises. `check_dense` False skips
    the dense engine (tokens_match and max_logit_diff None)."""
    if model is None:
        model, tok = load()
    workload, cache = workload or Workload(), cache or CacheConfig()
    scheduler = scheduler or SchedulerConfig()
    requests, max_tokens, from_file = requests_of(model, tok, workload)
    num_gpu_blocks = pool_size(model, requests, workload, max_tokens, cache)
    engine, beside = engines(
        model, requests, num_gpu_blocks, (cache, scheduler), (backend, pool, tok)
    )
    states: list[RequestState] = []
    marks: list[int] = []
    texts: list[tuple[str, ...]] = []
    for turn in range(max(workload.turns, 1)):
        if turn:  # the transcript so far, then the next speaker
            last = states[-1]
            cue = tuple(tok.encode(CUES[(turn - 1) % len(CUES)]).ids)
            prompt = tuple(last.request.prompt) + tuple(last.outputs()[0]) + cue
            requests = [replace(requests[0], prompt=prompt)]
        got, m, t = serve(engine, requests, tok, beside)
        states += got
        marks += m
        texts += t
    dense = DenseEngine(model).generate([s.request for s in states]) if check_dense else None
    summary = summarize(engine, states, (cache, scheduler, num_gpu_blocks), tok)
    summary.update(
        generation_config=from_file,
        **(compare(dense, states) if dense is not None else NOT_CHECKED),
    )
    if beside is not None:
        d = beside.divergence
        summary["pool"] = dict(
            name=d.name,
            matches=d.matches,
            blocks=d.blocks,
            token=d.token,
            error=None,
            lines=d.lines(),
        )
    engine.block_labels = texts
    return engine, marks, summary


def summarize(engine: PagedEngine, states: list, sizes: tuple, tok) -> dict:
    """What `generate` reports of a served run; `sizes`: (cache, scheduler, num_gpu_blocks)."""
    cache, scheduler, num_gpu_blocks = sizes
    stats, model = engine.stats, engine.model
    return dict(
        model=Path(model.name).name,
        parameters=model.num_parameters,
        backend=engine.backend.name,
        attention=engine.backend.where(),
        steps=len(engine.log),
        num_gpu_blocks=num_gpu_blocks,
        block_size=cache.block_size,
        max_num_batched_tokens=scheduler.max_num_batched_tokens,
        block_bytes=engine.kv.block_bytes,
        computed_tokens=stats["computed_tokens"],
        skipped_by_prefix_cache=stats["cached_tokens"],
        recomputed_after_preemption=stats["recomputed_tokens"],
        preempted_recompute=stats["preempted_recompute"],
        preempted_swap=stats["preempted_swap"],
        cow_bytes=stats["cow_bytes"],
        swap_bytes=stats["swap_bytes"],
        requests=report(tok, states, engine.runs),
    )


def step_frames(engine, marks) -> list:
    """The manager's snapshot after each engine step, numbered by engine step (as `generate`
    prints them), captioned with that step's batch, carrying all of the step's events, and
    each block labelled with the text it holds."""
    snaps = engine.manager.trace.snapshots
    texts = getattr(engine, "block_labels", [()] * len(marks))
    spans = zip([0, *(m + 1 for m in marks)], marks, strict=False)  # manager steps of engine step i
    return [
        LabelledSnapshot(
            **{
                **vars(snaps[m]),
                "step": i + 1,
                "custom_caption": "batch " + " ".join(engine.log[i]["seqs"]),
                "events": tuple(e for s in snaps[a : m + 1] for e in s.events),
            },
            block_labels=texts[i],
        )
        for i, (a, m) in enumerate(spans)
    ]
