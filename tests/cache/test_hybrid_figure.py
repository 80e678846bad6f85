"""The hybrid allocator's figure, tested by its artists (Agg backend)."""

import pytest

pytestmark = pytest.mark.draw


def test_the_hybrid_figure_shows_both_groups_tables_of_every_request_over_one_pool(tmp_path):
    import matplotlib.pyplot as plt

    from pagedsim.draw import hybrid, scenario

    snaps = hybrid.hybrid_snapshots()
    names = [[s.seq_id for s in snap.sequences] for snap in snaps]
    assert names[3] == ["A:full", "A:window", "B:full", "B:window"]
    assert -1 in snaps[2].sequence("A:window").blocks  # the window group dropped blocks
    assert -1 not in snaps[2].sequence("A:full").blocks
    fig = scenario.strip_figure(snaps, picks=range(len(snaps)))
    texts = {t.get_text() for ax in fig.axes for t in ax.texts}
    assert {"seq A:full", "seq A:window", "seq B:window"} <= texts
    assert len(fig.axes) == len(snaps) == 5
    plt.close("all")
    path = hybrid.make_hybrid(tmp_path)[0]
    assert path.exists() and path.stat().st_size > 10_000
