"""`pagedsim generate`'s command line: its flags, the report it prints, and `main`, which
serves what generate.py describes.

The flags follow vLLM's SamplingParams and engine arguments (--budget is
max_num_batched_tokens). --pool NAME serves a pool the course registers (course.POOLS)
beside pagedsim's own and reports where the two first part (lockstep.py; exit status 1).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..app.cli import COURSE_POOLS  # the pools the course registers (course.POOLS)
from ..config import CacheConfig, SchedulerConfig
from ..io.args import ArgParser, distinct_files, float_in, int_in
from ..policies.preemption import PREEMPTION_POLICIES
from . import generate
from .hf import load_model, load_tokenizer
from .hf_json import CheckpointError
from .llm import EngineStep
from .lockstep import Pool, PoolFailed
from .paged import PagedEngine

if TYPE_CHECKING:
    from ..manager import KVCacheManager


def token_ids(text: str) -> tuple[int, ...]:
    """An argparse `type`: comma-separated non-negative token ids."""
    try:
        ids = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected token ids like 1,2,3, got {text!r}") from None
    if not ids or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"token ids must be >= 0, got {text!r}")
    return ids


def parser() -> ArgParser:
    about = (generate.__doc__ or "").split("\n\n")[0]
    p = ArgParser(prog="pagedsim generate", description=about)
    _workload_args(p)
    _sampling_args(p)
    _engine_args(p)
    _output_args(p)
    return p


def _workload_args(p: ArgParser) -> None:
    """The model, the dense check beside it, and the prompts it serves."""
    p.add_argument(
        "--model",
        metavar="DIR",
        help="a local Hugging Face checkpoint (default: the shipped Shakespeare model)",
    )
    p.add_argument(
        "--check-dense",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve every request again with the dense engine and compare tokens and "
        "logits (default: on for the shipped model, where it costs little; off for --model)",
    )
    p.add_argument(
        "--prompt",
        action="append",
        metavar="TEXT",
        help="a prompt (repeatable; default: a mixed workload of four requests)",
    )
    p.add_argument(
        "--prompt-ids",
        action="append",
        type=token_ids,
        metavar="ID,ID,...",
        help="a prompt as token ids (repeatable; needs no tokenizer.json)",
    )


def _sampling_args(p: ArgParser) -> None:
    """What each request asks for: its length and how its tokens are sampled."""
    p.add_argument(
        "--max-tokens",
        type=int_in(1, 4096),
        help="tokens generated per sequence (default: the generation config's "
        "max_new_tokens, else 32)",
    )
    p.add_argument(
        "--temperature",
        type=float_in(0, 100),
        help="0 = greedy (the default, unless -n, --seed, --top-p or --top-k ask "
        "for sampling: then the generation config's temperature, else 1)",
    )
    p.add_argument("--top-p", type=float_in(0, 1, open_low=True), help="nucleus sampling")
    p.add_argument("--top-k", type=int_in(0, 1 << 31), help="keep the k most likely tokens")
    p.add_argument(
        "--repetition-penalty",
        type=float_in(0, 100, open_low=True),
        help="> 1 discourages repeats (default: the generation config's, else 1)",
    )
    p.add_argument(
        "--generation-config",
        choices=("auto", "none"),
        default="auto",
        help="auto: apply the checkpoint's generation_config.json as transformers "
        "and vLLM do; none: ignore it (vLLM's option)",
    )
    p.add_argument("--seed", type=int_in(0, 2**63 - 1), help="sampling seed")
    p.add_argument("-n", type=int_in(1, 64), help="parallel samples per prompt")
    p.add_argument("--beam-width", type=int_in(0, 64), help="beam search with W beams")
    p.add_argument(
        "--turns",
        type=int_in(0, 32),
        default=0,
        help="serve a conversation of N turns: each prompt is the transcript so far",
    )


def _engine_args(p: ArgParser) -> None:
    """vLLM's cache and scheduler settings, the pool and the attention backend."""
    p.add_argument(
        "--num-gpu-blocks-override",
        type=int_in(1, 1_000_000),
        metavar="N",
        help="blocks in the pool (default: 16 for the mix, else room for all)",
    )
    p.add_argument("--block-size", type=int_in(1, 1024), default=16)
    p.add_argument(
        "--budget",
        "--max-num-batched-tokens",
        dest="max_num_batched_tokens",
        type=int_in(1, 1_000_000),
        default=64,
        help="vLLM's max_num_batched_tokens: tokens per step (default 64)",
    )
    p.add_argument(
        "--preemption-mode",
        choices=PREEMPTION_POLICIES,
        default="swap",
        help="preemption of a single-sequence request (several sequences always swap)",
    )
    p.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="v1's automatic prefix caching: on unless --no-enable-prefix-caching (off with "
        "another --pool)",
    )
    p.add_argument(
        "--pool",
        choices=("reference", *COURSE_POOLS),
        default="reference",
        help="the block pool that serves: reference = pagedsim's own"
        + "".join(f"; {name} = {help_}" for name, (_, help_) in COURSE_POOLS.items())
        + " (served beside the reference pool and compared after every manager call)",
    )
    p.add_argument(
        "--backend",
        choices=("auto", "numpy", "kernels"),
        default="auto",
        help="attention: auto = kernels on a GPU, NumPy on the CPU; kernels without "
        "a GPU = Numba's CUDA simulator (slow: tiny models only)",
    )


