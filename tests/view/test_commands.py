"""The page's entry points: tour/play --html, --trace-out and `pagedsim view` give the same
page, and a bad saved trace is refused in one line."""

import json

import pytest

from pagedsim.app import cli

BEAM = "alloc A 6\nalloc B 5\nfork B B2\nappend B\nappend B2 2\nfree A\nalloc C 40\n"


def page_json(path) -> dict:
    text = path.read_text(encoding="utf-8")
    return json.loads(text.split('id="trace-data">')[1].split("</script>")[0])


def test_play_html_and_view_of_its_trace_out_give_the_same_page(tmp_path, capsys):
    script = tmp_path / "beam.txt"
    script.write_text(BEAM)
    assert (
        cli.main(
            [
                "play",
                str(script),
                "--preemption-mode",
                "recompute",
                "--html",
                str(tmp_path / "a.html"),
                "--trace-out",
                str(tmp_path / "t.json"),
            ]
        )
        == 0
    )
    assert (
        cli.main(
            [
                "view",
                str(tmp_path / "t.json"),
                "--html",
                str(tmp_path / "b.html"),
                "--title",
                "pagedsim play",
            ]
        )
        == 0
    )
    a, b = page_json(tmp_path / "a.html"), page_json(tmp_path / "b.html")
    assert a == b
    assert any("pre" in s.get("x", ()) for s in a["steps"]) and "v0" in a["version"]


def test_tour_html_and_view_of_tour_json_show_the_same_steps(tmp_path, capsys):
    assert cli.main(["tour", "--html", str(tmp_path / "tour.html")]) == 0
    capsys.readouterr()
    assert cli.main(["tour", "--json"]) == 0
    (tmp_path / "tour.json").write_text(capsys.readouterr().out)
    assert cli.main(["view", str(tmp_path / "tour.json"), "--html", str(tmp_path / "v.html")]) == 0
    tour, viewed = page_json(tmp_path / "tour.html"), page_json(tmp_path / "v.html")
    assert [s["c"] for s in tour["steps"]] == [s["c"] for s in viewed["steps"]]
    assert all("w" in s for s in tour["steps"])  # the tour's why lines
    assert {k: v for k, v in tour["steps"][5].items() if k not in "cw"} == {
        k: v for k, v in viewed["steps"][5].items() if k not in "cw"
    }


@pytest.mark.parametrize(
    "view, message",
    [
        ({"marks": {"1": ["boom"]}}, "view.marks must map"),
        ({"whys": "no"}, "view.whys must be a list"),
        ({"labels": [[1]]}, "view.labels must be a list"),
        ({"title": 3}, "view.title must be text"),
    ],
)
def test_a_saved_trace_with_a_bad_view_is_refused_in_one_line(tmp_path, capsys, view, message):
    assert cli.main(["tour", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    data["view"] = view
    (tmp_path / "t.json").write_text(json.dumps(data))
    assert cli.main(["view", str(tmp_path / "t.json"), "--html", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not (tmp_path / "x.html").exists()


def test_view_reads_a_saved_trace_once(tmp_path, capsys, monkeypatch):
    """`view T.json` told a trace from a stream by reading the file, then read it again to
    parse it: one read, bounded before it starts, serves both."""
    import builtins

    assert cli.main(["tour", "--json"]) == 0
    trace = tmp_path / "tour.json"
    trace.write_text(capsys.readouterr().out)
    opened, real_open = [], builtins.open

    def counting_open(file, *args, **kwargs):
        if str(file) == str(trace):
            opened.append(args[0] if args else kwargs.get("mode", "r"))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    assert cli.main(["view", str(trace), "--html", str(tmp_path / "v.html")]) == 0
    assert opened == ["rb"]


@pytest.mark.parametrize(
    "flags", [["--sliding-window", "6"], ["--sliding-window", "6", "--hybrid"]]
)
def test_a_sliding_window_plays_trace_out_reads_back_with_its_dropped_blocks(
    tmp_path, capsys, flags
):
    """A sliding window's tables hold -1 for the blocks it dropped (NULL_BLOCK): `view` of
    its --trace-out refused them ("entry must be 0..N"), so no page could be made from it."""
    script = tmp_path / "w.txt"
    script.write_text("alloc A 10\nappend A 6\nalloc B 3\n")
    a, t, b = tmp_path / "a.html", tmp_path / "t.json", tmp_path / "b.html"
    assert cli.main(["play", str(script), *flags, "--html", str(a), "--trace-out", str(t)]) == 0
    assert cli.main(["view", str(t), "--html", str(b), "--title", "pagedsim play"]) == 0
    pa, pb = page_json(a), page_json(b)
    assert pa == pb
    assert any(-1 in step[3] for s in pa["steps"] for step in s.get("t", []) if step[3])
