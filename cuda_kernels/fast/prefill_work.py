"""The work item of one tensor-core prefill CTA, set up the same way by `prefill_tc` and
`prefill_wgmma` (one copy of it, here).

A CTA serves query tokens [first, first + rows) of sequence seq (the launcher's work list:
work_seq / work_first, QT tokens per CTA) for the G heads of one KV head. Token i of the
sequence sits at position past + i of its context (past = ctx - q_len + first) and, when
causal, sees the first past + i + 1 positions. The CTA reads the union of its rows'
windows (`primitives.window_span`): positions [0, kept_hi) and [gap, len_hi), span of
them in all.

    cta_span(work_seq, work_first, query_start_loc, context_lens, work, causal, window,
             sinks) -> (seq, first, q0, rows, past, ctx, len_lo, len_hi, kept_hi,
                        start_hi, gap, span)
    row_spans(r_lo, rows, past, ctx, causal, window, sinks, rows_seen) -> (live_lo, live_hi)
        rows_seen[0:3] / [3:6] <- (length, kept, start) of the lane's rows r_lo and r_lo + 8
        (the CTA's R rows are query token r // G, head r % G); live: the row is a real one

`make_work(QT, G, R)` builds them for one kernel's compile-time shape.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, int32

from ..primitives import window_span


def make_work(QT: int, G: int, R: int):
    @cuda.jit(device=True)
    def cta_span(work_seq, work_first, query_start_loc, context_lens, work, causal, window, sinks):
        seq = np.uint32(work_seq[work])  # unsigned: no 64-bit sign-extension kept live
        first = work_first[work]
        q0 = query_start_loc[seq]
        q_len = query_start_loc[seq + 1] - q0
        ctx = context_lens[seq]
        rows = min(QT, q_len - first)  # valid query tokens in this CTA
        past = ctx - q_len + first  # position of the CTA's first query token
        len_lo = ctx
        len_hi = ctx
        if causal:
            len_lo = past + 1
            len_hi = past + rows
        kept_hi, start_hi = window_span(len_hi, window, sinks)
        _, start_lo = window_span(len_lo, window, sinks)
        gap = int32(max(start_lo, kept_hi))  # the CTA reads span [0, kept_hi), [gap, len_hi)
        span = int32(kept_hi + len_hi - gap)
        return (
            seq,
            first,
            q0,
            rows,
            past,
            ctx,
            len_lo,
            len_hi,
            int32(kept_hi),
            start_hi,
            gap,
            span,
        )  # positions fit int32 (int32 lengths)

    @cuda.jit(device=True)
    def row_spans(r_lo, rows, past, ctx, causal, window, sinks, rows_seen):
        for h in range(2):
            i = min((r_lo + 8 * h) // G, rows - 1)  # its query token (padded rows: unused)
            length = past + i + 1 if causal else ctx
            kept, start = window_span(length, window, sinks)
            rows_seen[3 * h] = length
            rows_seen[3 * h + 1] = kept
            rows_seen[3 * h + 2] = start
        return r_lo < R and r_lo // G < rows, r_lo + 8 < R and (r_lo + 8) // G < rows

    return cta_span, row_spans
