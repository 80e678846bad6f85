"""`pagedsim play`: scripted scenarios on a real manager, time travel, one-line mistakes,
drawing."""

import io
import json

import pytest

from pagedsim import story
from pagedsim.app import play
from pagedsim.app.play_session import Options, Refused, Session, parse
from pagedsim.app.tour import tour_manager
from pagedsim.io.trace_json import load_snapshots, snapshots_from_dict

FORK_SCRIPT = """# beam search, copy-on-write, then the pool runs dry
alloc A 6
alloc B 5
fork B B2
append B
append B2 2
alloc C 40
free A
"""


def run_lines(text, session=None, width=100):
    session = session or Session()
    out = io.StringIO()
    pg = play.Playground(session, out=out, width=width)
    pg.loop(text.splitlines(), echo=True)
    return session, pg, out.getvalue()


def test_a_script_runs_on_a_real_manager_and_prints_the_pool_after_each_command():
    s, pg, out = run_lines(FORK_SCRIPT)
    assert pg.mistakes == 0 and len(s.moments) == 7
    assert s.manager.block_table("B2").blocks == [2, 3]
    assert out.count("free list, head first") == 7 and "> fork B B2" in out
    s.manager.check_invariants()


def test_copy_on_write_pairs_show_only_at_the_step_that_made_them():
    s, _, _ = run_lines(FORK_SCRIPT)
    pending = [(snap.step, snap.pending_copies) for snap in s.timeline() if snap.pending_copies]
    assert pending == [(4, ((3, 4),))]


def test_a_pool_that_runs_dry_is_a_step_of_its_own_not_an_exception():
    s, pg, out = run_lines(FORK_SCRIPT)
    failed = s.timeline()[6]
    assert [e.kind for e in failed.events] == ["allocation_failed"]
    assert "the pool ran dry" in story.caption(failed) and pg.mistakes == 0
    assert "Traceback" not in out


def test_the_playgrounds_own_notes_are_in_chinese_under_lang_zh():
    s, _, _ = run_lines(FORK_SCRIPT)
    dry = story.caption(s.timeline("zh")[6])
    assert "池已耗尽" in dry and "the pool ran dry" not in dry, dry
    s = Session(Options(num_gpu_blocks=4, block_size=4, preemption_mode="recompute"))
    for cmd in ("alloc A 4", "alloc B 8", "append A 5"):
        s.run(cmd)
    said = story.caption(s.timeline("zh")[-1])
    assert "抢占了序列 B：8 个 token 需要重算" in said and "preempted" not in said, said
    assert "preempted seq B: 8 tokens to recompute" in story.caption(s.timeline("en")[-1])
    from pagedsim.app.tour import format_snapshot

    text = format_snapshot(s.current(), lang="zh")
    assert "个 token   逻辑->物理：" in text and "logical->physical" not in text, text


@pytest.mark.parametrize(
    "line, reason",
    [
        ("append Z 2", "unknown sequence 'Z'"),
        ("alloc A x", "'x' is not a whole number"),
        ("fork A", "usage: fork SEQ CHILD"),
        ("alloc A 3", "already exists"),
        ("frobnicate", "unknown command 'frobnicate'"),
        ("resume A", "was not preempted"),
        ("forward", "nothing to go forward to"),
        ("draw picture.gif", "must end in .png, .svg or .pdf"),
        ("evict", "start play with --preemption-mode recompute or swap"),
    ],
)
def test_every_mistake_is_one_line_and_changes_nothing(line, reason):
    s, _, _ = run_lines("alloc A 6")
    before = (len(s.snapshots), s.manager.block_table("A").blocks, s.cursor)
    _, pg, out = run_lines(line, session=s)
    assert pg.mistakes == 1
    assert out.strip().splitlines()[-1].startswith(f"! {line}: ") and reason in out
    assert (len(s.snapshots), s.manager.block_table("A").blocks, s.cursor) == before


def test_going_back_shows_the_earlier_state_and_a_new_command_there_cuts_the_future_off():
    s, _, _ = run_lines(FORK_SCRIPT)
    s.back(3)
    assert s.current().step == 4 and [q.seq_id for q in s.current().sequences] == ["A", "B", "B2"]
    s.forward()
    assert s.cursor == 5
    s.back(2)
    s.run("free B")
    assert [m.command for m in s.moments] == ["alloc A 6", "alloc B 5", "fork B B2", "free B"]
    replay = Session()
    for m in s.moments:
        replay.run(m.command)
    assert replay.current() == s.current()  # the rebuilt manager is exactly a fresh replay


def test_recompute_preempts_the_newest_sequence_and_resume_brings_it_back():
    s = Session(Options(num_gpu_blocks=4, block_size=4, preemption_mode="recompute"))
    for cmd in ("alloc A 4", "alloc B 8", "append A 5"):
        s.run(cmd)
    assert "B" not in s.manager and s.preempted == {"B": 8}
    assert "preempted seq B: 8 tokens to recompute" in s.moments[-1].notes
    s.run("free A")
    s.run("resume B")
    assert s.manager.num_tokens("B") == 8


