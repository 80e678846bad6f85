"""Step through a trace in a matplotlib window: left/right keys or the prev/next buttons.

The only state is an index into the snapshots; step k is re-rendered from scratch, so
stepping back is time travel, not an undo. Headless too (`next()`, `prev()`, `go(k)`).

    from pagedsim.draw.trace_viewer import Stepper
    Stepper(manager.trace.snapshots).show()   # needs an interactive backend
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.widgets import Button

from . import style
from .render import Layout, render

BAR = 0.7  # layout units of extra height at the bottom for the buttons


class Stepper:
    def __init__(self, snapshots, start: int = 0):
        self.snapshots = list(snapshots)  # frozen data: never changed here
        if not self.snapshots:
            raise ValueError("snapshots must not be empty")
        self.layout = Layout.for_snapshots(self.snapshots)
        self.colours = style.seq_colours(self.snapshots)
        lay = self.layout
        h = lay.height + BAR
        self.fig = style.new_figure(lay.width * lay.unit, h * lay.unit)
        self.ax = self.fig.add_axes((0, BAR / h, 1, lay.height / h))
        w = 1.4 / lay.width  # button width as a figure fraction
        self._prev = Button(
            self.fig.add_axes((0.5 - w - 0.01, 0.12 * BAR / h, w, 0.75 * BAR / h)), "\u2190 prev"
        )
        self._next = Button(
            self.fig.add_axes((0.5 + 0.01, 0.12 * BAR / h, w, 0.75 * BAR / h)), "next \u2192"
        )
        self._prev.on_clicked(lambda _event: self.prev())
        self._next.on_clicked(lambda _event: self.next())
        self.fig.canvas.mpl_connect("key_press_event", self._on_key)
        self._where = self.fig.text(
            0.5 + w + 0.03, 0.5 * BAR / h, "", va="center", fontsize=9, color="#555555"
        )
        self.index = -1
        self.go(start)

    def go(self, k: int) -> int:
        """Show the state after step k (clamped to the trace); returns the index shown."""
        k = max(0, min(int(k), len(self.snapshots) - 1))
        if k != self.index:
            self.index = k
            render(self.snapshots[k], ax=self.ax, layout=self.layout, colours=self.colours)
            self._where.set_text(f"step {k} of {len(self.snapshots) - 1}   (keys: left / right)")
            if type(self.fig.canvas).__name__ != "FigureCanvasAgg":  # a window: repaint it
                self.fig.canvas.draw_idle()
        return k

    def next(self) -> int:
        return self.go(self.index + 1)

    def prev(self) -> int:
        return self.go(self.index - 1)

    def _on_key(self, event) -> None:
        n = len(self.snapshots)
        moves = {"right": 1, "n": 1, " ": 1, "left": -1, "p": -1, "home": -n, "end": n}
        if event.key in moves:
            self.go(self.index + moves[event.key])

    def show(self) -> None:
        plt.show()
