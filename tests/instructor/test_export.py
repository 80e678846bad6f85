"""`pagedsim export-course`: the student build holds the course but none of the answers."""

import subprocess
import sys

import pytest

from course import curriculum, export


@pytest.fixture(scope="module")
def student_copy(tmp_path_factory):
    dest = tmp_path_factory.mktemp("student") / "course-copy"
    export.export(dest)
    return dest


def test_the_student_copy_has_the_stubs_and_checks_but_no_solutions_or_mutant_catalogue(
    student_copy,
):
    for ex in curriculum.load():
        assert (student_copy / ex.stub).is_file(), ex.stub
        assert not (student_copy / ex.solution).exists(), ex.solution
        for check in ex.checks:
            assert (student_copy / check).is_file(), check
    assert not (student_copy / "course/ch03_kv_block/solutions").exists()
    assert not (student_copy / "course/ch03_kv_block/mutants.toml").exists()
    assert not (student_copy / "tests").exists() and (student_copy / "pyproject.toml").is_file()
    assert export.answer_leaks(student_copy) == []


def test_the_student_readme_runs_no_test_suite_the_copy_lacks(student_copy):
    readme = (student_copy / "README.md").read_text(encoding="utf-8")
    assert "repo-only" not in readme and "pytest -n" not in readme
    assert "tests/" not in readme, [line for line in readme.splitlines() if "tests/" in line]
    assert ".venv/bin/pip install -e . && .venv/bin/pagedsim tour" in readme  # command 1 stays


def test_in_the_student_copy_the_reference_cannot_be_imported(student_copy):
    code = "from course.ch03_kv_block.solutions.ex3_4a_free_list import *"
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=student_copy,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(student_copy), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 1 and "No module named 'course.ch03_kv_block.solutions'" in run.stderr


def test_a_copied_solution_is_found_as_a_leak(student_copy, tmp_path):
    leaked = student_copy / "course/leaked.py"
    leaked.write_bytes(curriculum.find("3.4a").path("solution").read_bytes())
    try:
        assert export.answer_leaks(student_copy) == ["course/leaked.py"]
    finally:
        leaked.unlink()


def test_exporting_into_a_folder_that_is_not_empty_is_refused(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit):
        export.main([str(tmp_path)])
    assert "is not empty" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_an_export_from_an_installed_wheel_gets_a_pyproject_from_the_package_metadata(
    tmp_path, monkeypatch
):
    """A wheel carries no pyproject.toml: the copy gets one, so `pip install .` works in it."""
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    from types import SimpleNamespace

    ep = lambda group, name, value: SimpleNamespace(group=group, name=name, value=value)  # noqa: E731
    dist = SimpleNamespace(
        version="0.1.0",
        metadata={"Name": "pagedsim", "Requires-Python": ">=3.10"},
        requires=["numpy>=2.0", "pytest>=9.0", 'nvidia-cuda-nvcc>=13.5; extra == "ptx"'],
        entry_points=[
            ep("console_scripts", "pagedsim", "pagedsim.app.cli:main"),
            ep("pytest11", "pagedsim.testing.plugin", "pagedsim.testing.plugin"),
        ],
    )
    project = tomllib.loads(export.installed_pyproject(dist))
    assert project["project"]["name"] == "pagedsim" and project["project"]["version"] == "0.1.0"
    assert project["project"]["dependencies"] == ["numpy>=2.0", "pytest>=9.0"]  # no extras
    assert project["project"]["scripts"] == {"pagedsim": "pagedsim.app.cli:main"}
    assert project["project"]["entry-points"]["pytest11"] == {
        "pagedsim.testing.plugin": "pagedsim.testing.plugin"
    }
    # no git, no pyproject.toml: what an installed copy looks like
    root = tmp_path / "site-packages"
    (root / "pagedsim").mkdir(parents=True)
    (root / "pagedsim" / "__init__.py").write_text("")
    monkeypatch.setattr(export, "installed_pyproject", lambda: "# written\n")
    written = export.export(tmp_path / "copy", root=root)
    assert written == ["pagedsim/__init__.py", "pyproject.toml"]
    assert (tmp_path / "copy" / "pyproject.toml").read_text() == "# written\n"
