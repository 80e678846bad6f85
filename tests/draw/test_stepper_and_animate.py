"""Time travel in the stepper, and the frame / GIF / HTML writers."""

from types import SimpleNamespace

import pytest
from PIL import Image

from pagedsim.draw.animate import to_html, write_gif, write_trace
from pagedsim.draw.render import describe_artists
from pagedsim.draw.trace_viewer import Stepper

pytestmark = pytest.mark.draw


def test_stepping_back_then_forward_gives_identical_artists(tour_snaps):
    s = Stepper(tour_snaps, start=6)
    at_six = describe_artists(s.fig)
    assert s.next() == 7
    at_seven = describe_artists(s.fig)
    assert at_seven != at_six
    assert s.prev() == 6
    assert describe_artists(s.fig) == at_six
    assert s.next() == 7
    assert describe_artists(s.fig) == at_seven


def test_stepping_back_shows_exactly_the_earlier_state_not_an_undo(tour_snaps):
    s = Stepper(tour_snaps)
    first = describe_artists(s.fig)
    assert s.go(len(tour_snaps) + 3) == len(tour_snaps) - 1  # clamps at the last step
    assert s.next() == len(tour_snaps) - 1
    s.go(0)
    assert describe_artists(s.fig) == first
    assert s.prev() == 0  # clamps at the start


def test_arrow_keys_move_the_stepper_and_other_keys_do_nothing(tour_snaps):
    s = Stepper(tour_snaps, start=3)
    s._on_key(SimpleNamespace(key="right"))
    assert s.index == 4
    s._on_key(SimpleNamespace(key="left"))
    s._on_key(SimpleNamespace(key="left"))
    assert s.index == 2
    s._on_key(SimpleNamespace(key="x"))
    assert s.index == 2
    s._on_key(SimpleNamespace(key="end"))
    assert s.index == len(tour_snaps) - 1


def test_the_stepper_has_prev_and_next_buttons_that_step(tour_snaps):
    s = Stepper(tour_snaps, start=2)
    labels = [b.label.get_text() for b in (s._prev, s._next)]
    assert "prev" in labels[0] and "next" in labels[1]
    s._next._observers.process("clicked", None)
    assert s.index == 3
    s._prev._observers.process("clicked", None)
    assert s.index == 2


def test_an_empty_trace_is_refused():
    with pytest.raises(ValueError, match="snapshots must not be empty"):
        Stepper([])


def test_write_trace_writes_one_png_per_step_and_a_gif_with_as_many_frames(tour_snaps, tmp_path):
    snaps = tour_snaps[:4]
    paths = write_trace(snaps, tmp_path)
    pngs = [p for p in paths if p.suffix == ".png"]
    gifs = [p for p in paths if p.suffix == ".gif"]
    assert len(pngs) == 4 and len(gifs) == 1
    sizes = {Image.open(p).size for p in pngs}
    assert len(sizes) == 1, "every frame of one trace has the same size"
    with Image.open(gifs[0]) as gif:
        assert gif.n_frames == 4
    assert write_trace(snaps, tmp_path / "only", gif=False) == sorted((tmp_path / "only").iterdir())


def test_frames_are_byte_identical_when_written_twice(tour_snaps, tmp_path):
    a = write_trace(tour_snaps[5:7], tmp_path / "a", gif=False)
    b = write_trace(tour_snaps[5:7], tmp_path / "b", gif=False)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


def test_the_html_player_has_one_frame_per_snapshot(tour_snaps):
    html = to_html(tour_snaps[:3])
    assert "<script" in html and html.count("frames[2]") == 1 and "frames[3]" not in html


def test_a_gif_of_nothing_is_refused(tmp_path):
    with pytest.raises(ValueError, match="snapshots must not be empty"):
        write_gif([], tmp_path / "x.gif")


def test_a_refused_gif_creates_no_folder(tmp_path):
    with pytest.raises(ValueError, match="snapshots must not be empty"):
        write_gif([], tmp_path / "new" / "x.gif")
    assert not (tmp_path / "new").exists()
