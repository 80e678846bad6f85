"""`pagedsim capacity`: how many KV-cache tokens fit model Y on GPU X, the way vLLM v1 reports it.

    pagedsim capacity --model llama-3-8b --gpu H100-80GB
    pagedsim capacity --model ./my-model/ --gpu-memory 24GiB --max-model-len 32768 \
        --kv-cache-dtype fp8
    pagedsim capacity --model mistral-7b --kv-cache-memory-bytes 20GiB --json

It prints vLLM v1's startup lines, "GPU KV cache size: N tokens" and "Maximum concurrency
for X tokens per request: Y.YYx", with the arithmetic behind them (`pagedsim.sizing.
kv_capacity`, after vllm/v1/core/kv_cache_utils.py):

    available       = gpu_memory * gpu_memory_utilization - weights - other
                      (or --kv-cache-memory-bytes)
    page_size_bytes = 2 * block_size * num_kv_heads * head_dim * kv_dtype_bytes (one layer)
    num_gpu_blocks  = available // page_size_bytes // num_layers
    num_tokens      = num_gpu_blocks * block_size
    concurrency     = num_gpu_blocks / ceil(max_model_len / block_size)

A multi-head latent attention model (DeepSeek-V2/V3: kv_lora_rank in its config) caches one
latent of kv_lora_rank + qk_rope_head_dim values per token and layer, paged as one KV head
with no V (vLLM's MLAAttentionSpec) and held whole by every tensor-parallel GPU. Block 0 is
vLLM v1's null block, so vLLM (and this command) refuses to start unless num_gpu_blocks - 1
blocks hold one request of max_model_len tokens.

The flags are vLLM's engine arguments: --dtype is the model's (auto: the checkpoint's
torch_dtype, float32 served as float16), --kv-cache-dtype the cache's (fp8 variants: 1 byte).

What it cannot know: vLLM measures `available` by profiling a forward pass (weights,
activations, non-torch memory); here the weights are estimated from the config's shapes
(or --weights-bytes, e.g. for a quantized checkpoint) and everything else is --other-bytes
(default 0), so the result is an upper bound. --kv-cache-memory-bytes skips all that, as
vLLM's does. Every layer counts as full attention (vLLM v1's hybrid allocator fits more for
a sliding window; a note says so). With --tensor-parallel-size N the numbers are one GPU's.

Model presets are real config.json values (Hugging Face hub); --model DIR reads
DIR/config.json. GPU presets are nominal GiB (80GB = 80 GiB): pass --gpu-memory for yours.
"""

from __future__ import annotations

import argparse
import json
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from ..io import tables
from ..io.args import ArgParser, float_in, int_in
from ..sizing import ModelSpec, kv_capacity

Config = dict[str, Any]  # a config.json object, or a report built from one
GiB = 2**30
MAX_BYTES = 2**50  # a PiB: far above any one GPU
MAX_LEN = 2**24  # tokens per request
MAX_BLOCK = 512
MAX_CONFIG_INT = 2**32  # any one config.json count (layers, hidden size, vocabulary ...)

