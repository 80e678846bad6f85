"""The lessons that print a trace's captions print them in the course's language."""

from course.ch03_kv_block.lessons import l3_4, l3_6
from pagedsim.text.captions import caption


def test_lesson_3_6_prints_each_steps_caption_in_chinese_under_lang_zh(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("PAGEDSIM_LANG", "zh")
    l3_6.demo(tmp_path)
    out = capsys.readouterr().out
    snaps = l3_6.manager_snapshots()
    for snap in snaps:
        assert f"step {snap.step}: {caption(snap, 'zh')};" in out
    assert caption(snaps[1], "en") not in out


def test_lesson_3_4_prints_the_fork_captions_in_the_chosen_language(monkeypatch, capsys):
    def han(text: str) -> bool:
        return any("\u4e00" <= ch <= "\u9fff" for ch in text)

    for lang in ("zh", "en"):
        monkeypatch.setenv("PAGEDSIM_LANG", lang)
        l3_4._v0_fork_demo()
        steps = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
        assert len(steps) == 5 and all(han(line) == (lang == "zh") for line in steps), steps
