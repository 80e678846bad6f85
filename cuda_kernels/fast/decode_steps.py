"""The decode kernel's per-step softmax pieces: each score's exp computed by one lane.

A decode step ends with TH = TPR x HPC dot products (tokens x heads), each a partial sum
spread over the LPR lanes of a row. `primitives.group_sums` finishes them with a
reduce-scatter and then broadcasts every total to every lane, so each lane used to
compute all TH exps of its row: LPR times the work. The decode kernel calls the two
halves separately (they live in `primitives`, which builds group_sums from them; they
are importable from here too):

    reduce_scatter(vals, n, width, lane)   after it, vals[0:own] hold this lane's totals
    owned_index(lane, j, n, width)         which of the n totals vals[j] is
    broadcast(vals, n, width, lane, out)   out[0:n] <- every total, in every lane

so a lane computes exp only for the totals it owns (one each at G = 4 and 8, D = 128)
and the row's lanes then exchange probabilities instead of scores. The lazy rescale of
FlashAttention-3 makes that the common case: while no score beats its head's running
max by more than SLACK, the max stays put and p = 2^(s - m) is final. Whether any lane
of the warp saw such a score is one warp vote (`cuda.any_sync`, VOTE.ANY), so the rare
path that moves the max, rescales the accumulators and recomputes the exps is a
warp-uniform branch, laid out by the kernel outside its hot loop.

NaN propagates as in IEEE arithmetic (and the float64 reference): a NaN score is not
"masked" (only -inf is), so its exp is NaN and poisons the running sum and the output.

Under the simulator `cuda.any_sync` and `cuda.syncwarp` do not exist; `install_votes`
adds stand-ins with CUDA's semantics (any_sync: non-zero iff the predicate is non-zero
in any lane of `mask`; syncwarp: the lanes of `mask` wait for one another), built on
the shuffle stand-ins' warp exchange.
"""

from __future__ import annotations

from .. import _backend
from ..primitives import (  # noqa: F401  (the reduce-scatter pieces: shared primitives)
    FULL_MASK,
    broadcast,
    fast_exp2,
    owned_index,
    reduce_scatter,
)


def _any_sync(mask, predicate):
    """Simulator stand-in for CUDA's __any_sync: 1 if any lane of `mask` votes non-zero."""
    from ..sim.simulator import _exchange

    votes = _exchange(int(mask) & 0xFFFFFFFF, bool(predicate), "vote")
    return int(any(bool(v) for v in votes.values()))


def _syncwarp(mask=FULL_MASK):
    """Simulator stand-in for __syncwarp: the lanes of `mask` wait for one another."""
    from ..sim.simulator import _exchange

    _exchange(int(mask) & 0xFFFFFFFF, None, "syncwarp")


def install_votes() -> None:
    """Give the simulator's in-kernel `cuda` module `any_sync` and `syncwarp` (idempotent)."""
    from numba.cuda.simulator.kernelapi import FakeCUDAModule

    if not hasattr(FakeCUDAModule, "any_sync"):
        FakeCUDAModule.any_sync = staticmethod(_any_sync)
    if not hasattr(FakeCUDAModule, "syncwarp"):
        FakeCUDAModule.syncwarp = staticmethod(_syncwarp)


if _backend.backend() == "simulator":
    install_votes()
