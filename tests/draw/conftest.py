"""Shared fixtures for the drawing tests: the tour's trace, a crowded 64-block pool, and the
whole figure set rendered once per session in each style (rendered.py)."""

import random

import matplotlib
import pytest

matplotlib.use("Agg")

from pagedsim import KVCacheManager, OutOfBlocks  # noqa: E402
from pagedsim.app.tour import tour_manager  # noqa: E402
from tests.draw.rendered import Rendered, rendered  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.fixture(scope="session")
def tour_snaps():
    return tour_manager().trace.snapshots


def crowded_manager(seed: int = 1) -> KVCacheManager:
    """64 blocks x 8 tokens, ten sequences (one forked), one finished, a long random tail."""
    rng = random.Random(seed)
    m = KVCacheManager(64, 8)
    for i in range(9):
        m.add_sequence(f"s{i}", rng.randint(1, 40))
    m.fork("s1", "s9")
    m.free_sequence("s3")
    for _ in range(30):
        try:
            m.append_tokens(rng.choice(m.seq_ids()), rng.randint(1, 6))
        except OutOfBlocks:
            pass
    return m


@pytest.fixture(scope="session")
def crowded():
    return crowded_manager().trace.snapshots[-1]


@pytest.fixture(scope="session")
def plain_figures(tmp_path_factory) -> Rendered:
    """`pagedsim figures`: the committed PNGs, every saved figure's texts checked."""
    return rendered("plain", tmp_path_factory)


@pytest.fixture(scope="session")
def slide_figures(tmp_path_factory) -> Rendered:
    """`pagedsim figures --slides --format svg`, every saved figure's texts checked."""
    return rendered("slides", tmp_path_factory)


@pytest.fixture(scope="session")
def projector_figures(tmp_path_factory) -> Rendered:
    """`pagedsim figures --style projector --format svg`."""
    return rendered("projector", tmp_path_factory)
