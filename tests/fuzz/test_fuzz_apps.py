"""Fuzz rows for grade, conform, export-course, workspace, check, lesson, play scripts and
play --trace: each bad invocation exits 2 with one line on stderr (no traceback, nothing on
stdout), changes nothing in the folder it ran in or in the source tree, and ends within
TIME_LIMIT; each bad trace is one ValueError line. Numbers are fuzzed with nan, inf, 0,
negatives and huge values everywhere; names with ANSI escapes come out escaped."""

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import KVCacheManager
from pagedsim.app import cli
from pagedsim.io import trace_json
from pagedsim.io.args import ArgParser, distinct_files
from pagedsim.io.trace_json import load_snapshots, snapshots_from_dict

REPO = Path(__file__).resolve().parents[2]
TIME_LIMIT = 60  # seconds; every row takes a few


def run(args, cwd, stdin=None):
    env = {**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
    return subprocess.run(
        [sys.executable, "-m", "pagedsim.app.cli", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT,
    )


def tree(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if "__pycache__" not in p.parts and ".hypothesis" not in p.parts
    }


def trace_dict() -> dict:
    m = KVCacheManager(6, 4)
    m.add_sequence("A", 5)
    m.fork("A", "B")
    m.append_tokens("B", 1)
    return json.loads(json.dumps(trace_json.to_dict(m.trace), default=str))


@pytest.fixture(scope="module")
def here(tmp_path_factory):
    d = tmp_path_factory.mktemp("apps")
    (d / "class" / "ann").mkdir(parents=True)
    (d / "a_file").write_text("not a folder")
    (d / "full").mkdir()
    (d / "full" / "keep.txt").write_text("mine")
    (d / "script.txt").write_text("alloc A 4\n")
    (d / "latin1.txt").write_bytes(b"alloc \xe9 4\n")
    (d / "good.json").write_text(json.dumps(trace_dict()))
    (d / "target.py").write_text("def Factory(n, b):\n    raise SystemExit(0)\n")
    return d


NUMBERS = ["nan", "inf", "-inf", "0", "-5", "1e9", "x"]
ROWS = {  # name: (arguments, a word the one stderr line must contain)
    **{
        f"grade --timeout {v}": (["grade", "class", "--timeout", v], "--timeout")
        for v in NUMBERS[:5]
    },
    **{
        f"grade --workers {v}": (["grade", "class", "--workers", v], "--workers")
        for v in ("0", "-3", "1e9", "nan")
    },
    "grade of a missing folder": (["grade", "nowhere"], "not a folder"),
    "grade of a file": (["grade", "a_file"], "not a folder"),
    "grade of an unknown exercise": (["grade", "class", "--exercise", "9.9"], "9.9"),
    "grade with missing extra checks": (
        ["grade", "class", "--extra-checks", "missing.py"],
        "missing.py",
    ),
    **{
        f"conform --call-timeout {v}": (
            ["conform", "target.py:Factory", "--call-timeout", v],
            "--call-timeout",
        )
        for v in NUMBERS[:5]
    },
    **{
        f"conform --timeout {v}": (["conform", "target.py:Factory", "--timeout", v], "--timeout")
        for v in NUMBERS[:5]
    },
    "conform --examples 0": (["conform", "target.py:Factory", "--examples", "0"], "--examples"),
    "conform --steps -1": (["conform", "target.py:Factory", "--steps", "-1"], "--steps"),
    "conform without a factory name": (["conform", "target.py"], "MODULE:NAME"),
    "export-course into ''": (["export-course", ""], "empty"),
    "export-course into the source tree": (["export-course", str(REPO / "course" / "x")], "inside"),
    "export-course into a file": (["export-course", "a_file"], "is a file"),
    "export-course into a full folder": (["export-course", "full"], "not empty"),
    "workspace ''": (["workspace", ""], "empty"),
    "workspace on a file": (["workspace", "a_file"], "a file"),
    **{f"play --width {v}": (["play", "script.txt", "--width", v], "--width") for v in NUMBERS},
    **{
        f"play --num-gpu-blocks-override {v}": (
            ["play", "script.txt", "--num-gpu-blocks-override", v],
            "--num-gpu-blocks-override",
        )
        for v in ("0", "-1", "inf", "1e9")
    },
    "play --block-size nan": (["play", "script.txt", "--block-size", "nan"], "--block-size"),
    "play --sliding-window 0": (
        ["play", "script.txt", "--sliding-window", "0"],
        "--sliding-window",
    ),
    "play --trace T SCRIPT": (["play", "--trace", "good.json", "script.txt"], "give one of"),
    "play --events E SCRIPT": (["play", "--events", "good.json", "script.txt"], "give one of"),
    "play --events E --trace T": (
        ["play", "--events", "e.jsonl", "--trace", "good.json"],
        "give one of",
    ),
    "play --hybrid with no window": (["play", "script.txt", "--hybrid"], "--sliding-window"),
    "play --events of a missing file": (["play", "--events", "missing.jsonl"], "missing.jsonl"),
    "play --trace of a missing file": (["play", "--trace", "missing.json"], "missing.json"),
    "play --trace of a script": (["play", "--trace", "script.txt"], "not JSON"),
    "play of a non-UTF-8 script": (["play", "latin1.txt"], "utf-8"),
    "play of a missing script": (["play", "missing.txt"], "missing.txt"),
    "check --impl without an exercise": (["check", "--impl", "script.txt"], "exercise id"),
    "check of an unknown exercise": (["check", "bogus"], "bogus"),
    "check --timeout nan": (["check", "3.1", "--timeout", "nan"], "--timeout"),
    "lesson 9.9": (["lesson", "9.9"], "9.9"),
    # an output that is an input (or the other output) was overwritten with no word said
    "play SCRIPT --trace-out SCRIPT": (
        ["play", "script.txt", "--trace-out", "script.txt"],
        "SCRIPT",
    ),
    "play --trace T --html ./T": (
        ["play", "--trace", "good.json", "--html", "./good.json"],
        "--trace",
    ),
    "play --html P --trace-out P": (
        ["play", "script.txt", "--html", "p.html", "--trace-out", "p.html"],
        "--html",
    ),
    "view T --html T": (["view", "good.json", "--html", "good.json"], "FILE"),
    "view --zmq --html P --save P": (
        ["view", "--zmq", "tcp://127.0.0.1:9", "--html", "p.html", "--save", "p.html"],
        "--html",
    ),
    "generate --html P --trace-out P": (
        ["generate", "--html", "p.html", "--trace-out", "full/../p.html"],
        "--html",
    ),
    **{
        f"view --zmq {flag} {v}": (["view", "--zmq", "tcp://127.0.0.1:9", flag, v], flag)
        for flag in ("--duration", "--refresh")
        for v in ("nan", "inf", "0", "-1")
    },
}


def run_here(args, cwd, monkeypatch, capsys):
    """`pagedsim ARGS` in this process (the rows are refusals at parse time: no start-up cost)."""
    monkeypatch.chdir(cwd)
    start = time.monotonic()
    try:
        code = cli.main(args)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert time.monotonic() - start < TIME_LIMIT
    return code, out, err


@pytest.mark.parametrize("name", ROWS)
def test_a_bad_invocation_is_one_line_on_stderr_exit_2_and_changes_nothing(
    here, name, monkeypatch, capsys
):
    args, word = ROWS[name]
    before, source = tree(here), tree(REPO / "course")
    code, out, err = run_here(args, here, monkeypatch, capsys)
    assert code == 2, (code, out[-300:], err[-300:])
    assert "Traceback" not in err + out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and word.lower() in err.lower(), err
    assert out == "", "nothing is printed before the refusal"
    assert tree(here) == before, "the refusal wrote into the folder it ran in"
    assert tree(REPO / "course") == source, "the refusal wrote into the source tree"


def test_control_characters_in_sequence_names_are_escaped_not_echoed(here):
    got = run(
        ["play", "--width", "80"], here, stdin="alloc \x1b[31mRED\x07 4\nfree \x1b[31mRED\x07\n"
    )
    assert got.returncode == 0 and "\x1b" not in got.stdout and "\x07" not in got.stdout
    assert "\\x1b[31mRED\\x07" in got.stdout


def test_a_trace_with_a_byte_order_mark_is_read_as_the_csv_workloads_are(here):
    (here / "bom.json").write_bytes(b"\xef\xbb\xbf" + (here / "good.json").read_bytes())
    assert [s.step for s in load_snapshots(here / "bom.json")] == [
        s.step for s in load_snapshots(here / "good.json")
    ]
    got = run(["play", "--trace", "bom.json", "--width", "80"], here)
    assert got.returncode == 0 and "Traceback" not in got.stderr


def broken(change) -> dict:
    d = copy.deepcopy(trace_dict())
    change(d["snapshots"][-1])
    return d


def _set(key, value):
    return lambda s: s.__setitem__(key, value)


TRACES = {  # name: (a change to the last snapshot, a word the ValueError names)
    "free_list with a block outside the pool": (_set("free_list", [999]), "free_list"),
    "free_list with a negative block": (_set("free_list", [-1]), "free_list"),
    "free_list with a string": (_set("free_list", ["x"]), "free_list"),
    "free_list naming a block twice": (_set("free_list", [2, 2]), "twice"),
    "block_size 0": (_set("block_size", 0), "block_size"),
    "block_size nan": (_set("block_size", float("nan")), "block_size"),
    "num_gpu_blocks -3": (_set("num_gpu_blocks", -3), "num_gpu_blocks"),
    "block_fill 999": (lambda s: s["block_fill"].__setitem__(0, 999), "block_fill"),
    "ref_counts -1": (lambda s: s["ref_counts"].__setitem__(0, -1), "ref_counts"),
    "step 'one'": (_set("step", "one"), "step"),
    "step true": (_set("step", True), "step"),
    "step 1.5": (_set("step", 1.5), "step"),
    "a table naming block 999": (lambda s: s["sequences"][0].__setitem__("blocks", [999]), "table"),
    "num_tokens -1": (lambda s: s["sequences"][0].__setitem__("num_tokens", -1), "num_tokens"),
    "sequences not a list": (_set("sequences", 5), "sequences"),
    "an event that is a number": (_set("events", [5]), "event"),
    "a pending copy outside the pool": (_set("pending_copies", [[0, 99]]), "pending copy"),
}


@pytest.mark.parametrize("name", TRACES)
def test_a_malformed_trace_is_one_value_error_line(name):
    change, word = TRACES[name]
    with pytest.raises(ValueError) as refused:
        snapshots_from_dict(broken(change))
    text = str(refused.value)
    assert word in text and "\n" not in text and len(text) < 300, text


def test_a_trace_naming_an_unknown_block_is_refused_on_the_command_line(here):
    (here / "bad.json").write_text(
        json.dumps(broken(lambda s: s["sequences"][0].__setitem__("blocks", [999])))
    )
    got = run(["play", "--trace", "bad.json"], here)
    assert (
        got.returncode == 2
        and len(got.stderr.strip().splitlines()) == 1
        and "Traceback" not in got.stderr
    )
    assert "999" in got.stderr


@given(
    spelling=st.sampled_from(["a.json", "./a.json", "sub/../a.json", "link", "new.html"]),
    read=st.sampled_from(["a.json", "b.json", "sub/../b.json"]),
)
@settings(max_examples=30, deadline=None)
def test_an_output_is_refused_exactly_when_it_names_an_input_by_any_spelling(
    tmp_path_factory, spelling, read
):
    d = tmp_path_factory.mktemp("same")
    (d / "sub").mkdir()
    (d / "a.json").write_text("{}")
    (d / "b.json").write_text("{}")
    (d / "link").symlink_to(d / "a.json")
    same = (d / spelling).resolve() == (d / read).resolve()
    if same:
        with pytest.raises(SystemExit):
            distinct_files(ArgParser(prog="t"), {"FILE": d / read}, {"--html": d / spelling})
    else:
        distinct_files(ArgParser(prog="t"), {"FILE": d / read}, {"--html": d / spelling})
    with pytest.raises(SystemExit):  # two outputs in one file
        distinct_files(ArgParser(prog="t"), {}, {"--html": d / spelling, "--save": d / spelling})
