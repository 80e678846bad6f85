"""Labels that must not collide, checked with the text bounding boxes the renderer reports:
a long sequence id ("seq A:window") beside its token count, and a key frame's caption
inside its own panel, in the paper and the projector look; then every text of every
figure `pagedsim figures` writes, plain and `--slides`: no two overlap (line by line), none
runs off its figure, none its axes would clip runs past that axes. Exceptions are listed
in EXCEPTIONS with a reason."""

import pytest

from pagedsim.app.play_session import Options, Session
from pagedsim.draw import scenario, style
from pagedsim.draw.hybrid import hybrid_snapshots
from pagedsim.draw.render import Layout, render
from tests.draw.text_problems import text_problems

pytestmark = pytest.mark.draw

BEAM = ["alloc A 6", "alloc B 5", "fork B B2", "append B", "append B2 2", "free A", "alloc C 40"]


def boxes(fig, prefix: str) -> dict:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return {
        t.get_gid(): t.get_window_extent(renderer)
        for ax in fig.axes
        for t in ax.texts
        if (t.get_gid() or "").startswith(prefix)
    }


@pytest.mark.parametrize("look", ["paper", "projector"])
def test_a_long_sequence_id_never_runs_into_its_token_count(look):
    snaps = hybrid_snapshots()
    with style.output(look=look):
        layout = Layout.for_snapshots(snaps)
        for snap in snaps[1:]:
            fig = render(snap, layout=layout)
            style.fit_look(fig)
            labels, counts = boxes(fig, "label-"), boxes(fig, "tokens-")
            assert labels and len(labels) == len(counts) == len(snap.sequences)
            for seq in snap.sequences:
                label, count = labels[f"label-{seq.seq_id}"], counts[f"tokens-{seq.seq_id}"]
                assert label.x1 < count.x0, (look, snap.step, seq.seq_id, label, count)


@pytest.mark.parametrize("look", ["paper", "projector"])
def test_every_key_frame_caption_stays_inside_its_panel(look):
    session = Session(Options())
    for command in BEAM:
        session.run(command)
    with style.output(look=look):
        fig = scenario.strip_figure(session.timeline("en"))
        style.fit_look(fig)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            caption = next(t for t in ax.texts if t.get_gid() == "caption")
            box, panel = caption.get_window_extent(renderer), ax.get_window_extent(renderer)
            assert panel.x0 <= box.x0 and box.x1 <= panel.x1, (look, ax.get_gid(), box, panel)


# Every figure and every slide: no two visible texts overlap, none runs off its figure, and
# none that its axes clip runs past that axes (it would be cut). Checked on the finished
# figure, at the size and font sizes it is saved with, by wrapping Figure.savefig
# (text_problems.py, run by the session's rendering passes in rendered.py).
#
# mode -> {file name prefix: why its texts may touch}. None has a reason to: `--slides`
# raises every text to 18 pt, and each figure's slide layout (style.fit_slide's wrapping,
# and the makers' slide branches) keeps those texts apart and on the figure. The test fails
# when a listed file has become clean, so a list that ever grows only shrinks again.
EXCEPTIONS: dict = {"plain": {}, "slides": {}}


def test_text_problems_finds_an_overlap_and_a_text_off_the_figure():
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(4, 2))
    fig.text(0.1, 0.5, "one label")
    fig.text(0.12, 0.5, "another")
    fig.text(0.95, 0.1, "off the edge")
    fig.text(0.1, 0.9, "a long first line\nshort", va="top")
    fig.text(0.3, 0.8, "beside", va="top")  # beside the short second line: no overlap
    problems = text_problems(fig)
    plt.close(fig)
    assert any("overlaps" in p for p in problems)
    assert any("'off the edge' runs off the figure" == p for p in problems)
    assert not any("beside" in p for p in problems), problems


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "slides"])
def test_no_text_on_any_figure_or_slide_overlaps_another_or_runs_off(mode, request):
    """Read from the session's `pagedsim figures` pass in that mode (rendered.py), which ran
    text_problems on each figure as it was saved: every file but a GIF (its frames are
    checked one by one) was checked."""
    done = request.getfixturevalue({"plain": "plain_figures", "slides": "slide_figures"}[mode])
    files = {n for names in done.written.values() for n in names}
    assert len(files) >= 15
    assert {n for n in files if not n.endswith(".gif")} <= set(done.checked)
    found = done.problems
    excused = EXCEPTIONS[mode]
    assert {n: v for n, v in sorted(found.items()) if not n.startswith(tuple(excused))} == {}
    clean = [p for p in excused if not any(n.startswith(p) for n in found)]
    assert clean == [], f"now clean: take {clean} off EXCEPTIONS[{mode!r}]"
