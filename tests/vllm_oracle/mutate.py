"""Show that an oracle machine can fail: run it against pagedsim with one line changed.

    .venv-vllm/bin/python -m tests.vllm_oracle.mutate [MUTANT ...]

For each named mutant (default: all) -- one line of pagedsim, changed in a copy in a
temporary directory (the working tree is never touched) -- the copy is imported in place
of pagedsim, and the mutant's machine runs (generation only, no shrinking, derandomised)
until the first disagreement with vLLM. It prints the change and after how many steps it
failed; a mutant that survives 200 examples is reported as SURVIVED and the exit status
is 1. A mutant is named after its machine, or machine/what for a machine's further ones.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

# mutant -> (file under pagedsim/, the line as it is, the line mutated); the machine is the
# name up to any "/"
MUTANTS = {
    "PoolOracle": (
        "policies/cache_pool.py",
        "for b in reversed(unhashed):  # each at the head in turn: the first given leads",
        "for b in unhashed:  # mutant: the last given leads",
    ),
    "PlainPoolOracle": (
        "linked_pool.py",
        "left, right, order = self._head, nxt[self._head], gone",
        "left, right, order = self._head, nxt[self._head], reversed(gone)",
    ),
    "ManagerOracle": (
        "manager.py",
        "named = table.blocks[::-1]",
        "named = table.blocks[:]",
    ),
    "WindowOracle": (
        "policies/sliding_window_cache.py",
        "run_needed = max(1, -(-(self.sliding_window - 1) // bs))",
        "run_needed = max(1, -(-self.sliding_window // bs))",
    ),
    "HybridOracle": (
        "policies/hybrid.py",
        "need = sum(g.blocks_to_extend(seq_id, n, ahead) for g in self.groups)",
        "need = max(g.blocks_to_extend(seq_id, n, ahead) for g in self.groups)",
    ),
    "SchedulerOracle": (
        "scheduler_v1.py",
        "return self.running.pop()",
        "return self.running.pop(0)",
    ),
    # configurations the machine draws since it was widened (the narrow one let these pass)
    "SchedulerOracle/long_prefill": (
        "scheduler_v1.py",
        "return min(left, budget, cap) if cap else min(left, budget)",
        "return min(left, budget)",
    ),
    "SchedulerOracle/lookahead": (
        "scheduler_v1.py",
        "return max(0, min(self.num_lookahead_tokens, self.max_model_len - end))",
        "return self.num_lookahead_tokens",
    ),
}


def mutated_copy(rel: str, old: str, new: str) -> str:
    """A temporary directory holding pagedsim with `old` replaced by `new` in `rel`."""
    root = Path(__file__).resolve().parents[2]
    tmp = Path(tempfile.mkdtemp(prefix="pagedsim-mutant-"))
    shutil.copytree(root / "pagedsim", tmp / "pagedsim")
    path = tmp / "pagedsim" / rel
    text = path.read_text(encoding="utf-8")
    if text.count(old) != 1:
        raise SystemExit(f"mutate: {rel} holds {text.count(old)} copies of {old!r}, not one")
    path.write_text(text.replace(old, new), encoding="utf-8")
    return str(tmp)


def run(mutant: str) -> bool:
    """Run a mutant's machine against it; True when the mutant was caught."""
    machine = mutant.split("/")[0]
    from hypothesis import Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    from . import sides

    vllm = sides.load_vllm()
    sides.STEPS_AGREED.pop(machine, None)  # this mutant's steps only
    for name in ("test_block_pool_oracle", "test_manager_oracle", "test_scheduler_oracle"):
        # by its full name: `from . import` would hand back the module of the last mutant
        module = importlib.import_module(f"tests.vllm_oracle.{name}")
        if hasattr(module, machine):
            cls = getattr(module, machine)
    args = [vllm]
    if machine == "SchedulerOracle":
        model_dir = Path(tempfile.mkdtemp(prefix="tiny-llama-"))
        (model_dir / "config.json").write_text(json.dumps(sides.TINY_LLAMA))
        args.append(str(model_dir))
    quick = settings(
        max_examples=200,
        stateful_step_count=40,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        report_multiple_bugs=False,
    )
    try:
        run_state_machine_as_test(lambda: cls(*args), settings=quick)
    except AssertionError as e:
        steps = sides.STEPS_AGREED.get(machine, 0)
        print(f"{mutant}: caught after {steps} agreed steps: {str(e).splitlines()[0]}")
        return True
    print(f"{mutant}: SURVIVED 200 examples")
    return False


def main(argv: list[str]) -> int:
    names = argv or list(MUTANTS)
    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        raise SystemExit(f"mutate: no mutant for {unknown}; choose from {list(MUTANTS)}")
    caught = True
    for name in names:
        rel, old, new = MUTANTS[name]
        print(f"{name}: pagedsim/{rel}: {old!r} -> {new!r}", flush=True)
        copy = mutated_copy(rel, old, new)
        sys.path.insert(0, copy)
        for mod in [m for m in sys.modules if m == "pagedsim" or m.startswith("pagedsim.")]:
            del sys.modules[mod]
        for mod in [m for m in sys.modules if m.startswith("tests.vllm_oracle.test_")]:
            del sys.modules[mod]
        importlib.invalidate_caches()
        pagedsim = importlib.import_module("pagedsim")
        assert pagedsim.__file__.startswith(copy), f"mutate: imported {pagedsim.__file__}"
        caught = run(name) and caught
        sys.path.remove(copy)
    return 0 if caught else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
