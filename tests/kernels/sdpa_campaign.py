"""A random campaign: the attention kernels against torch SDPA (float64) on shapes drawn
over the whole space issue 24 is judged on. Run it (slow: the CUDA simulator):

    PYTHONPATH=. nice /work/venv-torch/bin/python tests/kernels/sdpa_campaign.py \
        --minutes 40 --log /tmp/sdpa_campaign.jsonl
    PYTHONPATH=. /work/venv-torch/bin/python tests/kernels/sdpa_campaign.py --replay 'JSON'

The space: `sdpa_cases` (its docstring).

Each case runs path="auto" (recording what it chose) and then every other path that can
serve the shape ("tensor" where `servable` says so, always "cuda_core"). Every result is
compared with SDPA (`sdpa_cases.sdpa`) on K/V gathered there, not by reference.py, with a
boolean mask built there (`sdpa_cases.masks`): query token i of a chunk sits at position
prefix + i and sees the positions <= prefix + i (all of the context when not causal),
windowed as the first `sinks` plus the last `window` of those. The tolerance is on
max |out - sdpa| / max |V|:
    tensor paths     TOL_TENSOR = 4e-3: P is rounded to fp16 before P V (relative error
                     2^-11 = 4.9e-4 per weight) and Q is rounded to fp16 (a score error of
                     2^-11 |s|, which exp turns into a relative weight error); 8x margin;
    cuda_core        TOL_CUDA_CORE = 2e-5: fp32 arithmetic on exact fp16/fp32 inputs.
A case that raises, returns non-finite values or misses the tolerance is a failure; its
line in the log is its reproducer (the case dict: the seed makes the data).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback

import numpy as np
from sdpa_cases import arrays, draw_decode, draw_prefill, expected_auto, score_mask, sdpa, servable

TOL_TENSOR = 4e-3
TOL_CUDA_CORE = 2e-5


def launch(case: dict, data: dict, path: str) -> tuple[np.ndarray, str]:
    """Run the kernel; returns (output, the path that ran)."""
    import cuda_kernels
    from cuda_kernels import attention, prefill

    common = (data["query"], data["kv_cache"], data["block_tables"], data["context_lens"])
    if case["kind"] == "decode":
        out = cuda_kernels.paged_attention(
            *common,
            score_mask(case),
            mode=case["mode"],
            partition_size=case["partition_size"],
            path=path,
        )
        return out, attention.LAST_PLAN["path"]
    out = cuda_kernels.paged_prefill(*common, data["query_start_loc"], score_mask(case), path=path)
    return out, prefill.LAST_PATH["path"]


def error(out, want, data) -> float:
    """max |out - want| / max |V| (inf when out holds NaN/inf)."""
    out = np.asarray(out, np.float64)
    if out.shape != want.shape or not np.isfinite(out).all():
        return math.inf
    scale = float(np.abs(np.asarray(data["kv_cache"], np.float64)[:, 1]).max())
    return float(np.abs(out - want).max() / scale)


def run_case(case: dict, oracle=sdpa) -> list[dict]:
    """Every path that can serve the case, against the oracle: one record per run."""
    data = arrays(case)
    want = oracle(case, data)
    records, ran = [], set()
    for path in ("auto", "tensor", "cuda_core"):
        if path == "tensor" and not servable(case):
            continue
        if path in ran:  # auto already ran this kernel
            continue
        rec = dict(path=path)
        start = time.time()
        try:
            out, chosen = launch(case, data, path)
            rec.update(chosen=chosen, err=error(out, want, data))
            tol = TOL_TENSOR if chosen == "tensor" else TOL_CUDA_CORE
            rec.update(tol=tol, ok=rec["err"] <= tol)
            if path == "auto" and chosen != expected_auto(case):
                rec.update(ok=False, why=f"auto chose {chosen}, expected {expected_auto(case)}")
            ran.add(chosen)
        except Exception as exc:  # a failure to log, with its traceback
            rec.update(
                ok=False, why=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc(limit=6)
            )
        rec["seconds"] = round(time.time() - start, 1)
        records.append(rec)
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=40)
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--log", default="sdpa_campaign.jsonl")
    parser.add_argument("--replay", help="one case as JSON (a log line's 'case')")
    args = parser.parse_args(argv)
    if args.replay:
        case = json.loads(args.replay)
        case = case.get("case", case)
        for rec in run_case(case):
            print(json.dumps(rec))
        return 0
    rng = np.random.default_rng(args.seed)
    stop = time.time() + 60 * args.minutes
    failures = 0
    with open(args.log, "a") as log:
        number = 0
        while time.time() < stop:
            case = draw_decode(rng) if number % 2 == 0 else draw_prefill(rng)
            records = run_case(case)
            bad = [r for r in records if not r["ok"]]
            failures += bool(bad)
            log.write(json.dumps(dict(n=number, case=case, runs=records, ok=not bad)) + "\n")
            log.flush()
            print(
                number,
                case["kind"],
                "FAIL" if bad else "ok",
                [(r["path"], r.get("chosen"), r.get("err")) for r in records],
                flush=True,
            )
            number += 1
    print(f"{number} cases, {failures} failed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