def _output_args(p: ArgParser) -> None:
    """What the run writes besides the tokens."""
    p.add_argument("--json", action="store_true")
    p.add_argument("--draw", metavar="DIR", help="write a PNG per engine step and a GIF")
    p.add_argument(
        "--html",
        metavar="FILE",
        help="write the engine steps as one self-contained page for a browser, every "
        "block labelled with the text it holds",
    )
    p.add_argument(
        "--trace-out",
        metavar="FILE",
        help="save the engine steps as a JSON trace (for `pagedsim view`)",
    )


def pool_factory(name: str) -> Callable[[int, int], KVCacheManager]:
    """The factory (num_gpu_blocks, block_size) -> KVCacheManager of a registered pool."""
    module, func = COURSE_POOLS[name][0].split(":")
    factory: Callable[[int, int], KVCacheManager] = getattr(importlib.import_module(module), func)()
    return factory


def print_report(engine: PagedEngine, s: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"pagedsim generate: {s['model']} ({s['parameters']:,} parameters, float32), "
        f"attention: {s['attention']}"
    )
    many = "s" if len(s["requests"]) > 1 else ""
    if s.get("generation_config"):
        print(
            "from generation_config.json: "
            + ", ".join(f"{k} {v}" for k, v in s["generation_config"].items())
        )
    print(
        f"{len(s['requests'])} request{many}, pool of {s['num_gpu_blocks']} blocks x "
        f"{s['block_size']} tokens, "
        f"budget {s['max_num_batched_tokens']} tokens/step, prefix caching "
        f"{'on' if args.enable_prefix_caching else 'off'}"
    )
    for rec in engine.log:
        extra = "".join(
            f", {k.replace('_', ' ')} {v}" for k, v in rec.items() if k.startswith("preempted")
        )
        extra += "".join(
            f" | {k[:-7]} group {v} blocks"
            for k, v in rec.items()
            if k.endswith("_blocks") and k != "free_blocks"
        )  # KV cache groups
        print(
            f"step {rec['step']:>2}: prefill {rec['prefill_tokens']:>3} + decode "
            f"{rec['decode_tokens']} tokens | blocks +{rec['allocated']} allocated, "
            f"{rec['shared']} shared, {rec['copied']} copied, {rec['freed']} freed, "
            f"{rec['free_blocks']} free{extra}"
        )
    print(
        f"\ntokens computed {s['computed_tokens']}, served by the prefix cache "
        f"{s['skipped_by_prefix_cache']}, recomputed after preemption "
        f"{s['recomputed_after_preemption']}"
    )
    print(
        f"bytes copied: copy-on-write {s['cow_bytes']}, swapping {s['swap_bytes']} "
        f"({s['preempted_swap']} swapped, {s['preempted_recompute']} recomputed)"
    )
    for i, r in enumerate(s["requests"]):
        head = f"turn {i + 1}" if args.turns else f"r{i}"
        if args.turns and i:  # how much of the hit is the previous turn's answer
            own = r["hit_tokens"] - len(s["requests"][i - 1]["prompt_token_ids"])
            head += f" (its hits include {max(own, 0)} tokens of turn {i}'s answer)"
        shown = repr(r["prompt"]) if r["prompt"] is not None else r["prompt_token_ids"]
        print(
            f"\n{head}: {len(r['prompt_token_ids'])} prompt tokens, {r['hit_tokens']} hit in "
            f"the prefix cache\n  prompt: {shown}"
        )
        for j, out in enumerate(r["outputs"]):
            print(f"  output {j}: {out['token_ids'] if out['text'] is None else repr(out['text'])}")
    if s["tokens_match"] is None:
        print("\ndense check: off (--check-dense serves every request again, densely)")
    else:
        print(
            f"\nmatches the dense engine: tokens {'yes' if s['tokens_match'] else 'NO'}, "
            f"max logit difference {s['max_logit_diff']:.2e}"
        )
    for line in s.get("pool", {}).get("lines", ()):
        print(line)


