"""The capstone lesson prints its text, and its demo answers its four questions from one
run of the shipped model, ties every section to it and ends with a computed verdict."""

import contextlib
import io
import re
from pathlib import Path

import pytest

from course import cli
from course.ch03_kv_block.lessons import l3_8


def test_lesson_3_8_prints_its_text_in_the_language_asked_for(capsys, monkeypatch):
    monkeypatch.setenv("PAGEDSIM_LANG", "en")  # --lang sets it for the checks: restored after
    assert cli.lesson_main(["3.8", "--no-demo", "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "== 3.8 Capstone" in out and "paged_prefill" in out and "收官" not in out
    assert "pagedsim figures --only 3.6-core-flow" in out and "16 characters" in out
    assert cli.lesson_main(["3.8", "--no-demo", "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert "== 3.8 收官" in out and "paged_prefill" in out and "Everything so far" not in out


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """One run of the demo (on the NumPy path: same blocks and tables): (output, folder)."""
    folder, out = tmp_path_factory.mktemp("l3_8"), io.StringIO()
    with contextlib.redirect_stdout(out):
        l3_8.demo(folder, backend="numpy")
    return out.getvalue(), folder


def test_the_capstone_demo_answers_its_questions_from_the_shipped_model(demo_run):
    out, folder = demo_run
    for question in ("\n1. ", "\n2. ", "\n3. ", "\n4. "):
        assert question in out, question
    for section in ("3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7"):
        assert f"\n{section} " in out, section
    assert "block  0 = 'ROMEO.\\nBut soft,'" in out  # a block holds 16 characters of text
    assert re.search(r"hit 48 tokens in the prefix cache, blocks \[0, 1, 2\]", out)
    assert "tokens identical" in out and "tokens match: False" not in out
    assert len(list(Path(folder).glob("generate-step*.png"))) >= 5


def test_the_verdict_is_computed_from_what_the_demo_printed(demo_run):
    out, _ = demo_run
    verdict = out.strip().splitlines()[-1]
    generated, hits, copies = map(
        int,
        re.search(
            r"(\d+) generated characters equal .* (\d+) prompt tokens .* (\d+) blocks were copied",
            verdict,
        ).groups(),
    )
    printed_hits = [int(h) for h in re.findall(r"hit (\d+) tokens in the prefix cache", out)]
    printed_hits += [int(h) for h in re.findall(r"r3, r0's prompt again, hit (\d+)", out)]
    assert verdict.startswith("Verdict: the blocks served correctly")
    assert hits == sum(printed_hits) and f"copy-on-write copied {copies} blocks" in out
    assert generated == 32 + 2 * 32 + 2 * 32 + 16  # r0, r1 (n = 2), r2 (2 beams), r3
