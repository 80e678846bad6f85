"""`pagedsim export-gradescope`: the bundle builds and grades as Gradescope would run it.

The slow test is container-like: the bundle's own setup.sh makes a fresh venv and installs
the course from the bundle (packages from the registry only), then run_autograder grades a
sample submission in Gradescope's folder layout, moved under tmp_path by the AUTOGRADER_*
variables, and writes results.json.
"""

import json
import os
import subprocess
import zipfile

import pytest

from course import curriculum, export_gradescope
from pagedsim.app import cli


def test_the_bundle_holds_the_scripts_and_the_course_without_answers(tmp_path):
    archive = export_gradescope.write_bundle(tmp_path / "bundle", ["3.1", "3.2"], timeout=60)
    names = zipfile.ZipFile(archive).namelist()
    assert {"setup.sh", "run_autograder", "pagedsim/pyproject.toml"} <= set(names)
    assert "pagedsim/course/autograder.py" in names
    assert not [n for n in names if "/solutions/" in n or n.endswith("export_gradescope.py")]
    run = (tmp_path / "bundle" / "run_autograder").read_text()
    assert "--exercise 3.1 3.2 --timeout 60" in run
    assert os.access(tmp_path / "bundle" / "setup.sh", os.X_OK)


def test_the_command_refuses_an_unknown_exercise_and_a_full_folder(tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    for argv, words in (
        (["export-gradescope", str(tmp_path / "b"), "--exercise", "9.9"], "no exercise '9.9'"),
        (["export-gradescope", str(tmp_path / "full")], "is not empty"),
    ):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


@pytest.mark.slow
def test_setup_then_run_autograder_grade_a_submission_into_results_json(tmp_path):
    bundle = tmp_path / "source"
    export_gradescope.write_bundle(bundle, ["3.1", "3.2"], timeout=120)
    root = tmp_path / "autograder"
    env = {
        **os.environ,
        "AUTOGRADER_ROOT": str(root),
        "AUTOGRADER_SOURCE": str(bundle),
    }
    env.pop("VIRTUAL_ENV", None)
    setup = subprocess.run(
        ["bash", str(bundle / "setup.sh")], env=env, capture_output=True, text=True, timeout=900
    )
    assert setup.returncode == 0, setup.stderr[-2000:]
    submission = root / "submission" / "hw3"  # students upload folders too
    submission.mkdir(parents=True)
    right = curriculum.find("3.1").path("solution").read_text()
    (submission / "ex3_1_first_fit.py").write_text("# mine\n" + right)
    stub = curriculum.find("3.2").path("stub").read_text()
    (submission / "ex3_2_block_layout.py").write_text(stub)
    run = subprocess.run(
        ["bash", str(bundle / "run_autograder")], env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((root / "results" / "results.json").read_text())
    tests = {t["name"]: t for t in results["tests"]}
    weights = curriculum.weights()
    assert set(tests) == {"exercise 3.1", "exercise 3.2"}, results
    assert tests["exercise 3.1"]["score"] == tests["exercise 3.1"]["max_score"] == weights["3.1"]
    assert tests["exercise 3.2"]["max_score"] == weights["3.2"]
    assert tests["exercise 3.2"]["score"] < weights["3.2"]
    assert tests["exercise 3.2"]["output"].startswith(("fail", "error"))
    assert results["score"] == sum(t["score"] for t in tests.values())