def _configs(
    args: argparse.Namespace,
) -> tuple[generate.Workload, CacheConfig, SchedulerConfig]:
    """The command line as the engine's three configs, in vLLM's names."""
    sampling = "n beam_width temperature top_p top_k seed repetition_penalty".split()
    overrides = {k: getattr(args, k) for k in sampling if getattr(args, k) is not None}
    workload = generate.Workload(
        prompts=(args.prompt or []) + (args.prompt_ids or []),
        max_tokens=args.max_tokens,
        turns=args.turns,
        overrides=overrides,
        generation_config=args.generation_config,
    )
    cache = CacheConfig(
        block_size=args.block_size,
        num_gpu_blocks_override=args.num_gpu_blocks_override,
        enable_prefix_caching=args.enable_prefix_caching,
    )
    scheduler = SchedulerConfig(
        max_num_batched_tokens=args.max_num_batched_tokens,
        preemption_mode=args.preemption_mode,
    )
    return workload, cache, scheduler


def _pool_failed(e: PoolFailed, args: argparse.Namespace) -> None:
    """Where the pool under test parted from the reference, and how it failed."""
    d = e.divergence
    if args.json:
        json.dump(dict(summary=dict(pool=d.summary())), sys.stdout, indent=1)
        print()
        return
    print(f"pagedsim generate --pool {args.pool}: served beside the reference pool")
    for line in d.lines():
        print(line)


def _write_steps(engine: PagedEngine, steps: list[EngineStep], args: argparse.Namespace) -> None:
    """--draw, --html and --trace-out: the engine's steps as pictures, a page, a trace."""
    if args.draw:
        from ..draw.animate import write_trace  # matplotlib only when asked for

        for path in write_trace(generate.step_frames(engine, steps), args.draw, name="generate"):
            print(f"wrote {path}", file=sys.stderr)
    from ..app.play import write_pages
    from ..view import sources

    write_pages(args, partial(sources.generate, engine, steps))


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    distinct_files(p, {}, {"--html": args.html, "--trace-out": args.trace_out})
    if args.enable_prefix_caching is None:
        args.enable_prefix_caching = args.pool == "reference"
    elif args.enable_prefix_caching and args.pool != "reference":
        p.error(
            f"--pool {args.pool} serves without prefix caching: its free list is the "
            f"chapter's (3.4a), not v1's caching pool; drop --enable-prefix-caching"
        )
    manager = None if args.pool == "reference" else pool_factory(args.pool)
    directory = generate.DEFAULT_MODEL if args.model is None else Path(args.model)
    try:
        model = load_model(directory)
        tok = (
            None
            if args.prompt_ids and not args.prompt and not (directory / "tokenizer.json").exists()
            else load_tokenizer(directory)
        )
    except CheckpointError as e:  # names the file and the field: nothing to add
        print(f"pagedsim generate: error: {e}", file=sys.stderr)
        return 2
    try:
        llm, summary = generate.serve(
            model,
            tok,
            *_configs(args),
            backend=args.backend,
            pool=None if manager is None else Pool(manager, args.pool),
            check_dense=args.model is None if args.check_dense is None else args.check_dense,
        )
    except PoolFailed as e:  # the finding itself: where the pool parted, and how it failed
        _pool_failed(e, args)
        return 1
    except ValueError as e:  # a pool or budget too small for one request, a bad size
        p.error(str(e))
    assert llm.llm_engine is not None, "a served LLM has its engine"
    if args.json:
        json.dump(dict(steps=llm.llm_engine.log, summary=summary), sys.stdout, indent=1)
        print()
    else:
        print_report(llm.llm_engine, summary, args)
    _write_steps(llm.llm_engine, llm.steps, args)
    dense_ok = summary["tokens_match"] is not False  # None: the check was off
    return 0 if dense_ok and summary.get("pool", {}).get("matches", True) else 1
