"""A student copy never links to a page the export left out."""

from course import export
from course.export_links import NOTE, unlink_missing


def test_a_link_to_a_missing_page_becomes_plain_text_and_others_stay(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "map.md").write_text("# map\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        "See [the map](docs/map.md), [teaching](course/INSTRUCTORS.md#grading), "
        "[vLLM](https://example.org/x.md) and [above](#top).\n",
        encoding="utf-8",
    )
    assert unlink_missing(tmp_path) == ["README.md: course/INSTRUCTORS.md#grading"]
    text = readme.read_text(encoding="utf-8")
    assert f"teaching{NOTE}," in text and "(course/INSTRUCTORS.md" not in text
    assert "[the map](docs/map.md)" in text and "[vLLM](https://example.org/x.md)" in text
    assert "[above](#top)" in text
    assert unlink_missing(tmp_path) == []  # none left to rewrite


def test_the_exported_copy_has_no_link_to_a_left_out_file(tmp_path):
    export.export(tmp_path / "copy")
    assert unlink_missing(tmp_path / "copy") == []  # export already unlinked every one
    assert not (tmp_path / "copy" / "course" / "INSTRUCTORS.md").exists()