PRESETS = tables.beside(__file__)
GPUS: dict[str, int] = {name: gib * GiB for name, gib in PRESETS["gpus"].items()}  # nominal
MODELS: dict[str, Config] = PRESETS["models"]  # config.json values of the Hugging Face checkpoints
MODEL_DTYPES = {"float16": 2, "bfloat16": 2, "float32": 4}  # the model's dtype -> bytes
TORCH_DTYPES = {
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32",
    "float": "float32",
}  # vLLM's --dtype / torch_dtype names
KV_CACHE_DTYPES = {"bfloat16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1}
# vLLM's --kv-cache-dtype choices besides "auto" (the model's dtype); fp8_ds_mla, DeepSeek's
# packed MLA layout (its row bytes are not a count of values), is left out
UNITS = {  # byte units: decimal (kb = 10**3) and binary (kib = 2**10)
    "": 1,
    "b": 1,
    **{f"{p}b": 10 ** (3 * k) for k, p in enumerate("kmgt", 1)},
    **{f"{p}ib": 2 ** (10 * k) for k, p in enumerate("kmgt", 1)},
}


def byte_count(text: str) -> int:
    """An argparse `type`: bytes as an integer with an optional unit (24GiB, 80e9, 512MB)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?(?:e[0-9]+)?)\s*([a-z]*)\s*", str(text).lower())
    if not m or m.group(2) not in UNITS:
        raise argparse.ArgumentTypeError(
            f"expected bytes such as 85899345920, 80GiB or 24e9, got {text!r}"
        )
    try:  # exact decimal arithmetic: 1e400 is a number too large, never inf or an overflow
        number = Decimal(m.group(1))
        too_big = number.adjusted() > 30 or number * UNITS[m.group(2)] > MAX_BYTES
    except (InvalidOperation, ArithmeticError):
        too_big = True
    if too_big:
        raise argparse.ArgumentTypeError(f"must be at most 2**50 bytes, got {text[:40]!r}")
    return int((number * UNITS[m.group(2)]).to_integral_value())


byte_count.__name__ = "bytes"


def gpu_name(text: str) -> str:
    """An argparse `type`: a GPU preset, in any letter case."""
    name = next((g for g in GPUS if g.lower() == str(text).lower()), None)
    if name is None:
        raise argparse.ArgumentTypeError(f"unknown GPU {text!r}; choose one of {', '.join(GPUS)}")
    return name


ALIASES = {  # other names older or non-Llama configs use for the same field
    "num_hidden_layers": ("n_layer", "num_layers"),
    "hidden_size": ("n_embd", "d_model"),
    "num_attention_heads": ("n_head",),
    "num_key_value_heads": ("num_kv_heads", "n_kv_heads"),
    "intermediate_size": ("ffn_dim", "n_inner"),
}


class MissingField(ValueError):
    """A config.json lacks a field (one that is there but wrong is a plain ValueError)."""


def _field(cfg: Config, key: str, source: str, default: int | None = None) -> int:
    value = next((cfg[k] for k in (key, *ALIASES.get(key, ())) if cfg.get(k) is not None), default)
    if value is None:
        raise MissingField(f"{source}: config has no {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONFIG_INT:
        shown = (
            value
            if not isinstance(value, int) or value.bit_length() < 64
            else f"an integer of {len(str(value)):,} digits"
        )
        raise ValueError(f"{source}: {key} must be a positive integer up to 2**32, got {shown!r}")
    return int(value)


def read_config(raw: object, source: str) -> Config:
    """The KV-cache shape and weight estimate of a config.json dict, checked field by field."""
    if not isinstance(raw, dict):
        raise ValueError(f"{source}: a config must be a JSON object, got {type(raw).__name__}")
    cfg: Config = raw
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]  # multimodal checkpoints nest the language model's config
    layers = _field(cfg, "num_hidden_layers", source)
    hidden = _field(cfg, "hidden_size", source)
    heads = _field(cfg, "num_attention_heads", source)
    kv = _field(cfg, "num_key_value_heads", source, heads)  # absent: multi-head attention
    if heads % kv:
        raise ValueError(
            f"{source}: num_attention_heads ({heads}) is not a multiple of "
            f"num_key_value_heads ({kv})"
        )
    if cfg.get("head_dim") is None and hidden % heads:
        raise ValueError(
            f"{source}: hidden_size ({hidden}) is not a multiple of "
            f"num_attention_heads ({heads}) and there is no head_dim"
        )
    head_dim = _field(cfg, "head_dim", source, hidden // heads)
    dtype = cfg.get("torch_dtype", cfg.get("dtype", "float16"))
    if not isinstance(dtype, str) or dtype not in TORCH_DTYPES:
        raise ValueError(f"{source}: torch_dtype {dtype!r} is not one of {sorted(TORCH_DTYPES)}")
    sliding_window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    if sliding_window is not None:
        sliding_window = _field(cfg, "sliding_window", source)
    max_pos = cfg.get("max_position_embeddings")
    if max_pos is not None:
        max_pos = _field(cfg, "max_position_embeddings", source)
    try:
        params, unknown = estimate_params(cfg, layers, hidden, heads, kv, head_dim, source), None
    except MissingField as e:  # only needed when the weights are to be estimated
        params, unknown = None, str(e)
    return dict(
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        **mla_dims(cfg, heads, source),
        dtype=TORCH_DTYPES[dtype],
        sliding_window=sliding_window,
        max_position_embeddings=max_pos,
        params=params,
        params_unknown=unknown,
    )


def mla_dims(cfg: Config, heads: int, source: str) -> Config:
    """MLA's latent per token and layer, kv_lora_rank + qk_rope_head_dim values (vLLM's
    MLAAttentionSpec), and the per-head K and V values it stands for; else latent_dim None."""
    if cfg.get("kv_lora_rank") is None:
        return dict(latent_dim=None)
    rank = _field(cfg, "kv_lora_rank", source)
    rope = _field(cfg, "qk_rope_head_dim", source)
    nope, v = _field(cfg, "qk_nope_head_dim", source), _field(cfg, "v_head_dim", source)
    return dict(
        latent_dim=rank + rope,
        kv_lora_rank=rank,
        qk_rope_head_dim=rope,
        uncompressed_values=heads * (nope + rope + v),  # K [H, nope + rope] and V [H, v]
    )


def _mla_attention_params(cfg: Config, hidden: int, heads: int, source: str) -> int:
    """One MLA layer's projections (DeepSeek-V2's modeling): q (through a q_lora_rank
    bottleneck when there is one), the joint down-projection to the latent and the rotary
    key, the latent's up-projection to per-head K (no rope part) and V, and o_proj."""
    rank, rope = _field(cfg, "kv_lora_rank", source), _field(cfg, "qk_rope_head_dim", source)
    nope, v = _field(cfg, "qk_nope_head_dim", source), _field(cfg, "v_head_dim", source)
    q_rank = cfg.get("q_lora_rank")
    q_out = heads * (nope + rope)
    q = hidden * q_out if q_rank is None else _field(cfg, "q_lora_rank", source) * (hidden + q_out)
    return q + hidden * (rank + rope) + rank * heads * (nope + v) + heads * v * hidden


