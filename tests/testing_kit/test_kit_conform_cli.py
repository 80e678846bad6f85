"""`pagedsim conform` end to end, in subprocesses: exit 0 with a summary, 1 with the
minimal counterexample, 2 when the target cannot be loaded, and always terminating."""

import os
import subprocess
import sys
import textwrap
import time

import pytest
from kit_paths import EXAMPLES, ROOT

FEW = ["--examples", "20", "--steps", "20"]


def conform(*args, timeout=1800):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "pagedsim.app.cli", "conform", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.slow
def test_the_deque_allocator_conforms_with_one_summary_line():
    code, out, err = conform(
        "examples/conform/deque_allocator.py:DequeBlockManager", "--check-free-order", "fifo", *FEW
    )
    assert (code, err) == (0, ""), out
    assert out.startswith("pagedsim conform: OK: manager: ") and out.count("\n") == 1


@pytest.mark.slow
def test_the_vllm_names_adapter_and_a_numpy_attention_conform():
    code, out, err = conform(
        "examples/conform/vllm_names.py:make_adapter",
        "--attention",
        "examples/conform/numpy_attention.py:paged_attention",
        *FEW,
    )
    assert (code, err) == (0, ""), out
    assert "manager: " in out and "attention: 20 steps over 20 generated examples conform" in out


@pytest.mark.slow
def test_the_buggy_fork_example_exits_1_with_the_minimal_script_the_guide_shows():
    code, out, _ = conform("examples/conform/buggy_fork.py:ForkWithoutIncref")
    assert code == 1
    assert "buggy_fork.py:ForkWithoutIncref does NOT conform" in out
    calls = [line.split("  #")[0].strip() for line in out.split("your manager):\n")[1].splitlines()]
    assert len(calls) == 4 and calls[1:3] == ["m.add_sequence(0, 1)", "m.fork(0, 1)"], calls
    assert out.strip() in (ROOT / "docs" / "testing-kit.md").read_text(), "the guide is stale"


@pytest.mark.parametrize(
    "target, says",
    [
        ("examples/conform/no_such_file.py:Manager", "no such file"),
        ("pagedsim.testing:NoSuchFactory", "AttributeError"),
        ("examples/conform/deque_allocator.py", "expected MODULE:NAME"),
    ],
)
def test_a_target_that_cannot_be_loaded_exits_2_with_one_line(target, says):
    code, out, err = conform(target)
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err, err


def test_a_call_that_never_returns_is_stopped_by_the_per_call_limit(tmp_path):
    (tmp_path / "looping.py").write_text(
        textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(EXAMPLES)!r})
        from deque_allocator import DequeBlockManager
        class Looping(DequeBlockManager):
            def fork(self, parent_id, child_id):
                while True:
                    pass
        """)
    )
    code, out, _ = conform(f"{tmp_path / 'looping.py'}:Looping", "--call-timeout", "0.5", *FEW)
    assert code == 1 and "did not return within 0.5 s" in out and "# <- hangs here" in out
    calls = [line.strip() for line in out.split("your manager):\n")[1].splitlines()]
    assert len(calls) == 3 and calls[2].startswith("m.fork(0, 1)"), "the hang's script is shrunk"


def test_a_hang_that_ignores_the_alarm_is_still_stopped_by_the_per_call_limit(tmp_path):
    """The limit is measured in the parent, so a target that ignores SIGALRM cannot defeat it."""
    (tmp_path / "stuck.py").write_text(
        textwrap.dedent("""\
        import signal, time
        def Stuck(num_gpu_blocks, block_size):
            signal.signal(signal.SIGALRM, signal.SIG_IGN)
            while True:
                time.sleep(0.1)
        """)
    )
    code, out, _ = conform(
        f"{tmp_path / 'stuck.py'}:Stuck",
        "--timeout",
        "30",
        "--call-timeout",
        "1",
        *FEW,
        timeout=1800,
    )
    assert code == 1 and "did not return within 1 s" in out and "m = factory(1, 1)" in out, out


def test_a_slow_target_is_killed_by_the_overall_timeout(tmp_path):
    """Every call returns within --call-timeout, but all of them take longer than --timeout."""
    (tmp_path / "slow.py").write_text(
        textwrap.dedent(f"""\
        import sys, time
        sys.path.insert(0, {str(EXAMPLES)!r})
        from deque_allocator import DequeBlockManager
        class Slow(DequeBlockManager):
            def add_sequence(self, *args):
                time.sleep(0.5)
                return super().add_sequence(*args)
        """)
    )
    start = time.monotonic()
    code, out, _ = conform(
        f"{tmp_path / 'slow.py'}:Slow", "--timeout", "4", "--call-timeout", "2", *FEW, timeout=1800
    )
    assert code == 1 and "did NOT finish within 4 s and was killed" in out, out
    assert time.monotonic() - start < 30


CHEATS = {
    "exit0": "import sys\ndef Factory(n, b):\n    sys.exit(0)\n",
    "os_exit0": "import os\ndef Factory(n, b):\n    os._exit(0)\n",
    "fake_ok": (
        "import os\ndef Factory(n, b):\n    print('pagedsim conform: OK: manager: "
        "40 steps over 100 generated examples conform', flush=True)\n    os._exit(0)\n"
    ),
    "exit_at_import": "import os\nos._exit(0)\ndef Factory(n, b):\n    pass\n",
    "patch_kit": (
        "import pagedsim.testing.run as r\nr.check_manager = lambda *a, **k: 'patched'\n"
        "def Factory(n, b):\n    raise SystemExit(0)\n"
    ),
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_no_exit_print_or_patch_in_the_target_produces_conforms(tmp_path, name):
    (tmp_path / f"{name}.py").write_text(CHEATS[name])
    code, out, err = conform(f"{tmp_path / name}.py:Factory", *FEW, timeout=1800)
    assert (
        code in (1, 2) and "OK" not in out and "conforms" not in out.replace("does NOT conform", "")
    ), (code, out, err)
    assert "Traceback" not in out + err
