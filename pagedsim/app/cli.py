"""The `pagedsim` command: one sub-command per job, each living in its own module.

Sub-commands are imported only when used, so `pagedsim tour` never loads
matplotlib or numba. Each target is a `main(argv: list[str]) -> int` function.

Errors are handled here, once: a ValueError, TypeError, OSError, RuntimeError or
MemoryError escaping a command becomes one line on stderr, `pagedsim COMMAND: error: ...`,
and exit status 2, never a traceback (io/args.py's ArgParser does the same for usage).
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    # name: (module:function, one-line help)
    "tour": ("pagedsim.app.tour:main", "walk through chapter 3 on a small pool, step by step"),
    "figures": ("pagedsim.draw.figures:main", "regenerate every figure in figures/"),
    "waste": ("pagedsim.labs.waste:main", "memory-waste breakdown: paged vs max/pow2/oracle"),
    "sweep": ("pagedsim.labs.sweep:main", "block sizes 1..256 on a workload"),
    "policies": ("pagedsim.labs.policies:main", "compare eviction policies on one trace"),
    "swapcost": ("pagedsim.labs.swapcost:main", "swap vs recompute: the cost model"),
    "race": (
        "pagedsim.labs.interleavings:main",
        "enumerate interleavings of a concurrent block pop",
    ),
    "generate": (
        "pagedsim.engine.generate_cli:main",
        "serve a tiny model from the blocks; compare with a dense engine",
    ),
    "conform": ("pagedsim.testing.conform:main", "check your own block manager against the model"),
    "play": (
        "pagedsim.app.play:main",
        "a playground: type alloc/append/fork/free and watch the blocks",
    ),
    "view": (
        "pagedsim.view.command:main",
        "a saved trace as one offline HTML page to step through in a browser",
    ),
    "capacity": (
        "pagedsim.app.capacity:main",
        "how many KV tokens fit model Y on GPU X (vLLM v1's arithmetic)",
    ),
}
# The course registers its commands (lesson, check, ...) and the pools `generate --pool`
# serves: course.COMMANDS and course.POOLS, name -> (module:function, help).
try:
    from course import COMMANDS as _COURSE_COMMANDS
    from course import POOLS as _COURSE_POOLS
except ImportError:  # pagedsim installed without the course
    _COURSE_COMMANDS, _COURSE_POOLS = {}, {}
COMMANDS.update(_COURSE_COMMANDS)
COURSE_POOLS: dict[str, tuple[str, str]] = _COURSE_POOLS  # read by `pagedsim generate --pool`


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: pagedsim COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "`pagedsim COMMAND --help` describes each one."]
    return "\n".join(lines)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    if (
        isinstance(error, OSError)
        and error.filename is not None
        and str(error.filename) not in text
    ):
        text += f": {error.filename}"
    return text


def main(argv: list[str] | None = None) -> int:
    try:
        return _dispatch(sys.argv[1:] if argv is None else list(argv))
    except BrokenPipeError:  # `pagedsim tour | head`: the reader left; that is not an error
        sys.stdout = None
        return 0


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv and argv[0] in ("-V", "--version"):
        from .. import __version__

        print(f"pagedsim {__version__}")
        return 0
    if not argv:
        print(_usage(), file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"pagedsim: error: unknown command {name!r} (see pagedsim --help)", file=sys.stderr)
        return 2
    module_name, func_name = COMMANDS[name][0].split(":")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        return int(func(rest) or 0)
    except BrokenPipeError:
        raise  # main's, before OSError below names it an error
    except (ValueError, TypeError, ArithmeticError, OSError, RuntimeError, MemoryError) as e:
        print(f"pagedsim {name}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"pagedsim {name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