def _mlp_params(cfg: Config, layers: int, hidden: int, source: str) -> int:
    """Every layer's MLP: 3 matrices when gated, 2 for OPT-style, times the experts of an
    MoE (Mixtral's num_local_experts, or DeepSeek's routed and shared experts of
    moe_intermediate_size after first_k_dense_replace dense layers)."""
    gated = cfg.get("model_type") not in ("opt", "gpt2", "gpt_neox", "falcon", "bloom")
    inter = _field(cfg, "intermediate_size", source)
    per = (3 if gated else 2) * hidden
    if cfg.get("n_routed_experts") is None:
        return layers * per * inter * _field(cfg, "num_local_experts", source, 1)
    dense = min(layers, _field(cfg, "first_k_dense_replace", source, 1))
    routed = _field(cfg, "n_routed_experts", source)
    experts = routed + _field(cfg, "n_shared_experts", source, 1)
    moe = per * _field(cfg, "moe_intermediate_size", source) * experts + hidden * routed
    return dense * per * inter + (layers - dense) * moe


def estimate_params(
    cfg: Config, layers: int, hidden: int, heads: int, kv: int, head_dim: int, source: str
) -> int:
    """Parameters from the shapes: embeddings (and an untied LM head), the attention
    projections (q/k/v/o, or MLA's) and the MLPs. Norms and biases are left out (well
    under 0.1%)."""
    vocab = _field(cfg, "vocab_size", source)
    if cfg.get("kv_lora_rank") is None:
        attention = 2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim
    else:
        attention = _mla_attention_params(cfg, hidden, heads, source)
    untied = not cfg.get("tie_word_embeddings", False)
    mlp = _mlp_params(cfg, layers, hidden, source)
    return vocab * hidden * (2 if untied else 1) + layers * attention + mlp


