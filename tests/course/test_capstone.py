"""The capstone on the student's own code: `pagedsim generate --pool workspace` (and lesson 3.8)
serve the shipped model with the workspace's 3.4a free list and 3.4b copy-on-write, beside
pagedsim's own pool, and name the first place they part (course/ch03_kv_block/capstone.py,
pagedsim/engine/lockstep.py).

Each run serves the chapter's mixed workload (a greedy request, n = 2 seeded samples, a beam
search of width 2, a repeat) for 8 tokens on 24 blocks of 8 tokens: forks, copy-on-write, a
new block for every sequence and one swap, in about 3 s on an idle core.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course import curriculum, mutation
from course.ch03_kv_block import capstone
from pagedsim.app.cli import main
from pagedsim.config import CacheConfig
from pagedsim.engine import generate
from pagedsim.engine.lockstep import Divergence, Pool, PoolFailed, View, blocks_difference
from pagedsim.manager import KVCacheManager

RUN = dict(
    workload=generate.Workload(max_tokens=8),
    cache=CacheConfig(block_size=8, num_gpu_blocks_override=24, enable_prefix_caching=False),
)
CLI = ["generate", "--pool", "workspace", "--max-tokens", "8", "--block-size", "8"]
CLI += ["--num-gpu-blocks-override", "24"]


@pytest.fixture(scope="module")
def model():
    return generate.load()


def workspace(folder, patch: mutation.Mutant | None = None, stub=()):
    """A workspace folder holding the 3.4a and 3.4b solutions, one patched by `patch`, or the
    stubs of the exercises in `stub`."""
    for exercise in ("3.4a", "3.4b"):
        ex = curriculum.find(exercise)
        source = ex.path("stub" if exercise in stub else "solution").read_text(encoding="utf-8")
        if patch is not None and patch.exercise == exercise:
            source = patch.apply(source)
        (folder / f"{ex.stub.rsplit('/', 1)[-1]}").write_text(source, encoding="utf-8")
    return folder


def serve(model, folder, monkeypatch) -> Divergence:
    monkeypatch.setenv("PAGEDSIM_WORKSPACE", str(folder))
    try:
        _, summary = generate.serve(
            *model, **RUN, pool=Pool(capstone.workspace_pool(), "workspace")
        )
    except PoolFailed as e:
        return e.divergence
    pool = summary["pool"]
    return Divergence("workspace", pool["blocks"], pool["token"])


def mutant(name: str) -> mutation.Mutant:
    return next(m for m in mutation.WRONG if m.name == name)


def test_the_reference_solutions_serve_every_token_and_block_of_the_reference_pool(
    model, tmp_path, monkeypatch
):
    monkeypatch.setenv("PAGEDSIM_WORKSPACE", str(workspace(tmp_path)))
    llm, summary = generate.serve(*model, **RUN, pool=Pool(capstone.workspace_pool(), "workspace"))
    engine = llm.llm_engine
    assert isinstance(engine.manager, capstone.WorkspaceManager)
    assert summary["cow_bytes"] > 0 and any(r["shared"] for r in engine.log), "forks and copies ran"
    assert summary["pool"]["matches"], summary["pool"]["lines"]
    assert summary["tokens_match"]  # and the dense engine agrees with the student's pool
    reference = generate.serve(*model, **RUN)[1]
    assert [r["outputs"] for r in summary["requests"]] == [
        r["outputs"] for r in reference["requests"]
    ]


# (mutant, words the first block difference names, words the error or the token names)
WRONG = [
    ("unlink_loses_a_block", None, "your 3.4a allocate raised PoolError: no free block"),
    ("free_ignores_the_count", "the free list (head first) differs", ""),
    ("fork_without_incref", "fork(r1.0 -> r1.1)): block", "ref count"),
    ("copy_on_write_skipped", "decode_step(r0.0, r1.0, r1.1)): seq r1.0's table maps", ""),
    ("cow_leaks_the_source", "copy-on-write", "seq r1.1's table maps"),  # r1.1 copies too
    ("free_table_skips_the_first_block", "(free_sequence(r", "ref count"),
    ("free_table_first_to_last", "(free_sequence(r", "the free list (head first) differs"),
    ("copy_pair_reversed", None, "your 3.4b slot_for_append recorded copies"),
    ("table_rebound", None, "not rebind it"),
]


@pytest.mark.parametrize("name, blocks, more", WRONG, ids=[w[0] for w in WRONG])
def test_a_wrong_pool_is_caught_with_its_first_divergence_named(
    model, tmp_path, monkeypatch, name, blocks, more
):
    found = serve(model, workspace(tmp_path, mutant(name)), monkeypatch)
    assert not found.matches
    text = "\n".join(found.lines())
    if blocks is None:  # caught by what the call left behind, before any state differs
        assert found.blocks is None and found.error and more in found.error, text
    else:
        assert found.blocks and blocks in found.blocks, text
        assert found.blocks.startswith("at step "), text
        assert more in text, text
    assert "Traceback" not in text and "object at 0x" not in text


def test_copy_on_write_skipped_names_the_first_wrong_token(model, tmp_path, monkeypatch):
    found = serve(model, workspace(tmp_path, mutant("copy_on_write_skipped")), monkeypatch)
    assert found.token and "seq r1." in found.token and "in the reference pool" in found.token


@pytest.mark.parametrize(
    "stub, says",
    [
        (("3.4a", "3.4b"), "your 3.4a free list is still the stub (_push raises"),
        (("3.4b",), "your 3.4b copy-on-write is still the stub (slot_for_append raises"),
    ],
)
def test_an_untouched_stub_says_run_the_check_first(tmp_path, monkeypatch, stub, says):
    monkeypatch.setenv("PAGEDSIM_WORKSPACE", str(workspace(tmp_path, stub=stub)))
    with pytest.raises(capstone.YourCodeFailed) as e:
        capstone.workspace_pool()
    assert says in str(e.value)
    assert f"run `pagedsim check {stub[0]}` first" in str(e.value)


def test_an_exception_in_your_code_is_one_line_naming_exercise_method_and_line(
    model, tmp_path, monkeypatch
):
    raising = mutation.Mutant(
        "3.4a", "incref_raises", "", "        self.ref[b] += 1\n", "        {}[b]\n"
    )
    found = serve(model, workspace(tmp_path, raising), monkeypatch)
    assert found.error and "your 3.4a incref raised KeyError" in found.error
    assert "line " in found.error and "of ex3_4a_free_list.py" in found.error
    assert "\n" not in found.error


def test_no_workspace_file_says_how_to_make_one(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGEDSIM_WORKSPACE", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(capstone.YourCodeFailed, match="run `pagedsim workspace`"):
        capstone.workspace_pool()


def test_the_command_reports_a_match_a_divergence_and_a_stub(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PAGEDSIM_WORKSPACE", str(workspace(tmp_path)))
    assert main(CLI) == 0
    out = capsys.readouterr().out
    assert "prefix caching off" in out
    assert "the workspace pool matches the reference pool: every block and token" in out

    workspace(tmp_path, mutant("fork_without_incref"))
    assert main(CLI) == 1
    out = capsys.readouterr().out
    assert "first block difference, at step" in out and "fork(r1.0 -> r1.1)" in out

    for name in ("fork_without_incref", "copy_pair_reversed"):  # a divergence, an error
        workspace(tmp_path, mutant(name))
        assert main([*CLI, "--json"]) == 1
        pool = json.loads(capsys.readouterr().out)["summary"]["pool"]
        assert pool["matches"] is False and (pool["blocks"] or pool["error"]) in pool["lines"][0]

    workspace(tmp_path, stub=("3.4a", "3.4b"))
    assert main(CLI) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pagedsim generate: error: your 3.4a free list is still the stub")
    assert len(err.splitlines()) == 1


def test_the_workspace_pool_refuses_prefix_caching_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PAGEDSIM_WORKSPACE", str(workspace(tmp_path)))
    with pytest.raises(SystemExit) as e:
        main([*CLI, "--enable-prefix-caching"])
    assert e.value.code == 2
    assert "drop --enable-prefix-caching" in capsys.readouterr().err


# ---- the comparison itself, on hand-made states ----------------------------------------------
def view(seqs=None, refs=(1, 1, 0, 0), free=(3, 2), num_free=None) -> View:
    seqs = {"a": ([0, 1], 12)} if seqs is None else seqs
    return View(seqs, list(refs), list(free), len(free) if num_free is None else num_free)


@pytest.mark.parametrize(
    "tested, says",
    [
        (view(), None),
        (view({"a": ([0, 2], 12)}), "seq a's table maps logical 1 -> 2 in the t pool, -> 1 in"),
        (view({"a": ([0], 12)}), "seq a's table has 1 blocks [0] in the t pool, 2 [0, 1] in"),
        (view({"a": ([0, 1], 11)}), "seq a holds 11 tokens in the t pool, 12 in"),
        (view(refs=(1, 2, 0, 0)), "block 1's ref count is 2 in the t pool, 1 in"),
        (view({}), "the t pool holds sequences [], the reference pool ['a']"),
        (view(free=(2, 3)), "differs at position 0: the t pool's is [2, 3], the reference"),
        (view(num_free=3), "the t pool counts 3 free blocks, the reference pool 2"),
    ],
)
def test_blocks_difference_names_the_first_thing_that_differs(tested, says):
    found = blocks_difference(view(), tested, "t")
    assert found == says if says is None else says in found


def test_lesson_3_8_serves_the_mix_on_your_code_or_says_what_is_missing(
    model, tmp_path, monkeypatch
):
    from course.ch03_kv_block.lessons import l3_8

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PAGEDSIM_WORKSPACE", str(tmp_path / "nothing-here"))
    lines, matched = l3_8.your_code(*model, backend="numpy", max_tokens=8)
    assert matched is None and "run `pagedsim workspace`" in lines[0]

    folder = tmp_path / "pagedsim-work"  # the default workspace, found from the current folder
    folder.mkdir()
    monkeypatch.delenv("PAGEDSIM_WORKSPACE")
    lines, matched = l3_8.your_code(*model, backend="numpy", max_tokens=8)
    assert matched is None and "no ex3_4a_free_list.py" in lines[0]

    workspace(folder)
    lines, matched = l3_8.your_code(*model, backend="numpy", max_tokens=8)
    assert matched is True and str(folder / "ex3_4a_free_list.py") in lines[0]
    assert lines[-1] == "the workspace pool matches the reference pool: every block and token"

    workspace(folder, mutant("cow_keeps_the_source"))
    lines, matched = l3_8.your_code(*model, backend="numpy", max_tokens=8)
    assert matched is False and "first block difference" in lines[1]


@st.composite
def views(draw):
    """A manager's state: tables of distinct blocks, their counts, the rest free in some order."""
    num_gpu_blocks = draw(st.integers(2, 12))
    used = draw(
        st.lists(st.integers(0, num_gpu_blocks - 1), unique=True, max_size=num_gpu_blocks - 1)
    )
    cut = draw(st.integers(0, len(used)))
    seqs = {"a": (used[:cut], 2 * cut), "b": (used[cut:], 2 * (len(used) - cut))}
    refs = [1 if b in used else 0 for b in range(num_gpu_blocks)]
    free = draw(st.permutations([b for b in range(num_gpu_blocks) if b not in used]))
    return View(seqs, refs, list(free), len(free))


