"""Bad input to the page's commands is one line on stderr and no page; a page's size is
bounded by what it was made from (no amplification).

Each case below once gave a page that broke in the browser (a page error, a blank page),
a page that froze it (a million host tiles from an 11 kB trace), a traceback-like message,
or a page thousands of times its stream."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedsim import kv_events as ke
from pagedsim.app import cli
from pagedsim.app.tour import tour_manager
from pagedsim.io import trace_json
from pagedsim.io.trace_json import to_dict
from pagedsim.view import page_html, to_html
from pagedsim.view import stream as stream_page
from pagedsim.view.sources import saved

VIEWER = len(page_html(stream_page.page_data([])).encode())  # the page around no data


def tour_json() -> dict:
    return to_dict(tour_manager().trace)


def status(argv: list[str]) -> int:
    """`pagedsim *argv`'s exit status (a usage error exits through SystemExit)."""
    try:
        return cli.main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def refused(tmp_path, capsys, argv: list[str], message: str) -> None:
    """`pagedsim *argv` fails with one line naming `message`, and writes no page."""
    page = tmp_path / "x.html"
    assert status([*argv, "--html", str(page)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not page.exists()


def with_view(**view) -> dict:
    data = tour_json()
    data["view"] = view
    return data


def with_snapshot(k: int, **fields) -> dict:
    data = tour_json()
    data["snapshots"][k].update(fields)
    return data


def with_event(k: int, j: int, **fields) -> dict:
    data = tour_json()
    data["snapshots"][k]["events"][j].update(fields)
    return data


@pytest.mark.parametrize(
    "text, message",
    [
        # the page looked up STEPS[-1].n for a preemption at -1: a page error, no timeline
        (json.dumps(with_view(story={"timeline": [["A", 0, [-1], -1]]})), "story.timeline"),
        # a timeline row is a request: named once, by text, its steps within the trace (one
        # that came and went within a step is in no snapshot, so any name is a row)
        (json.dumps(with_view(story={"timeline": [["A", 0, [], -1]] * 2})), "story.timeline"),
        (json.dumps(with_view(story={"timeline": [[{"A": 1}, 0, [], -1]]})), "view.story"),
        (json.dumps(with_view(story={"timeline": [["X", -1, [], -1]]})), "story.timeline"),
        (json.dumps(with_view(story={"timeline": [["X", 10**6, [], -1]]})), "view.story"),
        (json.dumps(with_view(story={"timeline": [["X", 0, [], 10**6]]})), "view.story"),
        # a host count is a tile each: 11 kB of trace made a million elements (46 s to load)
        (json.dumps(with_view(story={"host": [[["A", 1_000_000]]]})), "story.host"),
        (json.dumps(with_view(story={"host": [[["nobody", 1]]]})), "story.host"),
        (json.dumps(with_view(story={"host": [[["A", 1], ["A", 1]]]})), "story.host"),
        # the kernel's view's model shape: five whole numbers, heads a multiple of kv_heads
        (json.dumps(with_view(story={"shape": [1, 64, 2, 1]})), "view.story.shape"),
        (json.dumps(with_view(story={"shape": [True, 64, 2, 1, 1]})), "view.story.shape"),
        (json.dumps(with_view(story={"shape": [2, 64, 2, 3, 1]})), "view.story.shape"),
        (json.dumps(with_view(story={"shape": [1, 1 << 40, 2, 1, 1]})), "view.story.shape"),
        # json's parser recursed out: "maximum recursion depth exceeded ..." naming no file
        ('{"snapshots":' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        # a number past 2**53 - 1 would be shown rounded by JSON.parse
        (json.dumps(with_snapshot(1, step=1 << 53)), "step must be"),
        (json.dumps(with_snapshot(1, ref_counts=[1 << 53] * 12)), "ref_counts entry must be"),
        (json.dumps(tour_json()).replace('"A"', "1").replace('"B"', '"1"'), "share a name"),
        # an event's fields were used untyped: "can only concatenate str (not "int") to str"
        (json.dumps(with_event(1, 0, seq_id={"a": 1})), "must be a sequence id"),
        (json.dumps(with_event(1, 0, num_tokens=None)), "num_tokens must be a whole number"),
        (json.dumps(with_event(6, 0, first_position=[1])), "must be a whole number"),
        (json.dumps({"snapshots": 1.5}), "not a pagedsim trace"),
        # NaN / Infinity are not JSON: refused before any field is looked at
        (json.dumps(tour_json()).replace('"step": 1,', '"step": NaN,', 1), "not JSON"),
        (json.dumps(tour_json()).replace('"step": 1,', '"step": -Infinity,', 1), "not JSON"),
    ],
)
def test_a_bad_saved_trace_is_one_line_and_no_page(tmp_path, capsys, text, message):
    (tmp_path / "t.json").write_text(text, encoding="utf-8")
    refused(tmp_path, capsys, ["view", str(tmp_path / "t.json")], message)


def test_a_trace_over_the_bound_is_refused_unread(tmp_path, capsys, monkeypatch):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tour_json()), encoding="utf-8")
    monkeypatch.setattr(trace_json, "MAX_BYTES", path.stat().st_size - 1)
    refused(tmp_path, capsys, ["view", str(path)], "larger than")
    refused(tmp_path, capsys, ["play", "--trace", str(path)], "larger than")
    monkeypatch.setattr(trace_json, "MAX_BYTES", path.stat().st_size)
    assert cli.main(["view", str(path), "--html", str(tmp_path / "ok.html")]) == 0
    capsys.readouterr()
    stream = tmp_path / "s.jsonl"  # a vLLM stream: the same bound, read by kv_stream
    stream.write_text(json.dumps({"events": [stored(1)]}) + "\n", encoding="utf-8")
    monkeypatch.setattr(trace_json, "MAX_BYTES", stream.stat().st_size - 1)
    refused(tmp_path, capsys, ["view", str(stream)], "larger than")
    refused(tmp_path, capsys, ["play", "--events", str(stream)], "larger than")


def test_play_trace_html_writes_the_page(tmp_path, capsys):
    """`play --trace T --html P` once failed: write_html() got an unexpected keyword 'title'."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tour_json()), encoding="utf-8")
    assert cli.main(["play", "--trace", str(path), "--html", str(tmp_path / "p.html")]) == 0
    assert "pagedsim play --trace t.json" in (tmp_path / "p.html").read_text(encoding="utf-8")


def places(value, at=()):
    """Every place in a JSON value, as a path of keys and indexes."""
    yield at
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, inner in items:
        yield from places(inner, (*at, key))


TOUR = tour_json()
PLACES = [p for p in places(TOUR) if p[:1] == ("snapshots",)]
ODD = [None, True, -1, 0, 1, 1 << 53, 1.5, "x", "<!--", "\ud800", [], [1], [[1]], {}, {"a": 1}]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PLACES), st.sampled_from(ODD)), min_size=1, max_size=3))
def test_any_change_to_a_saved_trace_gives_a_page_or_one_value_error(changes):
    """A field of the wrong type anywhere in a saved trace is a ValueError naming it (the
    CLI prints it as one line), never a TypeError from deep inside a caption."""
    data = json.loads(json.dumps(TOUR))
    for path, value in changes:
        inner = data
        try:  # an earlier change may have replaced what the path goes through
            for key in path[:-1]:
                inner = inner[key]
            if isinstance(inner, dict) or (isinstance(inner, list) and path[-1] < len(inner)):
                inner[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    try:
        to_html(**saved(data))
    except ValueError:
        pass


@pytest.mark.parametrize(
    "script, message",
    [
        (b"alloc \xff\xfe 4\n", "not UTF-8 text (byte 6)"),  # was the codec's own message
        (b"# padding\n" * 200_000, "larger than"),  # 2 MB: read whole before
    ],
)
def test_a_bad_play_script_is_one_line_and_no_page(tmp_path, capsys, script, message):
    (tmp_path / "s.play").write_bytes(script)
    refused(tmp_path, capsys, ["play", str(tmp_path / "s.play")], message)


def stored(n: int, **fields) -> dict:
    """A BlockStored of n one-token blocks, as a vLLM stream's JSON carries it."""
    return {
        "type": "BlockStored",
        "block_hashes": list(range(1, n + 1)),
        "parent_block_hash": None,
        "token_ids": [0] * n,
        "block_size": 1,
        "lora_id": None,
        "medium": None,
        **fields,
    }


@pytest.mark.parametrize("ts", ["Infinity", "-Infinity", "1e999"])
def test_a_stream_whose_ts_is_infinite_is_one_line_and_no_page(tmp_path, capsys, ts):
    """An infinite ts went into the page's JSON as `Infinity`: JSON.parse refused it, and the
    page was blank."""
    line = json.dumps({"ts": 0.0, "events": [stored(1)]}).replace("0.0", ts, 1)
    (tmp_path / "s.jsonl").write_text(line + "\n", encoding="utf-8")
    refused(tmp_path, capsys, ["view", str(tmp_path / "s.jsonl")], "ts must be a finite number")


def test_a_page_never_holds_nan_or_infinity():
    batch = ke.Batch([ke.BlockStored([1], None, [0], 1)], ts=float("inf"))  # not decoded
    with pytest.raises(ValueError, match="NaN or Infinity"):
        page_html(stream_page.page_data([batch]))


# a stream page: each stored block is a record (~60 bytes) and its tile's changes; the
# stream gives at least its hash and one token id: at most STREAM_FACTOR times the stream
STREAM_FACTOR = 24


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    blocks=st.integers(1, 3000),
    name=st.text(min_size=0, max_size=3000),
    medium=st.text(min_size=1, max_size=64),
    clear=st.booleans(),
)
def test_a_stream_page_is_at_most_a_constant_times_its_stream(blocks, name, medium, clear):
    """An event's lora_name was written once a block: 22 kB of stream made a 61 MB page."""
    lines = [json.dumps({"events": [stored(blocks, lora_name=name, medium=medium)]})]
    if clear:
        lines.append(json.dumps({"events": [{"type": "AllBlocksCleared"}]}))
    text = "\n".join(lines) + "\n"
    page = page_html(stream_page.page_data(ke.read_batches(text.splitlines())))
    assert len(page.encode()) <= STREAM_FACTOR * len(text.encode()) + VIEWER


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["<", "&", '"', "\u2028", "\x00", "a"]), st.integers(1, 200_000))
def test_a_trace_page_is_at_most_six_times_its_trace(char, length):
    """Each text is stored once and escaping at most multiplies it by 6; the title was
    stored twice (in <title> too: "<" became 10 bytes)."""
    data = tour_json()
    text = char * length
    data["view"] = {"title": text, "version": text, "whys": [text] * len(data["snapshots"])}
    for snap in data["snapshots"]:
        snap["custom_caption"] = text
    trace = json.dumps(data, ensure_ascii=False)
    page = to_html(**saved(json.loads(trace)))
    assert len(page.encode()) <= 6 * len(trace.encode()) + VIEWER