def load_model(text: str) -> tuple[str, Config]:
    """(name, read_config(...)) for a preset name, a folder holding config.json, or a file."""
    key = text.lower().split("/")[-1].removeprefix("meta-")
    if key in MODELS and not Path(text).exists():
        return key, read_config(MODELS[key], key)
    path = Path(text)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ValueError(
            f"--model {text!r} is neither a preset ({', '.join(MODELS)}) nor a "
            "folder or file with a config.json"
        )
    # a checkpoint's config.json, read as generate reads it: size-bounded, every failure naming
    # the file (imported here: the engine's package costs a preset nothing)
    from ..engine.hf_json import read_json

    return str(path), read_config(read_json(path), str(path))


MLA_FIELDS = ("latent_dim", "kv_lora_rank", "qk_rope_head_dim", "uncompressed_values")


def _dtypes(args: argparse.Namespace, model: Config) -> tuple[str, str, int]:
    """(the model's dtype, the KV cache's, bytes per KV element) as vLLM resolves them."""
    dtype: str = model["dtype"] if args.dtype == "auto" else TORCH_DTYPES[args.dtype]
    if args.dtype == "auto" and dtype == "float32":  # vLLM's auto serves float32 as float16
        dtype = "float16"
    kv_dtype = dtype if args.kv_cache_dtype == "auto" else args.kv_cache_dtype
    kv_bytes = MODEL_DTYPES[dtype] if args.kv_cache_dtype == "auto" else KV_CACHE_DTYPES[kv_dtype]
    return dtype, kv_dtype, kv_bytes


def _max_model_len(args: argparse.Namespace, model: Config, name: str) -> int:
    max_len = args.max_model_len or model["max_position_embeddings"]
    if max_len is None:
        raise ValueError(f"{name} has no max_position_embeddings: pass --max-model-len")
    limit = model["max_position_embeddings"]
    if limit is not None and max_len > limit:
        raise ValueError(
            f"--max-model-len {max_len:,} is longer than the model's "
            f"max_position_embeddings ({limit:,}); vLLM refuses it too"
        )
    return int(max_len)


