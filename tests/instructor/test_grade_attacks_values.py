"""Values a submission returns that try to judge themselves: an int, a list or a plain object
whose `__eq__` says True to anything, ordering that says True both ways, a `__contains__` that
holds everything. The checker compares the submission's answers as data; it never asks the
submission's object whether it equals the expected value (pagedsim/testing/remote_proxy.py's
JUDGED), and an honest subclass of a data type (a named tuple, an IntEnum) still crosses as
the data it holds, so it passes as it does in-process."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course import curriculum, runner
from course.isolation import Submission

# An int and a list that say they equal anything
YES = """
class Yes(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


class YesList(list):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False
"""

LIARS = (
    YES
    + """
import collections
import enum


class Liar:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __lt__(self, other):
        return True

    __le__ = __gt__ = __ge__ = __lt__

    def __contains__(self, x):
        return True

    def __iter__(self):
        return iter([1, 2])

    def __hash__(self):
        return 5


Point = collections.namedtuple("Point", "start size")


class Colour(enum.IntEnum):
    RED = 3


def yes():
    return Yes(0)


def yes_list():
    return YesList([(0, 1)])


def liar():
    return Liar()


def honest():
    return Point(5, 8), Colour.RED, collections.defaultdict(int, a=1), collections.OrderedDict(b=2)
"""
)

# A child that sends its int and list subclasses as objects, not as the data they hold: what a
# hostile submission does once it patches its own side of the codec.
UNPLAIN = "\nimport pagedsim.testing.remote_codec as _c\n_c._PLAIN_TYPES = ()\n"


@pytest.fixture(params=["honest codec", "patched codec"])
def liars(tmp_path, request):
    path = tmp_path / "liars.py"
    path.write_text(LIARS + (UNPLAIN if request.param == "patched codec" else ""))
    with Submission(path, "3.1", scratch=tmp_path / "scratch") as sub:
        yield sub.module()


def test_a_value_whose_eq_says_true_to_anything_equals_nothing_in_the_checker(liars):
    for got in (liars.yes(), liars.yes_list(), liars.liar()):
        assert not got == 5 and got != 5 and not 5 == got and 5 != got
        assert not got == [(9, 9)] and not [(9, 9)] == got
    liar = liars.liar()
    assert liar == liar and not liar != liar  # the same object of theirs is still itself


def test_ordering_and_membership_of_a_submissions_object_are_decided_in_the_checker(liars):
    liar = liars.liar()
    for compare in (lambda: liar < 5, lambda: liar >= 5, lambda: 5 > liar):
        with pytest.raises(TypeError):
            compare()
    assert 2 in liar and 7 not in liar  # the items it yields, compared here


@pytest.fixture(scope="module")
def liar(tmp_path_factory):
    folder = tmp_path_factory.mktemp("liar")
    (folder / "liars.py").write_text(LIARS)
    with Submission(folder / "liars.py", "3.1", scratch=folder / "scratch") as sub:
        yield sub.module().liar()


DATA = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner),
    max_leaves=6,
)


@settings(max_examples=40, deadline=None)
@given(value=DATA)
def test_whatever_the_checker_compares_it_with_the_liar_equals_nothing_but_itself(liar, value):
    assert (liar == value, value == liar, liar != value, value != liar) == (False,) * 2 + (
        True,
    ) * 2
    assert (liar == liar, liar != liar) == (True, False)


def test_an_honest_subclass_of_a_data_type_crosses_as_its_data(tmp_path):
    path = tmp_path / "honest.py"
    path.write_text(LIARS)
    with Submission(path, "3.1", scratch=tmp_path / "scratch") as sub:
        point, colour, counts, ordered = sub.module().honest()
        assert (type(point), type(colour), type(counts), type(ordered)) == (tuple, int, dict, dict)
        assert point == (5, 8) and colour == 3 and counts == {"a": 1} and ordered == {"b": 2}
        assert sub.module().yes() == 0  # the int it holds, not its __eq__


CHEAT_3_1 = (
    YES
    + """

class FirstFit:
    def __init__(self, capacity):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError("capacity")
        self.capacity = capacity
        self._holes = YesList([(0, capacity)])

    @property
    def holes(self):
        return self._holes

    @holes.setter
    def holes(self, value):
        self._holes = YesList(value)

    def free_slots(self):
        return Yes(0)

    def allocate(self, size):
        if not isinstance(size, int) or size < 1:
            raise ValueError("size")
        return Yes(0)

    def free(self, start, size):
        if size < 1:
            raise ValueError("size")


def external_fragmentation(holes):
    raise NotImplementedError("external_fragmentation")
"""
    + UNPLAIN
)


def test_a_3_1_that_allocates_nothing_but_answers_equal_to_everything_passes_no_check(
    tmp_path: Path,
):
    """Before the fix, 3 of 3.1's 8 checks passed on this file: every comparison of its
    answers was decided by its own `__eq__`."""
    cheat = tmp_path / "ex3_1_first_fit.py"
    cheat.write_text(CHEAT_3_1)
    outcome = runner.run_checks(curriculum.find("3.1"), cheat, isolate=True, sandbox=False)
    assert outcome.status == "fail" and outcome.passed == 0, outcome.as_json()
