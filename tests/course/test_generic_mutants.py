"""The generic mutation measure (course/mutation.py): its mutants are real, its exclusions are
current, and a small seeded sample of them is caught.

The full measurement (every mutant of every solution) takes minutes and is run by hand:
`python -m course.mutation --survivors`. Here: 2 mutants of each of four fast exercises.
"""

import ast

import pytest

from course import curriculum, mutation

EXERCISES = curriculum.load()


def test_the_generator_makes_all_four_kinds_and_never_touches_docstrings_or_annotations():
    ex = curriculum.find("3.5")
    source = ex.path("solution").read_text(encoding="utf-8")
    made = mutation.generate(ex.id, source)
    assert {m.kind for m, _ in made} == {"operator", "comparison", "constant", "statement"}
    original_doc = ast.get_docstring(ast.parse(source))
    for m, text in made:
        assert text != ast.unparse(ast.parse(source)), f"{m.key} changes nothing"
        assert ast.get_docstring(ast.parse(text)) == original_doc, f"{m.key} touched the docstring"
        assert "->" not in m.change or m.line, m


@pytest.mark.slow
def test_every_listed_equivalent_mutant_names_exactly_one_mutant():
    keys = [
        (ex.id, m.key)
        for ex in EXERCISES
        for m, _ in mutation.generate(ex.id, ex.path("solution").read_text(encoding="utf-8"))
    ]
    wrong = {k: keys.count(k) for k in mutation.EQUIVALENT if keys.count(k) != 1}
    assert not wrong, f"EQUIVALENT entries that name no mutant, or several at once: {wrong}"
    assert all(len(reason) > 30 for reason in mutation.EQUIVALENT.values()), (
        "each exclusion needs a reason"
    )


@pytest.mark.slow
@pytest.mark.parametrize("exercise_id", ["3.1", "3.2", "3.3", "3.5"])
def test_a_seeded_sample_of_generic_mutants_is_caught(exercise_id):
    results = mutation.measure(curriculum.find(exercise_id), sample=2, seed=1)
    missed = [r.mutant.key for r in results if r.caught_by is None and r.equivalent is None]
    assert not missed, f"generic mutants of {exercise_id} that no check catches: {missed}"
