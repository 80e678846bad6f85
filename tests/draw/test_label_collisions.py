"""Labels that must not collide, checked with the text bounding boxes the renderer reports:
a long sequence id ("seq A:window") beside its token count, and a key frame's caption
inside its own panel, in the paper and the projector look."""

import pytest

from pagedsim.app.play_session import Options, Session
from pagedsim.draw import scenario, style
from pagedsim.draw.hybrid import hybrid_snapshots
from pagedsim.draw.render import Layout, render

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
