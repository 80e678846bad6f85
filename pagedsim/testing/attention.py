"""`check_attention`: compare a paged-attention function with the float64 reference on
every case of `paged_caches()`, within the dtype's tolerance (docs/testing-kit.md,
"The attention check"). NumPy and Hypothesis only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn, TypedDict

import numpy as np
from hypothesis import given

from .caches import PagedCase, paged_caches
from .contract import NonConformance, describe, time_limit
from .messages import render
from .run import Summary, quiet_settings, seeded

if TYPE_CHECKING:
    from typing_extensions import Unpack

# fn(query, kv_cache, block_tables, context_lens, scale) -> [S, H, D]; checked, so any answer
AttentionFn = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float], object]


class CacheOptions(TypedDict, total=False):
    """`paged_caches`' keywords, as `check_attention` passes them on."""

    max_seqs: int
    max_context: int
    block_sizes: Sequence[int]
    max_kv_heads: int
    max_group: int
    head_dims: Sequence[int]
    dtypes: Sequence[str]
    scales: Sequence[float | None]


def compare(fn: AttentionFn, case: PagedCase, call_timeout: float | None = None) -> None:
    """Raise NonConformance unless fn(*case.args) matches the reference on this case."""
    script = [
        "import numpy as np",
        "from pagedsim.testing import CaseSpec, paged_case",
        f"case = {case!r}",
        "out = fn(*case.args)  # query, kv_cache, block_tables, context_lens, scale",
    ]
    tol = case.tolerance
    check = f"np.testing.assert_allclose(out, case.reference(), atol={tol:g}, rtol={tol:g})"

    def fail(problem: str) -> NoReturn:
        raise NonConformance(
            render(problem, script + [check], marker="", who="`fn` is your attention function")
        )

    inputs = [a.copy() for a in case.args[:4]]
    try:
        with time_limit(call_timeout, "fn(*case.args)", script):
            out = fn(*case.args)
    except Exception as exc:  # noqa: BLE001 -- any exception is a failure to report
        fail(f"fn raised {describe(exc)}")
    want = case.reference()
    try:
        got = np.asarray(out, np.float64)
    except (TypeError, ValueError):
        fail(f"fn returned {type(out).__name__}, not an array")
    if got.shape != want.shape:
        fail(f"fn returned shape {got.shape}; expected [S, H, D] = {want.shape}")
    if not all(np.array_equal(a, b) for a, b in zip(inputs, case.args[:4], strict=True)):
        fail("fn changed one of its inputs (query, kv_cache, block_tables or context_lens)")
    if not np.isfinite(got).all():
        fail("fn returned NaN or inf (did it read a poisoned slot, or overflow?)")
    err = np.abs(got - want) - tol * np.abs(want)
    if (err > tol).any():
        s, h, d = np.unravel_index(int(np.argmax(err)), err.shape)
        fail(
            f"fn differs from the float64 reference at seq {s}, head {h}, dim {d}: got "
            f"{got[s, h, d]:.6g}, want {want[s, h, d]:.6g} (tolerance for "
            f"{case.spec.dtype}: atol = rtol = {tol:g}; context_lens "
            f"{list(case.spec.context_lens)}, group {case.spec.group}, scale {case.scale:.4g})"
        )


def check_attention(
    fn: AttentionFn,
    *,
    examples: int = 100,
    seed: int | None = 0,
    call_timeout: float | None = None,
    **cache_kw: Unpack[CacheOptions],
) -> Summary:
    """Run `fn` on `examples` cases from `paged_caches(**cache_kw)`.

    Returns a Summary, or raises NonConformance with the minimal failing case."""
    calls = [0]

    @quiet_settings(examples)
    @given(case=paged_caches(**cache_kw))
    def attention_conforms(case: PagedCase) -> None:
        calls[0] += 1
        compare(fn, case, call_timeout)

    seeded(attention_conforms, seed)()
    return Summary("attention", calls[0], calls[0])
