"""`pagedsim tour` for live use: a width limit, a press-Enter step mode, and Chinese."""

import io

import pytest

from pagedsim.app import tour
from pagedsim.text.lang import detect, display_width, wrap


def tour_output(capsys, *args, stdin=None, monkeypatch=None) -> str:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert tour.main(list(args)) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_tour_line_is_wider_than_the_width_asked_for(capsys, width, lang):
    out = tour_output(capsys, "--width", str(width), "--lang", lang)
    widest = max(out.splitlines(), key=display_width)
    assert display_width(widest) <= width, widest
    assert out.count("\n") > 100  # the whole tour was printed, not cut short


def test_the_closing_paragraph_is_a_paragraph_not_a_hanging_caption(capsys):
    out = tour_output(capsys, "--width", "80").rstrip("\n")
    closing = out.split("\n\n")[-1].splitlines()
    assert closing[0].startswith("The pool ran dry") and len(closing) > 1, closing
    assert not [line for line in closing if line.startswith(" ")], closing


def test_a_narrow_width_puts_fewer_blocks_on_a_row(capsys):
    def rows(width):
        out = tour_output(capsys, "--width", str(width), "--steps", "0")
        return [line.split()[0::2] for line in out.splitlines() if line.startswith("    #")]

    assert rows(100)[0] == ["#0", "#1", "#2", "#3", "#4"] and len(rows(100)) == 3
    assert rows(60)[0] == ["#0", "#1", "#2"] and len(rows(60)) == 4


def test_step_mode_waits_for_enter_between_steps_and_q_stops(capsys, monkeypatch):
    out = tour_output(capsys, "--step", "--width", "100", stdin="\n\nq\n", monkeypatch=monkeypatch)
    assert out.count("press Enter for the next step") == 3
    assert "step 2:" in out and "step 3:" not in out


def test_step_mode_stops_cleanly_at_the_end_of_input(capsys, monkeypatch):
    out = tour_output(capsys, "--step", "--steps", "3", stdin="", monkeypatch=monkeypatch)
    assert "step 0:" in out and "step 1:" not in out


def test_chinese_explains_every_step_in_chinese_and_keeps_the_ids(capsys):
    assert all(step["en"] and step["zh"] for step in tour.SCRIPT)  # every step, both languages
    out = tour_output(capsys, "--lang", "zh", "--width", "100")
    assert "原因：" in out and "空闲链表" in out and "块池用完了" in out
    assert "why:" not in out and "序列 B2 从序列 B 分叉，共享块 2、3（计数变为 2）" in out


def test_chinese_captions_state_the_same_numbers_as_the_english_ones():
    import re

    from pagedsim.text.captions import caption

    for snap in tour.tour_manager().trace.snapshots:
        zh, en = caption(snap, "zh"), caption(snap, "en")
        assert sorted(re.findall(r"\d+", zh)) == sorted(re.findall(r"\d+", en)), (en, zh)
        words = set(re.findall(r"[A-Za-z_]{4,}", zh))
        assert words <= {"token", "OutOfBlocks", "append_tokens", "add_sequence"}, zh  # names only


def test_a_chinese_decode_step_caption_names_every_sequence_count_and_copy_like_the_english_one():
    import re

    from pagedsim.manager import KVCacheManager
    from pagedsim.text.captions import describe

    m = KVCacheManager(num_gpu_blocks=8, block_size=2)
    m.add_sequence("A", 2)
    m.fork("A", "B")
    m.add_sequence("C", 1)
    m.decode_step(["A", "B", "C"])  # A and B share a full block; C fills its last one
    events = m.trace.snapshots[-1].events
    zh, en = describe(events, "zh"), describe(events, "en")
    assert en.startswith("decode step: 3 sequences"), en
    assert zh.startswith("解码一步：3 个序列"), zh
    assert sorted(re.findall(r"\d+", zh)) == sorted(re.findall(r"\d+", en)), (en, zh)


def test_the_locale_chooses_chinese_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("PAGEDSIM_LANG", raising=False)
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_MESSAGES", raising=False)
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert detect() == "zh" and detect("en") == "en"
    monkeypatch.setenv("LC_ALL", "en_GB.UTF-8")
    assert detect() == "en"
    with pytest.raises(ValueError, match="lang must be one of"):
        detect("fr")


def test_wrapping_cuts_at_spaces_or_between_chinese_characters_and_keeps_every_character():
    line = "  why: " + "word " * 30 + "块表" * 20
    lines = wrap(line, 40)
    assert all(display_width(x) <= 40 for x in lines)
    assert "".join(x.strip() for x in lines).replace(" ", "") == line.strip().replace(" ", "")
    assert wrap("short", 40) == ["short"]


@pytest.mark.parametrize("width", [-5, 0, 3, 7])
def test_wrapping_at_a_width_narrower_than_the_indent_ends_and_keeps_every_character(width):
    line = "  why: " + "word " * 3 + "块表" * 2
    lines = wrap(line, width)
    assert "".join(x.strip() for x in lines).replace(" ", "") == line.strip().replace(" ", "")


def test_set_lang_exports_the_choice_for_subprocesses_and_refuses_others_leaving_it(monkeypatch):
    from pagedsim.text.lang import ENV, say, set_lang

    monkeypatch.setenv(ENV, "en")
    assert set_lang("zh") == "zh" and detect() == "zh" and say("free", "空闲") == "空闲"
    with pytest.raises(ValueError, match="--lang must be one of en, zh, got 'fr'"):
        set_lang("fr", argument="--lang")
    assert detect() == "zh" and say("free", "空闲", "en") == "free"
    monkeypatch.setenv(ENV, "en")
    assert set_lang(None) == "en"


def test_step_mode_goes_back_one_step_on_b(capsys, monkeypatch):
    out = tour_output(
        capsys, "--step", "--width", "100", stdin="\n\nb\nq\n", monkeypatch=monkeypatch
    )
    import re

    assert re.findall(r"step (\d+): ", out) == ["0", "1", "2", "1"]
    assert "b back" in out
