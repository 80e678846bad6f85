"""The vLLM oracle tier: pagedsim against vLLM's own v1 core (tests/vllm_oracle).

It runs in a venv of its own, which `scripts/vllm_oracle_env` makes (.venv-vllm: vllm==0.34.0
beside this machine's CPU torch wheel):

    scripts/vllm_oracle_env && .venv-vllm/bin/python -m pytest tests/vllm_oracle

Anywhere vLLM is not importable (the main suite's venv), each test module skips itself as
it is collected, by calling `sides.needs_vllm()` first: every skip comes from that one line,
so pytest's summary folds them into ONE line, which says how to make the venv. vLLM is
imported once per run (the `vllm` fixture is session-scoped: about 7 s). Test modules here
import nothing from vLLM at module level; they take the `vllm` fixture.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def vllm() -> Any:
    """vLLM's v1 core and its KV-event structs, imported once (tests/vllm_oracle/sides.py)."""
    from .sides import load_vllm

    return load_vllm()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per machine: the steps on which pagedsim and vLLM agreed."""
    from .sides import STEPS_AGREED

    for name, steps in sorted(STEPS_AGREED.items()):
        terminalreporter.write_line(f"vllm oracle: {name} agreed with vLLM on {steps} steps")
