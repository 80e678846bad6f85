"""`pagedsim conform`: check a block manager (and a paged-attention function) from the shell.

    pagedsim conform MODULE:FACTORY [--attention MODULE:FN] [--examples N] [--seed S]
                     [--check-free-order lifo|fifo] [--call-timeout SEC] [--timeout SEC]

MODULE is a file path (`my_engine/blocks.py`) or an importable name (`my_engine.blocks`);
FACTORY(num_blocks, block_size) builds a manager (see pagedsim.testing.contract).
Exit codes: 0 conforms (one summary line), 1 does not (the minimal counterexample as
Python calls), 2 the target cannot be loaded (one line saying why).

The checks run in a child process. Each call into user code has a time limit
(--call-timeout, via SIGALRM), and the parent kills the child after --timeout
seconds, so a loop or a hang in user code always ends the command.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import subprocess
import sys
import traceback

CHILD_FLAG = "--child"


class LoadError(Exception):
    """The target named on the command line cannot be imported or is not callable."""


def positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pagedsim conform", description=(
        "Check a block manager built by MODULE:FACTORY(num_blocks, block_size) against "
        "pagedsim's KVCacheManager, and optionally a paged-attention function against the "
        "float64 reference."))
    p.add_argument("target", help="MODULE:FACTORY, MODULE a file path or an importable name")
    p.add_argument("--attention", metavar="MODULE:FN",
                   help="also check fn(query, kv_cache, block_tables, context_lens, scale)")
    p.add_argument("--examples", type=positive(int), default=100,
                   help="Hypothesis examples (default 100)")
    p.add_argument("--steps", type=positive(int), default=40,
                   help="calls per manager example (default 40)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--check-free-order", choices=("lifo", "fifo"),
                   help="also require the model's block ids for this free order")
    p.add_argument("--call-timeout", type=positive(float), default=10.0,
                   help="seconds one call into user code may take (default 10)")
    p.add_argument("--timeout", type=positive(float), default=600.0,
                   help="seconds the whole check may take before it is killed (default 600)")
    return p


def split_target(target: str) -> tuple[str, str]:
    module_name, sep, attr = target.rpartition(":")
    if not (sep and module_name and attr):
        raise LoadError(f"expected MODULE:NAME, got {target!r}")
    return module_name, attr


def load(target: str):
    """MODULE:NAME -> the object; MODULE is a .py path or an importable module name."""
    module_name, attr = split_target(target)
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = os.path.abspath(module_name)
            if not os.path.isfile(path):
                raise LoadError(f"no such file: {module_name}")
            sys.path.insert(0, os.path.dirname(path))  # its siblings import as in a script
            spec = importlib.util.spec_from_file_location(
                f"conform_target_{abs(hash(path))}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except LoadError:
        raise
    except BaseException as exc:  # noqa: BLE001 -- SystemExit in user code is a load error too
        raise LoadError(f"cannot load {target!r}: {type(exc).__name__}: {exc}") from None
    if not callable(obj):
        raise LoadError(f"{target!r} is a {type(obj).__name__}, not callable")
    return obj


def run_checks(args) -> int:
    """In the child: load, check, print, return the exit code."""
    from .attention import check_attention
    from .contract import Hung, NonConformance, time_limit
    from .run import check_manager

    try:
        with time_limit(args.call_timeout, f"importing {args.target}", []):
            factory = load(args.target)
            fn = load(args.attention) if args.attention else None
    except (LoadError, Hung) as exc:
        print(f"pagedsim conform: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    common = dict(examples=args.examples, seed=args.seed, call_timeout=args.call_timeout)
    done = []
    try:
        done.append(check_manager(factory, steps=args.steps,
                                  check_free_order=args.check_free_order, **common))
        if fn is not None:
            done.append(check_attention(fn, **common))
    except (NonConformance, Hung) as exc:
        what = args.attention if fn is not None and len(done) == 1 else args.target
        print(f"pagedsim conform: {what} does NOT conform.\n\n{exc}")
        return 1
    except Exception:  # noqa: BLE001 -- e.g. Hypothesis's Flaky for a nondeterministic manager
        traceback.print_exc()
        print(f"pagedsim conform: checking {args.target} failed (traceback above)")
        return 1
    print("pagedsim conform: OK: " + "; ".join(map(str, done)))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == [CHILD_FLAG]:
        return run_checks(parser().parse_args(argv[1:]))
    args = parser().parse_args(argv)  # bad options exit 2 here, before any child starts
    try:
        for target in filter(None, (args.target, args.attention)):
            split_target(target)
    except LoadError as exc:
        print(f"pagedsim conform: {exc}", file=sys.stderr)
        return 2
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "pagedsim.testing.conform", CHILD_FLAG, *argv]
    try:
        return subprocess.run(cmd, env=env, timeout=args.timeout).returncode
    except subprocess.TimeoutExpired:  # subprocess.run has killed the child
        print(f"pagedsim conform: {args.target} did NOT finish within {args.timeout:g} s and "
              f"was killed (a call that never returns?)")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
