"""The pytest plugin: an outside suite, with the `pytest11` entry point that pyproject.toml
declares installed, gets the `manager_machine` and `paged_cache` fixtures with no set-up."""

import os
import subprocess
import sys

from kit_paths import EXAMPLES, ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

OUTSIDE_SUITE = f"""\
import sys
sys.path.insert(0, {str(EXAMPLES)!r})
import numpy as np
import pytest
from hypothesis import settings
from buggy_fork import ForkWithoutIncref
from deque_allocator import DequeBlockManager


def test_my_manager_conforms(manager_machine):
    assert manager_machine(DequeBlockManager, examples=10, steps=10).steps > 0


def test_my_buggy_manager_fails(manager_machine):
    manager_machine(ForkWithoutIncref, examples=100, steps=20)


def test_the_machine_runs_as_a_hypothesis_test(manager_machine):
    machine = manager_machine.machine(DequeBlockManager, check_free_order="fifo")
    machine.TestCase.settings = settings(max_examples=10, stateful_step_count=10)
    machine.TestCase().runTest()


@pytest.mark.paged_cache(num_kv_heads=2, group=3, dtype="float16", context_lens=[3, 9])
def test_my_attention(paged_cache):
    assert paged_cache.query.shape == (2, 6, 8) and paged_cache.kv_cache.dtype == np.float16
    assert paged_cache.reference().shape == (2, 6, 8)
"""


def test_an_outside_suite_gets_the_fixtures_through_the_entry_point(tmp_path):
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())
    entry = declared["project"]["entry-points"]["pytest11"]
    assert entry == {"pagedsim.testing.plugin": "pagedsim.testing.plugin"}
    dist = tmp_path / "site" / "pagedsim_probe-0.dist-info"  # an installed distribution
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pagedsim-probe\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(
        "[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in entry.items())
    )
    (tmp_path / "test_outside.py").write_text(OUTSIDE_SUITE)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), str(ROOT)])
    env["CI"] = "true"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_outside.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    out = done.stdout + done.stderr
    assert "1 failed, 3 passed" in out, out
    assert "test_my_buggy_manager_fails" in out, out
    assert "NonConformance: " in out and "    m.fork(0, 1)" in out, out
