"""Run the kit's checks outside pytest: one call, a summary or a `NonConformance`, with a
fixed seed by default and no Hypothesis database (`check_attention` is in attention.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.stateful import run_state_machine_as_test

from .contract import Hung
from .hangs import shrunk
from .machine import MachineOptions, manager_machine

if TYPE_CHECKING:
    from typing_extensions import Unpack

Test = TypeVar("Test", bound=Callable[[], None])


@dataclass(frozen=True)
class Summary:
    what: str  # "manager" or "attention"
    examples: int  # examples Hypothesis ran (each a fresh manager or cache); for the
    # manager this can exceed max_examples: runs cut short by Hypothesis count too
    steps: int  # calls checked (manager rules, or attention calls)

    def __str__(self) -> str:
        return f"{self.what}: {self.steps} steps over {self.examples} generated examples conform"


class CheckOptions(MachineOptions, total=False):
    """`check_manager`'s keywords after the factory, for the callers that pass them on."""

    examples: int
    steps: int
    seed: int | None


def quiet_settings(examples: int, **extra: Any) -> settings:
    """Settings for a one-shot run (`extra`: e.g. stateful_step_count): no database, no
    deadline, no Hypothesis printing, and no "explain" phase (it re-runs the shrunk example
    hundreds of times to say which arguments do not matter; our counterexample is a script)."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=False,
        phases=[p for p in Phase if p != Phase.explain],
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        **extra,
    )


def seeded(test: Test, seed: int | None) -> Test:
    return test if seed is None else hypothesis_seed(seed)(test)


def check_manager(
    factory: Callable[[int, int], object],
    *,
    examples: int = 100,
    steps: int = 40,
    seed: int | None = 0,
    **machine_kw: Unpack[MachineOptions],
) -> Summary:
    """Drive `factory(num_gpu_blocks, block_size)` managers through `manager_machine`.

    Returns a Summary, or raises `NonConformance` whose message is the minimal
    counterexample as Python calls (or `Hung` if a call did not return in time).
    `machine_kw` go to `manager_machine` (block_size, num_gpu_blocks, check_free_order, ...).
    """
    machine = manager_machine(factory, **machine_kw)
    config = quiet_settings(examples, stateful_step_count=steps)
    try:
        try:  # seed the run (a private helper of hypothesis.stateful; fall back if it moves)
            from hypothesis.stateful import get_state_machine_test

            test = seeded(get_state_machine_test(machine, settings=config), seed)
        except ImportError:  # pragma: no cover - depends on the Hypothesis version

            def test() -> None:
                run_state_machine_as_test(machine, settings=config)

        test()
    except Hung as exc:
        assert machine.call_timeout is not None, "only a call with a time limit hangs"
        raise shrunk(exc, factory, machine.call_timeout) from None
    return Summary("manager", machine.examples_run, machine.steps_run)
