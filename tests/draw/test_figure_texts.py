"""What the figures say, read from their artists: subtitles that match the trace they draw."""

import pytest

from pagedsim.draw import flow
from pagedsim.trace import SequenceAdded

pytestmark = pytest.mark.draw


def test_the_3_3_subtitle_names_the_admission_order_of_the_run_it_draws():
    m = flow.scattered_manager()
    order = [e.seq_id for e in m.trace.events if isinstance(e, SequenceAdded)]
    assert order == ["X", "A", "Y", "B"]  # X and Y sit between A's and B's admissions
    text = flow.logical_subtitle(m)
    assert text.startswith("Admitted in the order X, A, Y, B (prompt tokens: X 8, A 4, Y 8, B 4)")
    assert "X and Y then finished" in text and "so A and B" in text
    assert "between A and B" not in text
