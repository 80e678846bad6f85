"""Lesson 3.6's scheduler walk: the pool driven by SchedulerV1's schedule() and
update_from_output(), as `generate` drives it (tests/vllm_oracle/test_lesson_3_6.py: the
same steps as vLLM's own Scheduler)."""

from course.ch03_kv_block.lessons import l3_6


def test_the_walk_shares_as_first_block_through_the_prefix_cache_and_frees_everything():
    steps = l3_6.schedule_walk()
    a_blocks = steps[0].new["A"][1]
    admitted_b = next(step.new["B"] for step in steps if "B" in step.new)
    assert admitted_b[0] == l3_6.BLOCK_SIZE and admitted_b[1][0] == a_blocks[0]
    for step in steps:
        held = {b for blocks in step.tables.values() for b in blocks}
        assert all(0 <= b < l3_6.WALK_BLOCKS for b in held)
        assert sum(step.scheduled.values()) <= l3_6.WALK_BUDGET
    assert sorted(steps[-1].free_queue) == list(range(l3_6.WALK_BLOCKS))
    assert {name for step in steps for name in step.finished} == {"A", "B"}


def test_the_lesson_prints_one_line_per_schedule(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PAGEDSIM_LANG", "en")
    l3_6.demo(tmp_path)
    out = capsys.readouterr().out
    lines = l3_6.walk_lines(l3_6.schedule_walk())
    assert all(f"  {line}\n" in out for line in lines)
    assert lines[0].startswith("schedule() #1: A +6 (new: blocks [0, 1])")
