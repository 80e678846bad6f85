"""mypy is strict on all of pagedsim/ outside draw/ and view/, and switches no error code off
in the core (issue 41, "Types").

pyproject.toml's [tool.mypy] has one override that turns on every flag of `--strict`; its
`module` list is the strict scope. These tests read that file (nothing is imported or run):
    * every module under pagedsim/ outside draw/ and view/ is in the strict list;
    * no override with `disable_error_code` names a core module (pagedsim/ outside draw/,
      view/, engine/, app/), or any other module of the strict scope;
    * no file of the scope switches mypy off by itself (an inline `# mypy:` comment, or a
      `# type: ignore` without an error code).
"""

from __future__ import annotations

import fnmatch
import pathlib
import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOOSE = ("pagedsim.draw", "pagedsim.view")  # figures and pages: mypy's standard checks only
NOT_CORE = LOOSE + ("pagedsim.engine", "pagedsim.app")  # the brief's core is the rest
# what `--strict` turns on, as the per-module flags an override can set
STRICT_FLAGS = (
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
    "disallow_untyped_calls",
    "disallow_untyped_decorators",
    "disallow_any_generics",
    "disallow_subclassing_any",
    "warn_return_any",
    "no_implicit_reexport",
    "strict_equality",
    "extra_checks",
)


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def scope() -> dict[str, pathlib.Path]:
    """Dotted name -> file, for every module under pagedsim/ outside draw/ and view/."""
    modules = {}
    for path in sorted((ROOT / "pagedsim").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if not _within(name, LOOSE):
            modules[name] = path
    return modules


def mypy_config() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["mypy"]


def _patterns(override: dict) -> list[str]:
    module = override["module"]
    return [module] if isinstance(module, str) else list(module)


def named(module: str, patterns: list[str]) -> bool:
    """mypy's rule: "a.b" names a.b only, "a.b.*" names a.b and every module below it."""
    return any(
        module == p or (p.endswith(".*") and (module == p[:-2] or fnmatch.fnmatchcase(module, p)))
        for p in patterns
    )


def strict_patterns() -> list[str]:
    overrides = [
        o for o in mypy_config().get("overrides", []) if o.get("disallow_untyped_defs") is True
    ]
    assert len(overrides) == 1, "pyproject.toml should hold one strict override"
    off = [flag for flag in STRICT_FLAGS if overrides[0].get(flag) is not True]
    assert not off, f"the strict override leaves {', '.join(off)} off"
    return _patterns(overrides[0])


def test_every_module_outside_draw_and_view_is_strict() -> None:
    strict = strict_patterns()
    missing = sorted(m for m in scope() if not named(m, strict))
    assert not missing, (
        f"add these to the strict override in pyproject.toml (or fix them until mypy "
        f"passes): {', '.join(missing)}"
    )


def test_no_error_code_is_switched_off_in_the_core() -> None:
    config = mypy_config()
    assert not config.get("disable_error_code"), "[tool.mypy] switches codes off everywhere"
    modules = scope()
    for override in config.get("overrides", []):
        if not override.get("disable_error_code"):
            continue
        patterns = _patterns(override)
        core = sorted(m for m in modules if not _within(m, NOT_CORE) and named(m, patterns))
        assert not core, f"disable_error_code names core modules: {', '.join(core)}"
        strict = sorted(m for m in modules if named(m, patterns))
        assert not strict, f"disable_error_code names strict modules: {', '.join(strict)}"


INLINE_OFF = re.compile(r"#\s*mypy:|#\s*type:\s*ignore(?!\[)")


def test_no_file_in_scope_switches_mypy_off_itself() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in scope().values()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if INLINE_OFF.search(line)
    ]
    assert not found, f"an inline mypy comment or an ignore without its code: {', '.join(found)}"


def test_named_follows_mypys_module_patterns() -> None:
    assert named("pagedsim.policies", ["pagedsim.policies.*"])
    assert named("pagedsim.policies.hybrid", ["pagedsim.policies.*"])
    assert not named("pagedsim.policies_extra", ["pagedsim.policies.*"])
    assert not named("pagedsim.io.args", ["pagedsim.io"])
    assert named("pagedsim.io.args", ["pagedsim.*"])