@given(views(), st.data())
def test_blocks_difference_is_none_exactly_when_nothing_differs(reference, data):
    assert blocks_difference(reference, reference) is None
    field = data.draw(st.sampled_from(["table", "tokens", "ref", "free", "num_free"]))
    seqs = {s: (list(t), n) for s, (t, n) in reference.seqs.items()}
    refs, free, num_free = list(reference.ref_counts), list(reference.free_list), reference.num_free
    if field == "table":
        seqs["a"] = (seqs["a"][0] + [len(refs)], seqs["a"][1])  # one more (out-of-pool) block
    elif field == "tokens":
        seqs["b"] = (seqs["b"][0], seqs["b"][1] + 1)
    elif field == "ref":
        refs[data.draw(st.integers(0, len(refs) - 1))] += 1
    elif field == "free":
        free = free[1:] + free[:1] if len(set(free)) > 1 else free + [len(refs)]
    else:
        num_free += 1
    changed = View(seqs, refs, free, num_free)
    assert blocks_difference(reference, changed) is not None, field


# ---- the workspace manager's decode step against the reference's ------------------------------
def _solutions(folder) -> capstone.Workspace:
    workspace(folder)
    return capstone.Workspace(
        *(
            capstone.load_module(e, folder / curriculum.find(e).stub.rsplit("/", 1)[-1])
            for e in ("3.4a", "3.4b")
        )
    )


