"""pagedsim/testing/walk.py: a bounded walk that lists what os.walk would, follows no link,
and stops with a reason at its bounds; a read that never takes more than its limit."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim.testing import walk

NAMES = st.text(alphabet="abc", min_size=1, max_size=3)
TREES = st.recursive(
    st.sampled_from(["file", "link"]),
    lambda sub: st.dictionaries(NAMES, sub, max_size=4),
    max_leaves=25,
)


def build(folder, tree):
    for name, node in tree.items():
        if isinstance(node, dict):
            (folder / name).mkdir()
            build(folder / name, node)
        elif node == "link":
            (folder / name).symlink_to("/")
        else:
            (folder / name).write_bytes(name.encode() * 3)


def depth(tree) -> int:
    subs = [depth(n) for n in tree.values() if isinstance(n, dict)]
    return 1 + max(subs) if subs else 0


def count(tree) -> int:
    return sum(1 + (count(n) if isinstance(n, dict) else 0) for n in tree.values())


@settings(max_examples=40, deadline=None)
@given(tree=st.dictionaries(NAMES, TREES, max_size=4), max_depth=st.integers(0, 4))
def test_the_walk_lists_what_os_walk_finds_or_stops_exactly_at_its_bound(
    tmp_path_factory, tree, max_depth
):
    root = tmp_path_factory.mktemp("tree")
    build(root, tree)
    want = sorted(
        os.path.relpath(os.path.join(d, n), root)
        for d, dirs, files in os.walk(root)  # os.walk never follows links by default
        for n in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]
    )
    bounds = walk.Bounds(depth=max_depth, entries=10_000)
    if depth(tree) > max_depth:
        with pytest.raises(walk.Stopped, match=f"nested more than {max_depth} deep"):
            walk.entries(root, bounds)
        return
    got = walk.entries(root, bounds)
    assert [e.rel for e in got] == want
    assert all((e.kind == "link") == os.path.islink(root / e.rel) for e in got)
    limit = count(tree)
    if limit:
        with pytest.raises(walk.Stopped, match=f"more than {limit - 1} files"):
            walk.entries(root, walk.Bounds(depth=max_depth, entries=limit - 1))


def test_a_root_that_is_a_link_or_a_kernel_view_is_refused(tmp_path):
    (tmp_path / "up").symlink_to("/")
    with pytest.raises(walk.Stopped, match="symbolic link: not followed"):
        walk.entries(tmp_path / "up")
    with pytest.raises(walk.Stopped, match="under /proc: not entered"):
        walk.entries("/proc/1")


def test_a_read_is_refused_by_size_before_reading_and_never_through_a_link(tmp_path):
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(1 << 30)
    with pytest.raises(walk.Stopped, match="1,073,741,824 bytes, over the limit of 10"):
        walk.read(big, 10)
    (tmp_path / "small").write_bytes(b"0123456789")
    assert walk.read(tmp_path / "small", 10) == b"0123456789"
    (tmp_path / "link").symlink_to(tmp_path / "small")
    with pytest.raises(walk.Stopped, match="cannot be read"):
        walk.read(tmp_path / "link", 10)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(walk.Stopped, match="not a regular file"):
        walk.read(tmp_path / "fifo", 10)
