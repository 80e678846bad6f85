"""Shared pieces of the fuzz tests: bad arguments with the error each must raise, state
fingerprints, and managers driven into a random valid state.

A bad argument is a pair (value, error class): the call must raise exactly that kind of
error (TypeError for a wrong type, ValueError -- or its subclasses BlockError /
SequenceError -- for a wrong value), and the object must be unchanged afterwards.
"""

import numpy as np
from hypothesis import strategies as st

from pagedsim import KVCacheManager
from pagedsim.policies import SlidingWindowManager

WRONG_TYPES = st.sampled_from(
    [
        1.0,
        2.5,
        float("nan"),
        float("inf"),
        "3",
        b"3",
        None,
        True,
        False,
        [1],
        (1,),
        {1: 1},
        np.float64(2.0),
        1 + 0j,
        object(),
    ]
)


def bad_counts(high=None):
    """(value, error) for an argument that must be an int in [0, high]."""
    wrong_type = WRONG_TYPES.map(lambda v: (v, TypeError))
    negative = st.integers(max_value=-1).map(lambda v: (v, ValueError))
    out = [wrong_type, negative, st.sampled_from([np.int64(-3)]).map(lambda v: (v, ValueError))]
    if high is not None:
        out.append(
            st.integers(min_value=high + 1, max_value=high + 2**80).map(lambda v: (v, ValueError))
        )
    return st.one_of(*out)


def bad_seq_ids_arg():
    """(value, error) for decode_step's seq_ids: not an iterable of ids, or unknown ids."""
    return st.one_of(
        st.sampled_from(["ab", b"ab", 5, None, 2.0]).map(lambda v: (v, TypeError)),
        st.sampled_from([["nope"], [0, "nope"], [[1]], [{}]]).map(lambda v: (v, ValueError)),
    )


def bad_token_ids(n):
    """(value, error) for token_ids of a call that appends n tokens."""
    return st.one_of(
        st.sampled_from(["x" * n, 7, 1.5, {1}, iter([1] * n)]).map(lambda v: (v, TypeError)),
        st.just([1] * (n + 1)).map(lambda v: (v, ValueError)),
        st.sampled_from([-1, 2**63, 2**70]).map(lambda t: ([t] * n, ValueError)),
        WRONG_TYPES.filter(lambda v: not isinstance(v, (list, tuple, dict))).map(
            lambda t: ([t] * n, TypeError)
        ),
    )


@st.composite
def busy_managers(draw, window=False):
    """A manager (plain or sliding-window) after a few random valid operations."""
    num_gpu_blocks = draw(st.integers(2, 16))
    block_size = draw(st.sampled_from([1, 2, 4]))
    trace = draw(st.booleans())
    if window:
        m = SlidingWindowManager(
            num_gpu_blocks,
            block_size,
            sliding_window=draw(st.integers(1, 6)),
            sinks=draw(st.integers(0, 3)),
            trace=trace,
        )
    else:
        m = KVCacheManager(
            num_gpu_blocks,
            block_size,
            trace=trace,
            free_order=draw(st.sampled_from(["lifo", "fifo"])),
        )
    for i in range(draw(st.integers(1, 5))):
        op = draw(st.sampled_from(["add", "append", "fork", "decode", "free"]))
        seqs = m.seq_ids()
        try:
            if op == "add" or not seqs:
                m.add_sequence(i, draw(st.integers(0, 6)))
            elif op == "append":
                m.append_tokens(draw(st.sampled_from(seqs)), draw(st.integers(0, 4)))
            elif op == "fork":
                m.fork(draw(st.sampled_from(seqs)), ("f", i))
            elif op == "decode":
                m.decode_step(draw(st.lists(st.sampled_from(seqs), min_size=1, max_size=3)))
            elif len(seqs) > 1:
                m.free_sequence(draw(st.sampled_from(seqs)))
        except Exception as e:  # only a full pool may refuse a valid operation
            assert type(e).__name__ == "OutOfBlocks", e
    if not m.seq_ids():
        m.add_sequence("last", 0)
    return m


def is_clean(error: BaseException) -> bool:
    """A readable one-line message."""
    text = str(error)
    return bool(text) and "\n" not in text