@settings(max_examples=40, deadline=None)
@given(moves=st.lists(st.tuples(st.sampled_from("afdx"), st.integers(0, 99)), max_size=40))
def test_a_decode_step_on_the_solutions_leaves_the_reference_decode_steps_state(
    tmp_path_factory, moves
):
    """SchedulerV0 decodes every running sequence in one decode_step: on the 3.4a and 3.4b
    solutions it takes the same blocks, in the same order, makes the same copies and
    returns the same slots as pagedsim's own manager, call by call (a = add a sequence,
    f = fork one, d = decode a batch, x = free one)."""
    code = _solutions(tmp_path_factory.mktemp("ws"))
    mine, ref = code.manager(12, 2), KVCacheManager(12, 2, trace=True)
    made = forks = 0
    for move, k in moves:
        live = ref.seq_ids()
        if move == "a" or not live:
            if ref.can_allocate(1 + k % 3):
                for m in (mine, ref):
                    m.add_sequence((made, 0), 1 + k % 3)
                made += 1
        elif move == "f":
            parent = live[k % len(live)]
            forks += 1
            for m in (mine, ref):
                m.fork(parent, (parent[0], forks))
        elif move == "d":
            batch = live[k % len(live) :] + live[: k % len(live)]
            if ref.blocks_for_decode(batch) <= ref.num_free_blocks:
                assert mine.decode_step(batch) == ref.decode_step(batch)
                assert mine.drain_copies() == ref.drain_copies()
        else:
            for m in (mine, ref):
                m.free_sequence(live[k % len(live)])
        assert blocks_difference(View.of(ref), View.of(mine)) is None
        assert len(mine.trace.snapshots) == len(ref.trace.snapshots)  # one call, one step
        mine.check_invariants()
