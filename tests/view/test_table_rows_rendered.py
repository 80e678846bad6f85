"""A big page renders only the table rows near the window (viewer.js's row observer and
farRows): whatever the jump or scroll, every row in sight must be rendered, not skipped."""

import contextlib
import random

from pagedsim.app.play_session import Options, Refused, Session
from pagedsim.view import sources, to_html

from .conftest import long_script

# the rows whose box meets the visible part of the tables pane, and of those the ones whose
# cells the browser skips (content-visibility)
UNRENDERED_IN_SIGHT = """() => {
    const pane = document.getElementById('tables-pane').getBoundingClientRect();
    const top = Math.max(0, pane.top), bottom = Math.min(innerHeight, pane.bottom);
    const seen = [...document.querySelectorAll('#tables [data-seq]')].filter(r => {
        const q = r.getBoundingClientRect();
        return q.bottom > top && q.top < bottom && q.height > 0;
    });
    return [seen.length, seen.filter(r => { const c = r.querySelector('.cell');
        return c !== null && !c.checkVisibility({contentVisibilityAuto: true}); })
        .map(r => r.dataset.seq)];
}"""
HEIGHT = "() => Math.max(1, document.getElementById('tables-pane').scrollHeight - 600)"
SETTLE = """() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(
    () => setTimeout(r, 0))))"""


def test_every_table_row_in_sight_is_rendered_after_jumps_and_scrolls(open_page):
    session = Session(Options(2048, 16))
    for c in long_script(600, 2048, 16, seed=5):
        with contextlib.suppress(Refused):
            session.run(c)
    loaded = open_page(to_html(**sources.play(session)), viewport=(1600, 1000))
    n = loaded.page.evaluate("window.pagedsimViewer.count()")
    seed = random.randrange(1 << 30)
    rng, in_sight = random.Random(seed), 0
    for _ in range(12):  # a scroll of the tables pane, then a jump, each checked once settled
        y = rng.randrange(loaded.page.evaluate(HEIGHT))
        loaded.page.evaluate("(y) => { document.getElementById('tables-pane').scrollTop = y; }", y)
        for change in (None, rng.randrange(n)):
            if change is not None:
                loaded.page.evaluate(f"window.pagedsimViewer.go({change})")
            loaded.page.evaluate(SETTLE)
            seen, skipped = loaded.page.evaluate(UNRENDERED_IN_SIGHT)
            assert skipped == [], f"rows in sight not drawn: {skipped} (scroll {y}, seed {seed})"
            in_sight += seen
    assert in_sight > 25  # rows were in sight: the check checked something
    loaded.check_clean()
