"""The capstone lesson prints its text, and its demo ties every section to the run."""

from pathlib import Path

from course import cli
from course.ch03_kv_block.lessons import l3_8


def test_lesson_3_8_prints_its_text_in_the_language_asked_for(capsys, monkeypatch):
    monkeypatch.setenv("PAGEDSIM_LANG", "en")  # --lang sets it for the checks: restored after the test
    assert cli.lesson_main(["3.8", "--no-demo", "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "== 3.8 Capstone" in out and "paged_prefill" in out and "收官" not in out
    assert "pagedsim figures --only 3.6-core-flow" in out
    assert cli.lesson_main(["3.8", "--no-demo", "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert "== 3.8 收官" in out and "paged_prefill" in out and "Everything so far" not in out


def test_the_capstone_demo_names_a_moment_for_every_section_and_matches_the_dense_engine(
        tmp_path, capsys):
    l3_8.demo(tmp_path, backend="numpy")  # the NumPy path: same blocks and tables, no simulator
    out = capsys.readouterr().out
    for section in ("3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7"):
        assert f"\n{section} " in out, section
    assert "tokens identical" in out and "tokens match: False" not in out
    assert len(list(Path(tmp_path).glob("generate-step*.png"))) >= 5
