"""A kernel puzzle's stepped cases are its own: they begin with the hazards its stub warns about,
and the cases drawn after them come from the puzzle's seed, never from the harness's source text.

With derandomize=True alone, Hypothesis seeds a test from its function's source, and check_spec's
inner `run` is every puzzle's test function: an edit to it that changed nothing else swapped
every puzzle's 16 cases, and a 3.k3 kernel that shifts by the first logit passed the new ones.
"""

import ast
import dataclasses
import importlib
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

from course.ch03_kv_block.checks import _puzzle_checks as pc
from course.ch03_kv_block.checks import test_ex3_k1_write_kv as k1
from course.ch03_kv_block.checks import test_ex3_k2_gather_k as k2
from course.ch03_kv_block.checks import test_ex3_k3_paged_decode as k3
from course.ch03_kv_block.checks import test_ex3_k4_lse_merge as k4
from course.ch03_kv_block.checks import test_ex3_k5_copy_blocks as k5
from course.ch03_kv_block.checks import test_ex3_k6_window_drops as k6

PUZZLES = [k1, k2, k3, k4, k5, k6]


def harness(tmp_path, monkeypatch, check: str, edit: bool):
    """A fresh copy of _puzzle_checks; with `edit`, one `pass` more at the top of the `run` inside
    `check` (check_spec or check_launches): the same checks, another source text."""
    tree = ast.parse(Path(pc.__file__).read_text(encoding="utf-8"))
    outer = next(f for f in tree.body if getattr(f, "name", None) == check)
    run = next(f for f in outer.body if isinstance(f, ast.FunctionDef))
    if edit:
        run.body.insert(0, ast.Pass())
    name = f"{check}_{'edited' if edit else 'copied'}"
    path = tmp_path / f"{name}.py"
    path.write_text(ast.unparse(tree), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def solution_of(module):
    return importlib.import_module(
        "course.ch03_kv_block.solutions." + module.__name__.rsplit(".test_", 1)[1]
    )


def cases_of(check, module, *, full: bool = False) -> list:
    """The cases `check` runs the reference solution on, in order."""
    seen = []

    def build(case, *args, **kwargs):
        seen.append(case)
        return module.build(case, *args, **kwargs)

    puzzle = dataclasses.replace(module.PUZZLE, build=build)
    check(puzzle, solution_of(module), module.params(full=full))
    return seen


@pytest.mark.parametrize("module", [k3, k6], ids=["3.k3", "3.k6"])
def test_an_edit_to_check_specs_code_leaves_every_puzzles_cases_as_they_were(
    tmp_path, monkeypatch, module
):
    before = cases_of(pc.check_spec, module)
    after = cases_of(harness(tmp_path, monkeypatch, "check_spec", edit=True).check_spec, module)
    assert len(before) > len(module.PUZZLE.examples), before
    assert after == before


def test_in_ci_an_edit_to_check_launches_code_leaves_the_launched_cases_as_they_were(
    tmp_path, monkeypatch
):
    """CI's profile derandomises the launches too: from the puzzle's seed, not run's source."""
    before = settings.get_current_profile_name()
    settings.load_profile("ci")  # (tests/conftest.py) read when a harness copy is imported
    try:
        copied, edited = (harness(tmp_path, monkeypatch, "check_launches", e) for e in (0, 1))
    finally:
        settings.load_profile(before)
    assert copied.LAUNCHED.derandomize
    launched = cases_of(copied.check_launches, k6, full=True)
    assert cases_of(edited.check_launches, k6, full=True) == launched


def test_the_stepped_run_begins_with_the_puzzles_examples_in_order():
    seen = cases_of(pc.check_spec, k6)
    assert seen[: len(k6.EXAMPLES)] == list(k6.EXAMPLES)


def test_each_puzzle_draws_from_its_own_seed():
    seeds = {pc.puzzle_seed(m.PUZZLE) for m in PUZZLES}
    assert len(seeds) == len(PUZZLES)


# The hazards each stub (course/ch03_kv_block/exercises/ex3_k*.py) warns about, each a predicate
# on one case; some case of the puzzle's `examples` must show each.


def _table(module, case):
    """(the table's entries for the sequence's blocks, how many blocks it uses, the table)."""
    table = module.build(case)["block_table"]
    used = -(-case.L // case.B)
    return table[:used], used, table


def _moves_every_block(module, case) -> bool:
    table, used, _ = _table(module, case)
    return bool((table != np.arange(used)).all())


def _has_garbage(module, case) -> bool:
    _, used, table = _table(module, case)
    return len(table) > used


def _scaled_logits(case):  # [H, L]
    a = k3.build(case)
    B, L = a["k_cache"].shape[1], int(a["context_len"][0])
    pos = np.arange(L)
    k = a["k_cache"][a["block_table"][pos // B], pos % B]  # [L, H, D]
    return np.einsum("hd,lhd->hl", a["q"], k) / np.sqrt(a["q"].shape[1])


def _above(case, some) -> bool:
    """Every head's largest logit is more than 709 above the largest of `some` of its logits:
    exp overflows when shifted by those."""
    return bool((_scaled_logits(case).max(axis=1) - some.max(axis=1) > 709).all())


def _lse(case):
    a = k4.build(case)
    return a["lse1"], a["lse2"]


def _lse_gap(case):
    lse1, lse2 = _lse(case)
    return lse2 - lse1


def _mapping(case):
    return k1.build(case)["slot_mapping"]


HAZARDS = [
    (k1, "a padded token (slot -1)", lambda c: (_mapping(c) == -1).any()),
    (k1, "a real token in slot 0", lambda c: 0 in _mapping(c)[: c.T - c.padded]),
    (k1, "more cache slots than tokens", lambda c: c.spare_slots > 0),
    (k1, "T != D, both above 1", lambda c: c.T != c.D and min(c.T, c.D) > 1),
    (k2, "a last partial block", lambda c: c.L % c.B != 0 and c.L > c.B),
    (k2, "a table that moves every block", lambda c: _moves_every_block(k2, c)),
    (k2, "garbage entries past the last block", lambda c: _has_garbage(k2, c)),
    (k2, "B != D, both above 1", lambda c: c.B != c.D and min(c.B, c.D) > 1),
    (k3, "a raw exp overflows", lambda c: _scaled_logits(c).max() > 709),
    (k3, "a shift by the first logit overflows", lambda c: _above(c, _scaled_logits(c)[:, :1])),
    (
        k3,
        "a shift by the first block's maximum overflows",
        lambda c: _above(c, _scaled_logits(c)[:, : c.B]),
    ),
    (k3, "logits all below -745 (exp underflows)", lambda c: _scaled_logits(c).max() < -745),
    (k3, "a last partial block", lambda c: c.L % c.B != 0 and c.L > c.B),
    (k3, "a table that moves every block", lambda c: _moves_every_block(k3, c)),
    (k3, "garbage entries past the last block", lambda c: _has_garbage(k3, c)),
    (k3, "several heads, head_dim above 1", lambda c: c.H > 1 and c.D > 1),
    (k4, "lse2 - lse1 above 709 on a head", lambda c: (_lse_gap(c) > 709).any()),
    (k4, "lse1 - lse2 above 709 on a head", lambda c: (_lse_gap(c) < -709).any()),
    (k4, "every lse below -745 (exp underflows)", lambda c: (np.maximum(*_lse(c)) < -745).all()),
    (k4, "small gaps (both weights count)", lambda c: (abs(_lse_gap(c)) < 20).all()),
    (k4, "H != D, both above 1", lambda c: c.H != c.D and min(c.H, c.D) > 1),
    (k5, "pairs not square (P > 2)", lambda c: c.P > 2),
    (k5, "more than twice as many blocks as pairs", lambda c: c.N // 2 > c.P),
    (k5, "blocks of several slots of several numbers", lambda c: c.B > 1 and c.D > 1),
    (k6, "a window starting on a block boundary", lambda c: c.n > c.w and (c.n - c.w) % c.B == 0),
    (k6, "a window starting inside a block", lambda c: c.n - c.w > c.B and (c.n - c.w) % c.B),
    (k6, "a window longer than the sequence", lambda c: c.w > c.n),
    (k6, "entries past the sequence's blocks", lambda c: c.spare > 0),
    (k6, "blocks of several tokens", lambda c: c.B > 1),
]


@pytest.mark.parametrize(
    "module, shows",
    [(m, s) for m, _, s in HAZARDS],
    ids=[f"{m.EXERCISE}: {h}" for m, h, _ in HAZARDS],
)
def test_every_hazard_the_stub_warns_about_is_a_case_the_stepped_check_always_runs(module, shows):
    assert any(shows(case) for case in module.PUZZLE.examples), module.PUZZLE.examples
