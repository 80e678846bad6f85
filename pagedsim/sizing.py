"""How many bytes a KV block costs, and how many blocks fit in a budget (chapter 3.2, 3.7).

    bytes_per_block = block_size * num_layers * 2 (K and V) * num_kv_heads * head_dim * dtype_bytes

With grouped-query attention only the KV heads count. `fit_blocks` carves blocks out of a
budget with each start aligned (3.7). `kv_capacity` (`pagedsim capacity`) follows vLLM v1
(vllm/v1/core/kv_cache_utils.py) for one full-attention KV cache group:

    page_size_bytes = 2 * block_size * num_kv_heads * head_dim * dtype_bytes   (one layer)
    num_gpu_blocks  = available_bytes // page_size_bytes // num_layers    (get_num_blocks)
    num_tokens      = num_gpu_blocks * block_size         "GPU KV cache size: N tokens"
    max_concurrency = num_gpu_blocks / ceil(max_model_len / block_size)

MLA (DeepSeek-V2/V3) caches one latent of kv_lora_rank + qk_rope_head_dim values per token
and layer (`ModelSpec.latent_dim`), as vLLM's MLAAttentionSpec pages it (one KV head, no V).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import count_arg

ALIGNMENT = 128  # bytes; a GPU memory transaction covers 128 aligned bytes (4 sectors of 32)


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a model's KV cache; the weights do not matter here."""

    name: str  # a label for tables and figures
    num_layers: int  # transformer layers, each with its own K and V
    num_kv_heads: int  # KV heads (fewer than query heads under GQA/MQA)
    head_dim: int  # elements per head vector
    dtype_bytes: int = 2  # bytes per element: 2 for FP16/BF16, 1 for FP8
    num_heads: int | None = None  # query heads; None means the same as num_kv_heads
    latent_dim: int | None = None  # MLA: values per token and layer (kv_lora_rank + rope dim)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"ModelSpec.name must be a str, got {type(self.name).__name__}")
        optional = ("num_heads", "latent_dim")
        for field in ("num_layers", "num_kv_heads", "head_dim", "dtype_bytes", *optional):
            value = getattr(self, field)
            if value is not None or field not in optional:
                object.__setattr__(self, field, count_arg(f"ModelSpec.{field}", value, 1))
        if self.num_heads is not None and self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )

    @property
    def query_heads(self) -> int:
        return self.num_heads if self.num_heads is not None else self.num_kv_heads

    def values_per_layer(self) -> int:
        """Numbers one token caches in one layer: K and V of every KV head, or MLA's latent."""
        if self.latent_dim is not None:
            return self.latent_dim
        return 2 * self.num_kv_heads * self.head_dim

    def bytes_per_token(self) -> int:
        """K and V (or MLA's latent) of one token, summed over all layers and KV heads."""
        return self.num_layers * self.values_per_layer() * self.dtype_bytes

    def bytes_per_block(self, block_size: int) -> int:
        """One whole-model block: `block_size` tokens of K and V."""
        return count_arg("block_size", block_size, 1) * self.bytes_per_token()


PRESETS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        # The chapter's worked example in 3.2.
        ModelSpec("chapter3", num_layers=32, num_kv_heads=32, head_dim=128),
        ModelSpec("llama-2-7b", num_layers=32, num_kv_heads=32, head_dim=128),
        # Grouped-query attention: 32 query heads share 8 KV heads.
        ModelSpec("llama-3-8b", num_layers=32, num_kv_heads=8, head_dim=128, num_heads=32),
        # The vLLM paper's running example: about 800 KB of KV per token.
        ModelSpec("opt-13b", num_layers=40, num_kv_heads=40, head_dim=128),
    )
}


def preset(name: str) -> ModelSpec:
    if not isinstance(name, str):
        raise TypeError(f"preset name must be a str, got {type(name).__name__}")
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(
            f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}"
        ) from None


def padding_to(nbytes: int, alignment: int = ALIGNMENT) -> int:
    """Bytes to add to `nbytes` to reach a multiple of `alignment` (a power of two)."""
    nbytes = count_arg("nbytes", nbytes)
    alignment = count_arg("alignment", alignment, 1)
    if alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two, got {alignment}")
    return -nbytes % alignment  # Python's % takes the sign of the divisor: never negative


def align_up(nbytes: int, alignment: int = ALIGNMENT) -> int:
    """Round `nbytes` up to the next multiple of `alignment` (a power of two)."""
    nbytes = count_arg("nbytes", nbytes)
    return nbytes + padding_to(nbytes, alignment)


@dataclass(frozen=True)
class BlockFit:
    """The result of carving a budget into aligned blocks."""

    num_gpu_blocks: int  # blocks that fit
    block_bytes: int  # payload bytes of one block
    stride_bytes: int  # distance between block starts: block_bytes rounded up
    padding_bytes: int  # total bytes lost to rounding, over all fitted blocks
    unused_bytes: int  # tail of the budget too small for one more block

    @property
    def padding_fraction(self) -> float:
        used = self.num_gpu_blocks * self.stride_bytes
        return self.padding_bytes / used if used else 0.0


def fit_blocks(budget_bytes: int, block_bytes: int, alignment: int = ALIGNMENT) -> BlockFit:
    """How many blocks of `block_bytes` fit in `budget_bytes` with aligned starts (the
    base address aligned: block i starts at i * stride)."""
    block_bytes = count_arg("block_bytes", block_bytes, 1)
    budget_bytes = count_arg("budget_bytes", budget_bytes)
    pad = padding_to(block_bytes, alignment)  # per block
    n = budget_bytes // (block_bytes + pad)
    return BlockFit(
        num_gpu_blocks=n,
        block_bytes=block_bytes,
        stride_bytes=block_bytes + pad,
        padding_bytes=n * pad,
        unused_bytes=budget_bytes - n * (block_bytes + pad),
    )


@dataclass(frozen=True)
class KVCapacity:
    """How much KV cache fits, in the quantities vLLM v1 logs at startup."""

    bytes_per_token: int  # K and V of one token over all layers
    page_size_bytes: int  # one block of one layer: vLLM's KVCacheSpec.page_size_bytes
    bytes_per_block: int  # one block over all layers
    num_gpu_blocks: int  # blocks that fit in the available bytes
    num_tokens: int  # num_gpu_blocks * block_size: "GPU KV cache size: N tokens"
    blocks_per_request: int  # blocks one request of max_model_len tokens needs
    max_concurrency: float  # num_gpu_blocks / blocks_per_request: "Maximum concurrency ...: Y.YYx"


def kv_capacity(
    spec: ModelSpec, block_size: int, available_bytes: int, max_model_len: int
) -> KVCapacity:
    """Blocks, tokens and requests of `max_model_len` tokens that `available_bytes` of KV
    cache hold for `spec`, as vLLM v1 computes them (see the module doc)."""
    block_size = count_arg("block_size", block_size, 1)
    available_bytes = count_arg("available_bytes", available_bytes)
    max_model_len = count_arg("max_model_len", max_model_len, 1)
    page = block_size * spec.values_per_layer() * spec.dtype_bytes
    num_gpu_blocks = available_bytes // page // spec.num_layers
    per_request = -(-max_model_len // block_size)
    return KVCapacity(
        bytes_per_token=spec.bytes_per_token(),
        page_size_bytes=page,
        bytes_per_block=page * spec.num_layers,
        num_gpu_blocks=num_gpu_blocks,
        num_tokens=num_gpu_blocks * block_size,
        blocks_per_request=per_request,
        max_concurrency=num_gpu_blocks / per_request,
    )
