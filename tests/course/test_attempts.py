"""Students' attempts, wrong and right: every wrong one is caught with a first message that names
its true cause, every right one (a correct solution written differently) passes.

The attempts are patches of the reference solutions in course/ch03_kv_block/mutants.toml:
MUTANTS with `says` (the words the first failure must contain) and RIGHT. Each runs in its own
process, as `pagedsim check` runs a student's file, up to its first failing check: the first
message `pagedsim check` prints.
"""

import pytest

from course import curriculum, mutation
from course.runner import run_checks

pytestmark = pytest.mark.slow  # 54 attempts, each checked in its own process
WRONG = [m for m in mutation.WRONG if m.says]


def attempt(tmp_path, m, *, stop_at_first):
    ex = curriculum.find(m.exercise)
    path = tmp_path / f"{m.exercise.replace('.', '_')}_{m.name}.py"
    path.write_text(m.apply(ex.path("solution").read_text()))
    return run_checks(ex, path, stop_at_first=stop_at_first, seconds=300)  # isolated, as students


@pytest.mark.parametrize("m", WRONG, ids=[f"{m.exercise}-{m.name}" for m in WRONG])
def test_a_wrong_attempt_is_caught_and_its_first_message_names_the_cause(tmp_path, m):
    out = attempt(tmp_path, m, stop_at_first=True)
    assert out.failures, f"{m.exercise} {m.name} passes: {m.mistake}"
    first = out.failures[0].message
    assert any(words in first for words in m.says.split(" | ")), (
        f"{m.exercise} {m.name}: first message {first!r} lacks {m.says!r}"
    )
    assert " object at 0x" not in first, first


RIGHT_IDS = [f"{m.exercise}-{m.name}" for m in mutation.RIGHT]


@pytest.mark.parametrize("m", mutation.RIGHT, ids=RIGHT_IDS)
def test_a_right_attempt_written_differently_passes(tmp_path, m):
    out = attempt(tmp_path, m, stop_at_first=False)
    assert out.ok, (m.name, [f.message for f in out.failures], out.error)
