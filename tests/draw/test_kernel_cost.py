"""Figure 3.5b, the kernel's side of the block size: sector counts worked by hand, and a figure
that says it is a model."""

import pytest

from pagedsim.draw import kernel_cost, style

pytestmark = pytest.mark.draw


def test_sector_counts_for_two_short_sequences_worked_by_hand():
    cost = kernel_cost.kernel_cost([1, 17], block_sizes=(16, 1))
    # a token of one head: 128 dims x 2 B = 256 B = 8 sectors; K and V
    # contiguous: 2 x (8 + 17 x 8) = 288 sectors
    # B = 16: tiles of 16 x 256 B = 128 sectors; 1 + 2 blocks -> 2 x 3 x 128 = 768 sectors;
    # table: 1 and 2 int32 entries fit one sector each -> 2; lookups 1 and 2 -> mean 1.5
    assert cost[16] == {
        "contiguous": 288,
        "kv": 768,
        "table": 2,
        "lookups": 1.5,
        "bytes_per_lookup": 2 * 16 * 256,
    }
    # B = 1: no empty slots (kv == contiguous); 1 and 17 entries: 4 B and 68 B -> 1 + 3 sectors
    assert cost[1] == {
        "contiguous": 288,
        "kv": 288,
        "table": 4,
        "lookups": 9.0,
        "bytes_per_lookup": 512,
    }


def test_the_figure_says_it_is_a_model_and_labels_every_bar(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(style, "save", lambda fig, path, **kw: saved.append(fig))
    kernel_cost.make(tmp_path)
    (fig,) = saved
    title = fig._suptitle.get_text()
    assert "a model" in title and "not a measurement" in title
    left, right = fig.axes
    extra = [t.get_text() for t in left.texts if t.get_gid() == "extra"]
    assert len(extra) == 9 and all(t.startswith("+") and t.endswith("%") for t in extra)
    assert float(extra[-1][1:-1]) > 20 > float(extra[4][1:-1])  # B = 256 vs 16
    lookups = right.get_lines()[0].get_ydata()
    assert list(lookups) == sorted(lookups, reverse=True)  # fewer lookups as B grows
    caveat = next(t.get_text() for t in fig.texts if t.get_gid() == "caveat")
    assert "latency" in caveat and "GPU run" in caveat
