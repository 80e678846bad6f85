"""The lessons' Markdown pages: every one parses into both languages, and a broken one is refused
in one line that names the file (course/lessons_text.py)."""

import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from course import curriculum, lessons_text
from course.lessons_text import lesson_text, read
from pagedsim.app import cli as pagedsim_cli

SECTIONS = curriculum.sections()


@pytest.mark.parametrize("section", SECTIONS)
def test_every_lesson_page_has_an_english_and_a_chinese_section_with_the_same_figures(section):
    text = read(section)
    assert list(text) == ["en", "zh"]
    en, zh = text["en"], text["zh"]
    assert en.title and zh.title and en.body and zh.body
    assert en.title != zh.title and en.body != zh.body, "the Chinese section repeats the English"
    assert [name for name, _ in en.figures] == [name for name, _ in zh.figures]
    assert all(caption.strip() for _, caption in en.figures + zh.figures)
    for lang in ("en", "zh"):
        assert lesson_text(section, lang).startswith(f"== {section} {text[lang].title} ==\n\n")


def test_every_section_with_a_demo_has_a_page_and_no_page_lacks_a_demo():
    pages = sorted(p.stem for p in curriculum.LESSONS_DIR.glob("l*_*.md"))
    assert pages == sorted(f"l{s.replace('.', '_')}" for s in SECTIONS)


@pytest.fixture
def lessons_copy(tmp_path, monkeypatch):
    """The lessons (pages and demos) copied to a temporary folder the loader reads instead."""
    for page in curriculum.LESSONS_DIR.glob("l*_*.*"):
        shutil.copy(page, tmp_path / page.name)
    monkeypatch.setattr(curriculum, "LESSONS_DIR", tmp_path)
    return tmp_path


def _chinese_cut(text: str) -> str:
    return text[: text.index("\n# 3.4 分配")]


BROKEN = {
    "the Chinese section removed": (_chinese_cut, "has 1 '# 3.4 <title>' section(s), not 2"),
    "a heading with another section's number": (
        lambda t: t.replace("# 3.4 分配", "# 3.5 分配"),
        "is not '# 3.4 <title>'",
    ),
    "a heading with no title": (
        lambda t: t.replace("# 3.4 Allocating and freeing blocks", "# 3.4 "),
        "is not '# 3.4 <title>'",
    ),
    "a section with no text": (
        lambda t: (
            t[: t.index("# 3.4 分配") + len("# 3.4 分配与释放 Block\n")] + t[t.index("\n## 图") :]
        ),
        "the zh section of 3.4 has no text",
    ),
    "a figure item without its name in backquotes": (
        lambda t: t.replace("- `3.4-tour`: 导览", "- 3.4-tour: 导览"),
        "is not a figure item",
    ),
    "a figure only one language lists": (
        lambda t: t.replace("- `3.4-tour`: 导览", "- `3.4-tours`: 导览"),
        "the two sections list different figures",
    ),
    "a third section": (lambda t: t + "\n# 3.4 encore\n\nmore\n", "has 3 '# 3.4 <title>'"),
    "bytes that are not UTF-8": (
        lambda t: t.encode("utf-8") + b"\xff\xfe",
        "cannot be read (UnicodeDecodeError)",
    ),
}


def _break(folder, how) -> None:
    page = folder / "l3_4.md"
    broken = how(page.read_text(encoding="utf-8"))
    page.write_bytes(broken if isinstance(broken, bytes) else broken.encode("utf-8"))


@pytest.mark.parametrize("what", BROKEN)
def test_a_malformed_lesson_page_is_refused_in_one_line_naming_the_file(what, lessons_copy):
    how, why = BROKEN[what]
    _break(lessons_copy, how)
    with pytest.raises(ValueError) as e:
        read("3.4")
    message = str(e.value)
    assert why in message and str(lessons_copy / "l3_4.md") in message and "\n" not in message


def test_a_missing_lesson_page_is_refused_in_one_line_naming_the_file(lessons_copy):
    (lessons_copy / "l3_6.md").unlink()
    with pytest.raises(ValueError, match=r"lesson file .*l3_6\.md cannot be read \(FileNot"):
        read("3.6")


def test_pagedsim_lesson_says_which_page_is_broken_on_one_line(lessons_copy, capsys, monkeypatch):
    monkeypatch.setenv("PAGEDSIM_LANG", "en")  # restored after the test: --lang sets it
    _break(lessons_copy, _chinese_cut)
    assert pagedsim_cli.main(["lesson", "3.4", "--no-demo", "--lang", "en"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("pagedsim lesson: error: lesson file ")
    assert captured.err.count("\n") == 1 and "l3_4.md has 1 '# 3.4" in captured.err


# a line of text: no leading '#' (a heading) and no line break inside it
LINE = st.text(st.characters(blacklist_categories=["Cs", "Cc", "Zl", "Zp"]), min_size=1).filter(
    lambda s: s.strip() and not s.lstrip().startswith("#") and s == s.strip()
)
NAME = st.text(st.sampled_from("abc-_.0123456789"), min_size=1, max_size=12)


@given(
    titles=st.tuples(LINE, LINE),
    bodies=st.tuples(st.lists(LINE, min_size=1, max_size=5), st.lists(LINE, min_size=1)),
    figures=st.lists(st.tuples(NAME, LINE, LINE), max_size=3),
)
def test_a_page_written_in_the_documented_shape_reads_back_as_written(titles, bodies, figures):
    heading = {"en": "## Figures", "zh": "## 图"}
    parts = []
    for i, lang in enumerate(("en", "zh")):
        part = [f"# 3.4 {titles[i]}", "", "\n".join(bodies[i]), ""]
        if figures:
            part += [heading[lang], "", *(f"- `{f[0]}`: {f[1 + i]}" for f in figures), ""]
        parts.append("\n".join(part))
    text = lessons_text.parse("<!-- a note for editors -->\n\n" + "\n".join(parts), "3.4", "f")
    for i, lang in enumerate(("en", "zh")):
        assert text[lang].title == titles[i]
        assert text[lang].body == "\n".join(bodies[i])
        assert text[lang].figures == tuple((f[0], f[1 + i]) for f in figures)
