"""`pagedsim tour` runs the chapter's story and its options work."""

import json

from pagedsim.app.cli import main
from pagedsim.app.tour import SCRIPT, tour_manager


def test_the_tour_shows_sharing_copy_on_write_a_finish_and_running_dry(capsys):
    assert main(["tour"]) == 0
    out = capsys.readouterr().out
    for phrase in (
        "forks from seq B",
        "copy-on-write",
        "return to the free list",
        "OutOfBlocks",
        "free list, head first",
        "logical->physical",
    ):
        assert phrase in out


def test_the_tour_manager_ends_with_a_refused_step_and_intact_invariants():
    m = tour_manager()
    assert len(m.trace.snapshots) == len(SCRIPT) + 1
    assert m.trace.snapshots[-1].events[0].kind == "allocation_failed"
    m.check_invariants()


def test_steps_stops_early(capsys):
    main(["tour", "--steps", "2"])
    out = capsys.readouterr().out
    assert "step 2:" in out and "step 3:" not in out


def test_json_prints_the_trace(capsys):
    main(["tour", "--json", "--steps", "3"])
    data = json.loads(capsys.readouterr().out)
    assert len(data["snapshots"]) == 4
    assert data["events"][0]["kind"] == "sequence_added"


def test_the_cli_lists_its_commands_and_its_version(capsys):
    assert main(["--help"]) == 0
    assert "tour" in capsys.readouterr().out
    assert main([]) == 2  # no command is a usage error: the list goes to stderr
    assert "tour" in capsys.readouterr().err
    assert main(["no-such-command"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    from pagedsim import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"pagedsim {__version__}\n"
