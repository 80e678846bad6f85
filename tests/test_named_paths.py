"""Every `something.py` that README.md or a module's docstrings and comments name exists.

A module that moves or goes away leaves its name behind in prose; this finds it. Where a
name is looked for:
  * in a docstring or comment of a module of `pagedsim`, `course` or `cuda_kernels`: from
    the module's own folder and each folder above it up to the repository root (so
    `policies/preemption.py` in pagedsim/engine/ is pagedsim/policies/preemption.py);
  * in README.md: from the repository root, each top-level folder, and every folder the
    same line names in backticks (`pagedsim/engine/` ... `hf.py`);
  * a bare `test_*.py` anywhere under tests/.
Files of other projects (vLLM, Hugging Face, SGLang) and paths in examples of the user's
own files are listed below by name, so each one is a decision, not a pattern.
"""

from __future__ import annotations

import ast
import io
import pathlib
import re
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("pagedsim", "course", "cuda_kernels")
TOP_FOLDERS = (*PACKAGES, "benchmarks", "scripts", "examples", "docs", "tests")
PATH = re.compile(r"(?<![\w/.*{<-])((?:[\w.-]+/)*[\w-]+\.py)\b(?![\w/])")
FOLDER = re.compile(r"`((?:[\w.-]+/)+)`")

OTHER_PROJECTS = {  # files of vLLM, transformers and SGLang that the prose cites
    "vllm/v1/core/kv_cache_utils.py",
    "vllm/worker/cache_engine.py",
    "vllm/beam_search.py",
    "vllm/distributed/kv_events.py",
    "core/sched/request_queue.py",
    "core/sched/scheduler.py",
    "vllm/v1/core/sched/output.py",
    "vllm/v1/kv_cache_interface.py",
    "kv_cache_manager.py",
    "kv_cache_coordinator.py",
    "single_type_kv_cache_manager.py",
    "gpu_model_runner.py",
    "block_pool.py",
    "modeling_llama.py",
    "modeling_qwen2.py",
    "python/sglang/srt/mem_cache/allocator.py",
    "modeling_rope_utils.py",
    "vllm/v1/core/block_pool.py",
    "vllm/v1/attention/backends/flash_attn.py",
}
USER_FILES = {  # examples of a user's or a student's own files
    "my_file.py",
    "my_engine/blocks.py",
    "my_manager.py",
    "my_attn.py",
    "ex3_4a_free_list.py",
    "./ex3_4a_free_list.py",
    "./pagedsim-work/ex3_4a_free_list.py",
    "PAGEDSIM_WORKSPACE/ex3_4a_free_list.py",
    "alice/ex3_4a_free_list.py",
    "alice/ex3_4b_copy_on_write.py",
    "bob/ex3_4a_free_list.py",
    "bob/hw3/ex3_4a_free_list.py",
}
TESTS = {p.name for p in (ROOT / "tests").rglob("test_*.py")}


def found(name: str, folders) -> bool:
    if name in OTHER_PROJECTS or name in USER_FILES:
        return True
    if "/" not in name and name.startswith("test_") and name in TESTS:
        return True
    return any((folder / name).is_file() for folder in folders)


def prose(path: pathlib.Path):
    """(line, text) of every docstring and comment of one module."""
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield node.body[0].lineno, doc
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def missing_in_modules() -> list[tuple[str, int, str]]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            folders = [d for d in path.parents if d == ROOT or ROOT in d.parents]
            for line, text in prose(path):
                for name in PATH.findall(text):
                    if not found(name, folders):
                        out.append((rel, line, name))
    return out


def missing_in_readme(text: str) -> list[tuple[int, str]]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        folders = [
            ROOT,
            *(ROOT / f for f in TOP_FOLDERS),
            *(ROOT / f for f in FOLDER.findall(line)),
        ]
        out += [(number, name) for name in PATH.findall(line) if not found(name, folders)]
    return out


def test_every_file_the_readme_names_exists():
    assert missing_in_readme((ROOT / "README.md").read_text(encoding="utf-8")) == []


def test_every_file_a_docstring_or_comment_names_exists():
    assert missing_in_modules() == []


def test_a_name_that_is_not_there_is_found_missing():
    line = "| `pagedsim/engine/` | `hf.py`, `backend.py`, `tour.py`, `pagedsim/cli.py`, test_x9.py"
    assert missing_in_readme(line) == [(1, "tour.py"), (1, "pagedsim/cli.py"), (1, "test_x9.py")]