def test_swap_keeps_the_table_on_the_host_and_restores_its_sharing():
    s = Session(Options(num_gpu_blocks=8, block_size=4, preemption_mode="swap"))
    for cmd in ("alloc A 8", "fork A A2", "evict A2", "resume A2"):
        s.run(cmd)
    assert s.manager.num_tokens("A2") == 8 and not s.host


def test_prefix_caching_shares_full_blocks_of_equal_prompts():
    s = Session(Options(enable_prefix_caching=True))
    s.run("alloc A 9 system")
    s.run("alloc B 10 system")
    assert s.manager.block_table("B").blocks[:2] == s.manager.block_table("A").blocks[:2]


def test_a_sliding_window_releases_blocks_behind_it():
    s = Session(Options(sliding_window=4))
    s.run("alloc A 4")
    s.run("append A 8")
    assert s.manager.block_table("A").blocks[0] < 0  # dropped: the null block


def test_parse_turns_counts_into_ints_and_refuses_extra_words():
    assert parse("alloc A 6") == ("alloc", ["A", 6])
    assert parse("append A") == ("append", ["A"])
    with pytest.raises(Refused, match="usage: free SEQ"):
        parse("free A B")


def test_a_trace_saved_by_tour_json_reads_back_to_the_same_snapshots(tmp_path, capsys):
    from pagedsim.app.tour import main as tour_main

    assert tour_main(["--json"]) == 0
    path = tmp_path / "tour.json"
    path.write_text(capsys.readouterr().out)
    assert load_snapshots(path) == tour_manager().trace.snapshots
    with pytest.raises(ValueError, match="not a pagedsim trace"):
        snapshots_from_dict({"events": []})
    bad = json.loads(path.read_text())
    bad["snapshots"][1]["events"][0]["kind"] = "teleported"
    with pytest.raises(ValueError, match="unknown event kind 'teleported'"):
        snapshots_from_dict(bad)


def test_a_script_with_a_mistake_exits_1_and_prints_no_traceback(tmp_path, capsys):
    script = tmp_path / "s.txt"
    script.write_text("alloc A 6\nappend Q\n")
    assert play.main([str(script), "--width", "80"]) == 1
    out = capsys.readouterr().out
    assert "! append Q: unknown sequence 'Q'" in out and "Traceback" not in out


@pytest.mark.draw
def test_a_scenario_script_is_drawn_end_to_end_frames_key_frames_and_a_gif(tmp_path, capsys):
    script = tmp_path / "scenario.txt"
    script.write_text("alloc A 6\nfork A B\nappend B\nalloc C 40\n")
    out = tmp_path / "out"
    assert (
        play.main(
            [str(script), "--num-gpu-blocks-override", "6", "--draw", str(out), "--format", "svg"]
        )
        == 0
    )
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        [f"scenario_step_00{k}.svg" for k in range(5)] + ["scenario-key-frames.svg", "scenario.gif"]
    )
    texts = {k: (out / f"scenario_step_00{k}.svg").read_text() for k in (3, 4)}
    assert "<text" in texts[3] and "copy 1→2" in texts[3]  # the pair, at the step that made it
    # drained; the failed step drawn
    assert "copy 1→2" not in texts[4] and "OutOfBlocks" in texts[4]
    assert (out / "scenario-key-frames.svg").read_text().count("<text") > 100


@pytest.mark.draw
def test_a_loaded_trace_is_drawn(tmp_path, capsys):
    from pagedsim.app.tour import main as tour_main

    assert tour_main(["--json", "--steps", "1"]) == 0
    path = tmp_path / "t.json"
    path.write_text(capsys.readouterr().out)
    assert play.main(["--trace", str(path), "--draw", str(tmp_path / "d")]) == 0
    assert len(list((tmp_path / "d").glob("scenario_step_*.png"))) == 2


def test_the_scenario_in_the_instructors_kit_runs_without_a_mistake():
    from pathlib import Path

    text = (Path(__file__).parents[2] / "course/INSTRUCTOR_KIT.md").read_text()
    script = text.split("```play\n", 1)[1].split("```", 1)[0]
    s, pg, out = run_lines(script)
    assert pg.mistakes == 0 and len(s.moments) == 7
    assert [e.kind for e in s.current().events] == ["allocation_failed"]


@pytest.mark.draw
def test_a_block_the_window_released_is_drawn_as_an_empty_dashed_table_cell():
    from matplotlib.colors import to_hex

    from pagedsim.draw.render import render

    s = Session(Options(sliding_window=4))
    s.run("alloc A 4")
    s.run("append A 8")
    ax = render(s.current()).axes[0]
    cell = next(p for p in ax.patches if p.get_gid() == "table-A-0")
    assert to_hex(cell.get_facecolor()) == "#ffffff" and cell.get_linestyle() == "--"
    assert "\u2013" in [t.get_text() for t in ax.texts] and "-1" not in [
        t.get_text() for t in ax.texts
    ]
