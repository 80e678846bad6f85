"""The work of a tensor-core prefill CTA (`cuda_kernels.fast.prefill_work`, which
prefill_tc and prefill_wgmma share), checked under the simulator against the attention
rule as stated, not as the kernels compute it: the span holds exactly the positions some
row of the CTA sees, `seen_by` answers for each lane's two rows, and the tile order runs
every tile once, the masked ones first, then the run the kernels walk without a mask,
which holds exactly the tiles every row sees whole, the sink tiles aside."""

import numpy as np
import pytest

from cuda_kernels.fast.prefill_work import make_work, position, run_tile, seen_by, tile_at

QT, G, T = 8, 2, 4  # 8 query tokens of 2 heads: 16 rows, two per lane as in the kernels
R = QT * G
CTA_SPAN, ROW_SPANS, TILE_ORDER = make_work(QT, G, R, T)


def sees(length: int, window: int, sinks: int, pos: int) -> bool:
    """A query whose context is `length` positions attends all of them, or with a window
    the first `sinks` and the last `window` of them."""
    return pos < length and (window <= 0 or pos < sinks or pos >= length - window)


def cases():
    for ctx in (1, 2, 5, 8, 13, 22, 35):
        for q_len in sorted({1, 2, 3, 9, ctx}):
            if q_len > ctx:
                continue
            for first in range(0, q_len, QT):
                for causal in (True, False):
                    for window, sinks in ((0, 0), (3, 0), (6, 2), (9, 5)):
                        yield ctx, q_len, first, causal, window, sinks


@pytest.mark.parametrize("ctx, q_len, first, causal, window, sinks", list(cases()))
def test_the_span_the_rows_and_the_tile_order_follow_the_rule(
    ctx, q_len, first, causal, window, sinks
):
    setup = CTA_SPAN(
        np.array([0], np.int32),
        np.array([first], np.int32),
        np.array([0, q_len], np.int32),
        np.array([ctx], np.int32),
        0,
        causal,
        window,
        sinks,
    )
    seq, first_, q0, rows, past, ctx_, len_lo, len_hi, kept_hi, start_hi, gap, span = (
        int(x) for x in setup
    )
    assert (seq, first_, q0, ctx_) == (0, first, 0, ctx) and rows == min(QT, q_len - first)
    lengths = [past + i + 1 if causal else ctx for i in range(rows)]  # of the CTA's tokens
    union = [p for p in range(ctx) if any(sees(n, window, sinks, p) for n in lengths)]
    at = [int(position(j, kept_hi, gap)) for j in range(span)]
    assert at == union  # span index -> position: the union of what the rows see, in order

    for r_lo in range(8):  # each lane's rows r_lo and r_lo + 8
        rows_seen = np.zeros(6, np.int32)
        live = ROW_SPANS(r_lo, rows, past, ctx, causal, window, sinks, rows_seen)
        for h in range(2):
            r = r_lo + 8 * h
            assert bool(live[h]) == (r // G < rows)
            if live[h]:
                want = [sees(lengths[r // G], window, sinks, p) for p in range(ctx + 1)]
                assert [bool(seen_by(h, p, rows_seen)) for p in range(ctx + 1)] == want

    tiles, order = TILE_ORDER(span, kept_hi, gap, len_lo, start_hi, window)
    tiles, order = int(tiles), tuple(int(x) for x in order)
    assert tiles == -(-span // T)
    walk = [int(tile_at(e, order)) for e in range(tiles)]
    assert sorted(walk) == list(range(tiles))  # every tile once
    masked = order[2]
    assert [int(run_tile(e, order)) for e in range(masked, tiles)] == walk[masked:]

    def whole(j):  # inside the span, every row sees every token
        return (j + 1) * T <= span and all(
            sees(n, window, sinks, at[i]) for n in lengths for i in range(j * T, j * T + T)
        )

    def sink(j):  # holds one of the attention sinks
        return window > 0 and min(at[j * T : (j + 1) * T], default=ctx) < sinks

    run = [j for j in range(tiles) if whole(j) and not sink(j)]
    assert walk[masked:] == run  # the unmasked loop's tiles: exactly these, in order
