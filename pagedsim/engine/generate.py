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

A checkpoint's generation_config.json applies as in transformers' generate() and vLLM's
--generation-config auto (apply_generation_config); the report says which settings came
from it, and --generation-config none ignores it. A model with sliding-window layers is
served by v1's window manager, or by the hybrid allocator when it mixes full and sliding
layers (window_adapter.py): each step then prints the blocks each KV cache group holds.

`run(..., manager=)` serves from another block manager (`--pool workspace`: the student's
own 3.4a and 3.4b, course/ch03_kv_block/capstone.py) with pagedsim's own serving the same
requests beside it, compared after every manager call (lockstep.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

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
        text(tok, held[b]) or "" if b in held else ""
        for b in range(engine.blocks.manager.num_blocks)
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
        marks.append(len(engine.blocks.manager.trace.snapshots) - 1)
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


def run(
    model=None,
    tok=None,
    prompts=None,
    *,
    max_tokens=None,
    num_gpu_blocks_override=None,
    block_size: int = 16,
    max_num_batched_tokens: int = 64,
    preemption_mode: str = "swap",
    enable_prefix_caching: bool = True,
    backend="auto",
    turns: int = 0,
    overrides=None,
    generation_config: str = "auto",
    manager=None,
    pool_name: str = "tested",
) -> tuple:
    """Serve the mix, the prompts, or `turns` turns of a conversation, then the dense
    engine. Returns (engine, marks, summary): marks[i] is the manager snapshot index after
    engine step i + 1; summary is what `generate` reports. `generation_config`: "auto"
    applies the checkpoint's generation_config.json (apply_generation_config), "none"
    ignores it (vLLM's option). `num_gpu_blocks_override` sizes the pool (vLLM's name;
    default: 16 blocks for the mix, else room for every request at once) and the engine
    takes the result as num_gpu_blocks. `manager`: a factory (num_blocks, block_size) -> an empty
    KVCacheManager to serve from (`--pool`); pagedsim's own manager, the reference pool,
    then serves the same requests beside it step by step (lockstep.py), summary["pool"]
    says where the two first part, and lockstep.PoolFailed is raised if it raises."""
    if model is None:
        model, tok = load()
    if generation_config not in ("auto", "none"):
        raise ValueError(f"generation_config must be 'auto' or 'none', got {generation_config!r}")
    generation = (
        getattr(model, "info", {}).get("generation", {}) if generation_config == "auto" else {}
    )
    overrides, max_tokens, from_file = apply_generation_config(
        generation, dict(overrides or {}), max_tokens
    )
    # without the file, config.json's eos_token_id still stops (vLLM: the model's EOS)
    stop = tuple(
        from_file.get("eos_token_id", getattr(model, "info", {}).get("config_eos_token_ids", ()))
    )
    if (not prompts or turns or any(isinstance(p, str) for p in prompts)) and tok is None:
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
    if turns:
        requests = requests[:1]
    num_gpu_blocks = num_gpu_blocks_override
    if num_gpu_blocks is None:  # room for every request at once, plus the cache
        from ..block_table import blocks_needed

        longest = (turns or 1) * (len(requests[0].prompt) + max_tokens + 16)
        groups = len(model.config.windowed)  # a hybrid model fills two KV cache groups
        num_gpu_blocks = (
            16
            if not prompts and not turns
            else groups
            * sum(
                r.width * blocks_needed(max(longest, len(r.prompt) + max_tokens), block_size)
                for r in requests
            )
            + 4
        )
    engine = PagedEngine(
        model,
        num_gpu_blocks,
        block_size,
        max_num_batched_tokens=max_num_batched_tokens,
        enable_prefix_caching=enable_prefix_caching,
        preemption_mode=preemption_mode,
        backend=backend,
        trace=True,
        check=manager is None,  # a pool under test is compared with the reference instead
        manager=None if manager is None else manager(num_gpu_blocks, block_size),
    )
    beside = None
    if manager is not None:
        reference = PagedEngine(
            model,
            num_gpu_blocks,
            block_size,
            max_num_batched_tokens=max_num_batched_tokens,
            enable_prefix_caching=enable_prefix_caching,
            preemption_mode=preemption_mode,
            backend=engine.backend,
            trace=True,  # compared with the pool under test manager call by manager call
            check=True,
        )
        decode = None if tok is None else (lambda ids: tok.decode(list(ids)))
        beside = Lockstep(engine, reference, pool_name, decode)
    states: list[RequestState] = []
    marks: list[int] = []
    texts: list[tuple[str, ...]] = []
    for turn in range(max(turns, 1)):
        if turn:  # the transcript so far, then the next speaker
            last = states[-1]
            cue = tuple(tok.encode(CUES[(turn - 1) % len(CUES)]).ids)
            prompt = tuple(last.request.prompt) + tuple(last.outputs()[0]) + cue
            requests = [replace(requests[0], prompt=prompt)]
        got, m, t = serve(engine, requests, tok, beside)
        states += got
        marks += m
        texts += t
    dense = DenseEngine(model).generate([s.request for s in states])
    stats = engine.scheduler.stats
    summary = dict(
        model=Path(model.name).name,
        parameters=model.num_parameters,
        backend=engine.backend.name,
        attention=engine.backend.where(),
        steps=len(engine.log),
        num_gpu_blocks=num_gpu_blocks,
        block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens,
        block_bytes=engine.kv.block_bytes,
        computed_tokens=stats["computed_tokens"],
        skipped_by_prefix_cache=stats["cached_tokens"],
        recomputed_after_preemption=stats["recomputed_tokens"],
        preempted_recompute=stats["preempted_recompute"],
        preempted_swap=stats["preempted_swap"],
        cow_bytes=stats["cow_bytes"],
        swap_bytes=stats["swap_bytes"],
        requests=report(tok, states, engine.runs),
        generation_config=from_file,
        **compare(dense, states),
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


def step_frames(engine, marks) -> list:
    """The manager's snapshot after each engine step, numbered by engine step (as `generate`
    prints them), captioned with that step's batch, carrying all of the step's events, and
    each block labelled with the text it holds."""
    snaps = engine.blocks.manager.trace.snapshots
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