def _kv_heads_per_gpu(args: argparse.Namespace, model: Config) -> int:
    """KV heads each GPU caches. MLA caches one latent per token (vLLM counts it as one KV
    head) that every tensor-parallel rank keeps whole."""
    tp, kv_heads = args.tensor_parallel_size, model["num_kv_heads"]
    mla = model["latent_dim"] is not None
    if model["num_heads"] % tp or (not mla and kv_heads % tp and tp % kv_heads):
        raise ValueError(
            f"--tensor-parallel-size {tp} must divide num_attention_heads "
            f"({model['num_heads']}) and divide or be a multiple of "
            f"num_key_value_heads ({kv_heads}), as vLLM requires"
        )
    return 1 if mla else max(1, kv_heads // tp)


def _available(args: argparse.Namespace, model: Config, dtype: str, out: Config) -> int:
    """Bytes left for the KV cache; what they came from goes into `out`."""
    if args.kv_cache_memory_bytes is not None:
        out.update(source="--kv-cache-memory-bytes (vLLM's kv_cache_memory_bytes)")
        return int(args.kv_cache_memory_bytes)
    weights = args.weights_bytes
    if weights is None:
        if model["params"] is None:
            raise ValueError(
                f"cannot estimate the weights ({model['params_unknown']}): pass "
                "--weights-bytes or --kv-cache-memory-bytes"
            )
        weights = model["params"] * MODEL_DTYPES[dtype] // args.tensor_parallel_size
    if args.gpu is None and args.gpu_memory is None:
        raise ValueError(
            "say how much memory: --gpu PRESET, --gpu-memory BYTES or --kv-cache-memory-bytes BYTES"
        )
    total = GPUS[args.gpu] if args.gpu else args.gpu_memory
    requested = int(total * args.gpu_memory_utilization)
    available = requested - weights - args.other_bytes
    out.update(
        gpu=args.gpu,
        gpu_memory_bytes=total,
        gpu_memory_utilization=args.gpu_memory_utilization,
        requested_bytes=requested,
        weights_bytes=weights,
        weights_estimated=args.weights_bytes is None,
        other_bytes=args.other_bytes,
    )
    if available <= 0:
        raise ValueError(
            f"nothing left for the KV cache: {total:,} B x "
            f"{args.gpu_memory_utilization:g} = {requested:,} B, weights "
            f"{weights:,} B, other {args.other_bytes:,} B"
        )
    return int(available)


def plan(args: argparse.Namespace) -> Config:
    """Everything `capacity` reports, as one dict (what --json prints)."""
    name, model = load_model(args.model)
    dtype, kv_dtype, kv_bytes = _dtypes(args, model)
    max_len = _max_model_len(args, model, name)
    kv_per_gpu = _kv_heads_per_gpu(args, model)
    shown = ("num_layers", "num_heads", "num_kv_heads", "head_dim", "sliding_window")
    out = dict(
        model=name,
        **{k: model[k] for k in shown},
        **{k: model[k] for k in MLA_FIELDS if k in model},
        parameters_estimated=model["params"],
        dtype=dtype,
        kv_cache_dtype=kv_dtype,
        kv_bytes_per_element=kv_bytes,
        block_size=args.block_size,
        max_model_len=max_len,
        tensor_parallel_size=args.tensor_parallel_size,
        kv_heads_per_gpu=kv_per_gpu,
    )
    available = _available(args, model, dtype, out)
    layers, latent = model["num_layers"], model["latent_dim"]
    spec = ModelSpec(name, layers, kv_per_gpu, model["head_dim"], kv_bytes, latent_dim=latent)
    cap = kv_capacity(spec, args.block_size, available, max_len)
    usable = max(cap.num_gpu_blocks - 1, 0)  # vLLM v1's block pool keeps block 0 as the null block
    if usable < cap.blocks_per_request:
        need = cap.blocks_per_request + 1
        raise ValueError(
            f"to serve one request of max_model_len {max_len:,} tokens, {need:,} blocks "
            f"({need * cap.bytes_per_block:,} B, the null block included) are needed, but only "
            f"{cap.num_gpu_blocks:,} fit in {available:,} B of KV cache; vLLM refuses to start: "
            f"raise the memory or pass --max-model-len {usable * args.block_size:,} or less"
        )
    out.update(kv_cache_memory_bytes=available, usable_blocks=usable, **vars(cap))
    return out


def _per_token(r: Config) -> str:
    """The product behind bytes_per_token: K and V of each KV head, or MLA's latent."""
    each = f"{r['kv_bytes_per_element']} B ({r['kv_cache_dtype']})"
    if r.get("latent_dim") is None:
        return (
            f"2 (K, V) x {r['num_layers']} layers x {r['kv_heads_per_gpu']} KV heads x "
            f"{r['head_dim']} x {each}"
        )
    return (
        f"{r['num_layers']} layers x (kv_lora_rank {r['kv_lora_rank']} + qk_rope_head_dim "
        f"{r['qk_rope_head_dim']}) x {each}: MLA caches one latent per token and layer "
        f"instead of {r['uncompressed_values']:,} values of per-head K and V"
    )


def report(r: Config) -> str:
    """The human-readable report, ending with vLLM's two startup log lines."""
    params, tp = r["parameters_estimated"], r["tensor_parallel_size"]
    lines = [
        f"model      {r['model']}: {r['num_layers']} layers, {r['num_heads']} query / "
        f"{r['num_kv_heads']} KV heads, head_dim {r['head_dim']}, "
        + (f"about {params / 1e9:.2f} B parameters" if params else "parameters unknown"),
        f"per token  {r['bytes_per_token']:,} B = "
        + _per_token(r)
        + (f", on each of {tp} GPUs" if tp > 1 else ""),
        f"per block  {r['bytes_per_block']:,} B ({r['bytes_per_block'] / 2**20:.2f} MiB) for "
        f"{r['block_size']} tokens; one layer's block (vLLM's page_size_bytes) "
        f"{r['page_size_bytes']:,} B",
    ]
    if "gpu_memory_bytes" in r:
        estimated = "estimated: parameters x bytes of the model dtype"
        how = estimated if r["weights_estimated"] else "--weights-bytes"
        lines.append(
            f"memory     {r['gpu'] or 'GPU'} {r['gpu_memory_bytes']:,} B x "
            f"{r['gpu_memory_utilization']:g} = {r['requested_bytes']:,} B, minus weights "
            f"{r['weights_bytes']:,} B ({how}) and other {r['other_bytes']:,} B"
        )
    kv = r["kv_cache_memory_bytes"]
    lines += [
        f"KV cache   {kv:,} B ({kv / 2**30:.2f} GiB) = {r['num_gpu_blocks']:,} blocks of "
        f"{r['block_size']} tokens, one of them vLLM's null block "
        f"({r['usable_blocks']:,} usable)",
        f"GPU KV cache size: {r['num_tokens']:,} tokens",
        f"Maximum concurrency for {r['max_model_len']:,} tokens per request: "
        f"{r['max_concurrency']:.2f}x",
    ]
    if r["sliding_window"]:
        lines.append(
            f"note: sliding window {r['sliding_window']:,} counted as full attention; "
            "vLLM v1 frees blocks outside the window, so it fits more requests"
        )
    if "gpu_memory_bytes" in r:
        lines.append(
            "not counted: activations and non-torch memory (vLLM measures them with a "
            "profiling run; add them with --other-bytes)"
        )
    return "\n".join(lines)


def _memory_arguments(ap: ArgParser) -> None:
    """The flags that say how much memory the KV cache gets, as vLLM's engine arguments."""
    mem = ap.add_mutually_exclusive_group()
    mem.add_argument(
        "--gpu",
        type=gpu_name,
        metavar="PRESET",
        help=f"a GPU preset, nominal memory: {', '.join(GPUS)}",
    )
    mem.add_argument(
        "--gpu-memory",
        type=byte_count,
        metavar="BYTES",
        help="total GPU memory, e.g. 85899345920 or 80GiB",
    )
    ap.add_argument(
        "--gpu-memory-utilization",
        type=float_in(0.0, 1.0, open_low=True),
        default=0.9,
        help="fraction of GPU memory vLLM may use (default 0.9)",
    )
    for flag, default, help_ in BYTE_FLAGS:
        ap.add_argument(flag, type=byte_count, metavar="BYTES", default=default, help=help_)


BYTE_FLAGS = (  # (flag, default, help): the memory flags that take BYTES, in --help order
    (
        "--kv-cache-memory-bytes",
        None,
        "KV cache bytes, as vLLM's --kv-cache-memory-bytes (overrides the rest)",
    ),
    ("--weights-bytes", None, "weight memory (default: estimated from the config's shapes)"),
    ("--other-bytes", 0, "activations, CUDA graphs, NCCL... (default 0: not counted)"),
)


def parser() -> ArgParser:
    ap = ArgParser(
        prog="pagedsim capacity",
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--model",
        required=True,
        metavar="PRESET|DIR",
        help=f"a preset ({', '.join(MODELS)}) or a folder/file with config.json",
    )
    _memory_arguments(ap)
    ap.add_argument(
        "--block-size",
        type=int_in(1, MAX_BLOCK),
        default=16,
        help="tokens per block (default 16, as vLLM on CUDA)",
    )
    ap.add_argument(
        "--dtype",
        choices=("auto", *TORCH_DTYPES),
        default="auto",
        help="the model's dtype, as vLLM's --dtype (default auto: the checkpoint's "
        "torch_dtype, float32 served as float16)",
    )
    ap.add_argument(
        "--kv-cache-dtype",
        choices=("auto", *KV_CACHE_DTYPES),
        default="auto",
        help="the KV cache's dtype, as vLLM's --kv-cache-dtype (default auto: the model's dtype)",
    )
    ap.add_argument(
        "--max-model-len",
        type=int_in(1, MAX_LEN),
        metavar="TOKENS",
        help="tokens per request (default: the model's max_position_embeddings)",
    )
    ap.add_argument(
        "--tensor-parallel-size",
        type=int_in(1, 1024),
        default=1,
        metavar="N",
        help="GPUs the model is split over; the numbers are per GPU (default 1)",
    )
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    return ap


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    result = plan(args)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0
