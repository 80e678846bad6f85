"""`cut_at_stop`: where a stop string ends a sample, as vLLM v1's detokenizer decides it
token by token (tests/vllm_oracle/test_sampling.py compares with vLLM's own function)."""

from hypothesis import given
from hypothesis import strategies as st

from pagedsim.engine.llm import cut_at_stop

PIECES = st.lists(st.text("ab c\n", max_size=3), max_size=12)  # a token's text: may be empty
STOPS = st.lists(st.text("ab c\n", min_size=1, max_size=3), min_size=1, max_size=3)


def one_token_at_a_time(pieces, stop, keep):
    """The plain reading: after each token, the stop strings that now occur; the one that
    ends first wins (ties: the list's order)."""
    for i in range(1, len(pieces) + 1):
        text = "".join(pieces[:i])
        found = [(text.find(s) + len(s), k) for k, s in enumerate(stop) if s in text]
        if found:
            end, k = min(found)
            return list(range(i)), text[: end if keep else end - len(stop[k])], stop[k]
    return None


@given(pieces=PIECES, stop=STOPS, keep=st.booleans())
def test_the_cut_is_the_one_a_token_by_token_check_makes(pieces, stop, keep):
    decode = lambda ids: "".join(pieces[i] for i in ids)  # noqa: E731
    tokens = list(range(len(pieces)))
    assert cut_at_stop(decode, tokens, stop, keep) == one_token_at_a_time(pieces, stop, keep)


def test_the_reason_is_the_string_that_ended_first_not_the_first_listed():
    pieces = ["ab", "cd"]  # "cd" completes both "bcd" and "c"; "c" ends first
    decode = lambda ids: "".join(pieces[i] for i in ids)  # noqa: E731
    assert cut_at_stop(decode, [0, 1], ["bcd", "c"], keep=False) == ([0, 1], "ab", "c")
    assert cut_at_stop(decode, [0, 1], ["bcd", "c"], keep=True) == ([0, 1], "abc", "c")
