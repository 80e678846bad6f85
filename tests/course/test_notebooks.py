"""The notebooks cannot rot: their cells match the lessons, they are stored with the outputs of
`python -m course.notebooks`, and (slow) every code cell runs, headless, in order.

In the slow test each notebook's code cells are executed with exec() in one fresh namespace per
notebook, in a temporary folder, with matplotlib's Agg backend and PAGEDSIM_NOTEBOOK_FAST=1 (figures
and stepper frames at a low resolution). No Jupyter is needed.
"""

import json
import os

import matplotlib
import pytest

from course import curriculum, notebooks

matplotlib.use("Agg")


# 3.8's notebook is rewritten around a real model by its own lesson's owner, who executes it then
EXECUTED = [s for s in notebooks.SECTIONS if s != "3.8"]


def test_every_notebook_is_valid_nbformat_4_and_its_cells_are_the_generators():
    for section in notebooks.SECTIONS:
        path = notebooks.FOLDER / f"{section}.ipynb"
        nb = json.loads(path.read_text(encoding="utf-8"))
        assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 5 and nb["cells"], path.name
        for cell in nb["cells"]:
            assert {"cell_type", "metadata", "source", "id"} <= set(cell), (
                f"{path.name}: malformed cell"
            )
        assert notebooks.render(section, notebooks.without_outputs(nb)) == notebooks.render(
            section
        ), f"{path.name} is out of date: run python -m course.notebooks {section}"


@pytest.mark.parametrize("section", EXECUTED)
def test_every_code_cell_is_stored_with_the_outputs_of_its_run(section):
    """Executed by `python -m course.notebooks`: counts 1, 2, ... and the lesson's own lines in the
    outputs."""
    nb = json.loads((notebooks.FOLDER / f"{section}.ipynb").read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1)), (
        f"{section}.ipynb was not executed"
    )
    assert all(c["outputs"] for c in code), f"{section}.ipynb has a code cell without outputs"
    text = "".join("".join(o.get("text", [])) for c in code for o in c["outputs"])
    assert f"files from this notebook go to ./pagedsim-notebook-{section}" in text
    assert "\nverdict: " in text, "the demo's verdict is missing from the stored outputs"
    pictures = [o for c in code for o in c["outputs"] if "image/png" in o.get("data", {})]
    assert len(pictures) >= 1, f"{section}.ipynb stores no figure"
    assert "/tmp" not in text and "Traceback" not in text
    assert "False" not in text and "True" not in text.replace(
        "shares memory with the pool: True", ""
    )


def test_a_check_cell_returns_nothing_so_jupyter_shows_no_false(capsys):
    assert notebooks.check("3.1") is None
    assert "FAIL 3.1" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("section", notebooks.SECTIONS)
def test_every_code_cell_of_the_notebook_runs_in_order(section, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(notebooks, "FAST", True)  # what PAGEDSIM_NOTEBOOK_FAST=1 sets
    monkeypatch.delenv("PAGEDSIM_WORKSPACE", raising=False)
    nb = json.loads((notebooks.FOLDER / f"{section}.ipynb").read_text(encoding="utf-8"))
    namespace = {"__name__": "__main__"}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{section}.ipynb", "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out
    assert f"pagedsim-notebook-{section}" in out and "stepper:" in out
    if any(e.section == section for e in curriculum.load()):
        assert "FAIL 3." in out and "not implemented yet" in out, (
            "the check cell should check the untouched stub"
        )
    else:  # the capstone has no exercise: no check cell
        assert "FAIL" not in out and "pagedsim check" not in "".join(
            "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"
        )
    assert os.listdir(tmp_path) == [f"pagedsim-notebook-{section}"], (
        "a notebook wrote outside its folder"
    )


def test_a_notebook_finds_the_workspace_made_at_the_repository_root(tmp_path, monkeypatch):
    """The kernel runs in course/ch03_kv_block/notebooks; the README makes ./pagedsim-work at the
    root: the check cell looks in every folder above, and names the file it checked."""
    from course import workspace

    monkeypatch.delenv("PAGEDSIM_WORKSPACE", raising=False)
    workspace.create(tmp_path / workspace.DEFAULT)
    deep = tmp_path / "course" / "ch03_kv_block" / "notebooks"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    ex = curriculum.find("3.4a")
    assert workspace.find(ex) is None  # `pagedsim check` keeps to its documented places
    assert workspace.find_upwards(ex) == tmp_path / workspace.DEFAULT / "ex3_4a_free_list.py"
    monkeypatch.setenv("PAGEDSIM_WORKSPACE", str(tmp_path / "elsewhere"))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "ex3_4a_free_list.py").write_text("# mine\n")
    assert workspace.find_upwards(ex) == tmp_path / "elsewhere" / "ex3_4a_free_list.py"
