"""The wire format between the grader and the submission (pagedsim/testing/remote_codec.py):
every value of its table survives the trip, and whatever bytes arrive, the grader's decoder
returns a value of the table or a clean RemoteError, and calls nothing on the way."""

import math
import pathlib
import socket
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pagedsim.testing import remote
from pagedsim.testing.remote_codec import (
    _TAGS,
    DTYPES,
    dtype_of,
    dump_message,
    load_message,
)
from pagedsim.testing.remote_proxy import Remote, RemoteModule

_EVENTS: list[str] = []
_WATCHING = [False]
CALLS = {
    "exec",
    "compile",
    "import",
    "pickle.find_class",
    "os.system",
    "subprocess.Popen",
    "open",
    "ctypes.dlopen",
    "os.exec",
    "os.posix_spawn",
    "marshal.loads",
}


def _audit(event, args):
    if _WATCHING[0] and event in CALLS:
        _EVENTS.append(event)


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def channel():
    ours, theirs = socket.socketpair()
    yield remote.Channel(ours, trusting=False)
    ours.close()
    theirs.close()


def decode_watched(ch, data: bytes):
    """Decode a message's bytes; what it returns, and every audited call made on the way."""
    _EVENTS.clear()
    _WATCHING[0] = True
    try:
        return ch.decode(load_message(data))
    finally:
        _WATCHING[0] = False


def in_schema(v, depth=0) -> bool:
    """Whether `v` is a value of the table (a handle is a proxy, never a callable of ours)."""
    if depth > 300:
        return False
    if (
        v is None
        or v is Ellipsis
        or type(v)
        in (
            bool,
            int,
            float,
            str,
            bytes,
            bytearray,
            complex,
            range,
            pathlib.PosixPath,
            pathlib.PurePosixPath,
        )
    ):
        return True
    if type(v) in (list, tuple, set, frozenset):
        return all(in_schema(x, depth + 1) for x in v)
    if type(v) is dict:
        return all(in_schema(k, depth + 1) and in_schema(x, depth + 1) for k, x in v.items())
    if type(v) is slice:
        return all(in_schema(x, depth + 1) for x in (v.start, v.stop, v.step))
    if type(v) is np.ndarray or isinstance(v, (np.generic, np.dtype)):
        dt = v if isinstance(v, np.dtype) else v.dtype
        return dt.kind in "biufcUS"
    if isinstance(v, (Remote, RemoteModule)):
        return True
    if isinstance(v, type):
        return issubclass(v, BaseException)
    return isinstance(v, BaseException)


def same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or math.isnan(a) and math.isnan(b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, slice):
        return all(
            same(x, y)
            for x, y in zip((a.start, a.stop, a.step), (b.start, b.stop, b.step), strict=True)
        )
    if isinstance(a, (set, frozenset)):
        return len(a) == len(b) and all(any(same(x, y) for y in b) for x in a)
    return a == b


keys = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.tuples(st.integers(), st.text(max_size=4)),
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(),
    st.binary(),
    st.binary().map(bytearray),
    st.complex_numbers(allow_nan=False),
    st.builds(range, st.integers(-9, 9), st.integers(-9, 9), st.integers(1, 3)),
    st.just(Ellipsis),
    st.text(max_size=20).map(pathlib.PurePosixPath),
    st.sampled_from(sorted(DTYPES)).flatmap(
        lambda d: hnp.arrays(np.dtype(d), hnp.array_shapes(min_dims=0, max_dims=3, max_side=3))
    ),
    st.sampled_from(sorted(DTYPES)).flatmap(
        lambda d: hnp.arrays(np.dtype(d), ()).map(lambda a: a[()])
    ),
    st.sampled_from(sorted(DTYPES)).map(np.dtype),
    st.sets(keys, max_size=4),
    st.frozensets(st.integers(), max_size=4),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(keys, inner, max_size=4),
        st.builds(slice, inner, inner, inner),
    ),
    max_leaves=20,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_every_value_of_the_table_crosses_unchanged_and_nothing_is_called(channel, value):
    data = dump_message(channel.encode(value))
    back = decode_watched(channel, data)
    assert _EVENTS == []
    assert same(back, value), (value, back)
    assert in_schema(back)


