"""The notebooks cannot rot: they match the lessons, and every code cell runs, headless, in order.

Each notebook's code cells are executed with exec() in one fresh namespace per notebook,
in a temporary folder, with matplotlib's Agg backend and PAGEDSIM_NOTEBOOK_FAST=1 (figures
and stepper frames at a low resolution). No Jupyter is needed.
"""

import json
import os

import matplotlib
import pytest

from course import curriculum, notebooks

matplotlib.use("Agg")


def test_every_notebook_is_valid_nbformat_4_and_matches_its_lesson():
    for section in notebooks.SECTIONS:
        path = notebooks.FOLDER / f"{section}.ipynb"
        nb = json.loads(path.read_text(encoding="utf-8"))
        assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 5 and nb["cells"], path.name
        for cell in nb["cells"]:
            assert {"cell_type", "metadata", "source", "id"} <= set(cell), f"{path.name}: malformed cell"
            if cell["cell_type"] == "code":
                assert cell["outputs"] == [] and cell["execution_count"] is None, f"{path.name} stores outputs"
        assert path.read_text(encoding="utf-8") == notebooks.render(section), (
            f"{path.name} is out of date: run python -m course.notebooks")


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
        assert "FAIL 3." in out and "not implemented yet" in out, "the check cell should check the untouched stub"
    else:  # the capstone has no exercise: no check cell
        assert "FAIL" not in out and "pagedsim check" not in "".join(
            "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert os.listdir(tmp_path) == [f"pagedsim-notebook-{section}"], "a notebook wrote outside its folder"
