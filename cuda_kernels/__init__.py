"""Numba CUDA kernels for PagedAttention, checked under the CUDA simulator.

Importing this package first decides where kernels run (`_backend`): a real GPU when
an NVIDIA driver is visible, else Numba's CUDA simulator (said once on stderr);
PAGEDSIM_CUDA=gpu|simulator forces it. That has to happen before numba.cuda is
imported, so `_backend` is imported first and nothing above it touches numba.

Launchers (all validate before launching; ValueError names the bad argument):
    write_kv(kv_cache, key, value, slot_mapping)            write_kv.py
    paged_attention(query, kv_cache, block_tables, context_lens, mask=ScoreMask(), *,
                    mode="auto", partition_size=None, path="auto")          attention.py
    paged_prefill(query, kv_cache, block_tables, context_lens, query_start_loc,
                  mask=ScoreMask(), *, path="auto", out_dtype=np.float32)   prefill.py
    ScoreMask(scale=None, causal=True, sliding_window=None, sinks=0)        mask.py
                  the scale and the keys a query row sees, in vLLM v1's names
    copy_blocks(kv_cache, pairs); swap_out(kv_cache, host, pairs); swap_in(host, kv_cache, pairs)
Building blocks every kernel imports: primitives.py. Kernel factory for other layouts:
decode.make_decode_kernel(loaders, ...), launched through attention.decode_with.
References: cuda_kernels.reference. README.md gives the reading order.
Cache layout (layout.py): kv_cache[num_blocks, 2, num_kv_heads, block_size, head_dim].
"""

from ._backend import backend, select

select()

from .attention import DecodeOptions, choose_partition, decode_with, paged_attention  # noqa: E402
from .block_copy import copy_blocks, swap_in, swap_out  # noqa: E402
from .fast.decode import make_decode_kernel  # noqa: E402
from .layout import BLOCK_MAJOR, CacheShape, Loaders, new_kv_cache  # noqa: E402
from .mask import ScoreMask  # noqa: E402
from .prefill import paged_prefill  # noqa: E402
from .write_kv import write_kv  # noqa: E402

__all__ = [
    "backend",
    "write_kv",
    "paged_attention",
    "paged_prefill",
    "ScoreMask",
    "copy_blocks",
    "swap_out",
    "swap_in",
    "make_decode_kernel",
    "decode_with",
    "DecodeOptions",
    "CacheShape",
    "choose_partition",
    "Loaders",
    "BLOCK_MAJOR",
    "new_kv_cache",
]