def _check_refusal_or_schema(channel, data: bytes):
    try:
        back = decode_watched(channel, data)
    except remote.RemoteError:
        assert _EVENTS == []
        return
    assert _EVENTS == []
    assert in_schema(back), back


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_a_schema_value_or_a_clean_refusal(channel, data):
    _check_refusal_or_schema(channel, data)


json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(sorted(_TAGS)),
    st.sampled_from(sorted(DTYPES)),
    st.just("AAAA"),
    st.sampled_from(["object", "function", "module"]),
)
trees = st.recursive(
    json_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.tuples(st.sampled_from(sorted(_TAGS)), st.lists(inner, max_size=4)).map(
            lambda t: [t[0], *t[1]]
        ),
    ),
    max_leaves=30,
)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
def test_arbitrary_tagged_trees_are_a_schema_value_or_a_clean_refusal(channel, tree):
    _check_refusal_or_schema(channel, dump_message(tree))


@pytest.mark.parametrize(
    "node, why",
    [
        (["a", "|O", [1], "AAAAAAAAAAA="], "dtype"),
        (["a", "<f8", [2], "AAAAAAAAAAA="], "do not match"),
        (["n", "<M8[s]", "AAAAAAAAAAA="], "dtype"),
        (["kx", "os.system"], "known list"),
        (["y", 12345], "never handed over"),
        (["g", 0], "not passed"),
        (["x", ["kx", "ValueError"], [], "t", [], [], None, [], 7], "malformed exception"),
        (["d", [[["l", []], 1]]], "dict key"),
        (["zz"], "unknown tag"),
        (["rec", "Popen", []], "outside the trace"),
        (["rec", "Snapshot", [["__class__", 1]]], "unknown or repeated"),
        (["rec", "Snapshot", [["step", 1]]], "malformed message"),
        ({"a": 1}, "JSON object"),
    ],
)
def test_what_is_outside_the_table_is_refused_with_its_reason(channel, node, why):
    with pytest.raises(remote.RemoteError, match=why):
        channel.decode(load_message(dump_message(node)))


def test_a_dtype_outside_the_fixed_list_is_refused_by_name():
    assert dtype_of("<f4") == np.float32
    for name in ("O", "|O", "V8", "<M8[s]", "f8, i4", "numpy.dtypes.Float64DType"):
        with pytest.raises(remote.RemoteError):
            dtype_of(name)


def test_an_exception_crosses_with_its_known_class_and_a_students_class_with_its_base(channel):
    class PoolError(KeyError):
        pass

    err = PoolError("block 3")
    err.block = 3
    back = channel.decode(load_message(dump_message(channel.encode(err))))
    assert type(back).__name__ == "PoolError" and isinstance(back, KeyError)
    assert back.args == ("block 3",) and back.block == 3
    again = channel.decode(load_message(dump_message(channel.encode(PoolError("x")))))
    assert type(again) is type(back)  # one stand-in class per class of the other side
    known = channel.decode(load_message(dump_message(channel.encode(ZeroDivisionError("z")))))
    assert type(known) is ZeroDivisionError


def test_an_exit_from_the_submission_is_never_obeyed(channel):
    node = ["x", ["kx", "SystemExit"], [0], "0", [], [], None, [], ""]
    back = channel.decode(load_message(dump_message(node)))
    assert isinstance(back, remote.RemoteError) and "SystemExit" in str(back)
    # nor can an attribute turn an exception into one
    node = [
        "x",
        ["kx", "ValueError"],
        [],
        "v",
        [],
        [["__class__", ["kx", "KeyboardInterrupt"]]],
        None,
        [],
        "",
    ]
    assert type(channel.decode(load_message(dump_message(node)))) is ValueError


def test_a_trace_crosses_by_value_so_the_other_side_can_tell_its_story(channel):
    """A snapshot and its events are plain records: the code under test captions them with its
    own story.caption (exercise 3.6), which a handle could not do."""
    from pagedsim import KVCacheManager, story

    m = KVCacheManager(6, 2)
    m.add_sequence("A", 3)
    m.fork("A", "B")
    m.append_tokens("B", 1)
    snaps = m.trace.snapshots
    back = channel.decode(load_message(dump_message(channel.encode(snaps))))
    assert back == snaps and [type(s) for s in back] == [type(s) for s in snaps]
    assert [story.caption(s) for s in back] == [story.caption(s) for s in snaps]
