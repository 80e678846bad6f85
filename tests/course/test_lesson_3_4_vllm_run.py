"""Lesson 3.4's "the same blocks in vLLM's own code": the run it prints without vLLM was
recorded with vLLM, and pagedsim still gives its pagedsim column (the oracle tier checks
the vLLM column against vLLM itself: tests/vllm_oracle/test_lesson_3_4.py)."""

import ast
import importlib.util

from course.ch03_kv_block.lessons import l3_4


def recorded() -> tuple[list, list]:
    """The vLLM and pagedsim columns of the recorded run."""
    theirs, ours = [], []
    for line in l3_4.RECORDED_VLLM_RUN.splitlines():
        left, right = line.split(" vLLM ")[1].split(" pagedsim ")
        theirs.append(ast.literal_eval(left.strip()))
        ours.append(ast.literal_eval(right.strip()))
    return theirs, ours


def test_the_recorded_run_is_what_pagedsim_does_now_and_vllm_did_then():
    theirs, ours = recorded()
    assert ours == l3_4._ours_queues()
    assert theirs == ours


def test_without_vllm_the_lesson_prints_the_recorded_run_and_how_to_make_the_venv(
    monkeypatch, capsys
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    assert l3_4._vllm_section() is True
    out = capsys.readouterr().out
    assert l3_4.RECORDED_VLLM_RUN in out and "scripts/vllm_oracle_env" in out
