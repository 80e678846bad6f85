"""Commands write files only where the user says: run in an empty folder, none appears.

`pagedsim figures` (writes figures/ by design), `workspace` and `export-course` are left
out: making files is what they are for, and each prints the paths it writes.
"""

import os

import pytest

from pagedsim.app import cli

SMALL = ["--num-requests", "20"]
COMMANDS = {
    "tour": ["tour"],
    "waste": ["waste", *SMALL],
    "policies": ["policies", *SMALL],
    "swapcost": ["swapcost"],
    "race": ["race"],
    "sweep": [
        "sweep",
        "--workload",
        "alpaca",
        "--num-requests",
        "40",
        "--sim-requests",
        "10",
        "--memory-tokens",
        "2048",
    ],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_run_without_a_path_leaves_the_current_folder_empty(
    name, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert cli.main(COMMANDS[name]) == 0
    capsys.readouterr()
    assert sorted(os.listdir(tmp_path)) == [], (
        f"`pagedsim {name}` wrote {sorted(os.listdir(tmp_path))}"
    )


def test_sweep_writes_its_figure_only_into_the_folder_given_and_prints_the_path(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "mine"
    assert cli.main([*COMMANDS["sweep"], "--figure", str(out)]) == 0
    printed = capsys.readouterr().out
    assert sorted(os.listdir(tmp_path)) == ["mine"]
    assert os.listdir(out) == ["block_size_sweep.png"]
    assert f"wrote {out / 'block_size_sweep.png'}" in printed
