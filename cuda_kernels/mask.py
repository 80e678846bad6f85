"""`ScoreMask`: how a query row's attention scores are made, one value for every launcher.

Decode, prefill and their NumPy references all take one `ScoreMask`: the scores q . k are
multiplied by `scale`, then only the keys the mask keeps enter the softmax.

Field names follow vLLM v1's attention backends as of vLLM 0.34 (`FlashAttentionImpl.__init__`
in vllm/v1/attention/backends/flash_attn.py, and its metadata's `causal`):
  * `scale`: vLLM's `scale`, the softmax scale (None here: 1/sqrt(head_dim)).
  * `causal`: vLLM's `FlashAttentionMetadata.causal`. A query row at position p sees the
    positions up to p (else the whole context). Decode's one row is the context's last
    token, so it sees the same keys either way.
  * `sliding_window`: vLLM's `sliding_window`: a row sees only the last `sliding_window`
    of the positions it sees, itself included (vLLM's window_size (sliding_window - 1, 0));
    None is full attention, as in vLLM. Not as in vLLM: with causal=False the window
    still ends at the context's last token (vLLM makes it symmetric around the row).
  * `sinks`: the first `sinks` positions stay visible past the window (StreamingLLM's
    attention sinks, Xiao et al. 2023), the same count as pagedsim's sliding-window
    managers. A false friend: vLLM's `sinks` is a per-head tensor of learned sink
    logits (gpt-oss), not a count of tokens; these kernels have no such tensor.
vLLM's `logits_soft_cap` has no field: the kernels have no soft-cap (the engine's
kernel backend refuses a model with one).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import _checks as ck


class ScoreMask(NamedTuple):
    """The scale and the keys each query row sees (module docstring: the vLLM names)."""

    scale: float | None = None  # None: 1/sqrt(head_dim)
    causal: bool = True  # a row sees positions up to its own
    sliding_window: int | None = None  # ... and of those only the last sliding_window
    sinks: int = 0  # ... plus the first `sinks` (needs a sliding_window)


CAUSAL = ScoreMask()  # the launchers' default: 1/sqrt(head_dim), causal, no window


def checked(mask: ScoreMask, head_dim: int) -> ScoreMask:
    """`mask` validated and normalised: scale a float (`_checks.require_scale`), causal a
    bool, sliding_window None or >= 1, sinks >= 0 and only with a window. A value that is
    not a ScoreMask (a bare scale, as launchers took before) is a TypeError saying so."""
    if not isinstance(mask, ScoreMask):
        raise TypeError(
            f"mask must be a cuda_kernels.ScoreMask, got {mask!r} "
            f"(a scale goes in ScoreMask(scale=...))"
        )
    scale = ck.require_scale(mask.scale, head_dim)
    if not isinstance(mask.causal, (bool, np.bool_)):
        raise ValueError(f"causal must be a bool, got {mask.causal!r}")
    window = mask.sliding_window
    if window is not None:
        window = ck.require_int("sliding_window", window, 1)
    sinks = ck.require_int("sinks", mask.sinks, 0)
    if window is None and sinks:
        raise ValueError("sinks needs a sliding_window: pass sliding_window=... as well")
    return ScoreMask(scale, bool(mask.causal), window, sinks)
