"""The simulator core stays the model: importing it never pulls in matplotlib or numba,
nor any of the apps built on it (`pagedsim.app`, `draw`, `labs`, `engine`, `testing`)."""

import pkgutil
import subprocess
import sys

import pagedsim

# consumers of the core: the apps, both renderers (matplotlib and the browser page), the labs,
# the engine and the testing kit
APPS = (
    "pagedsim.app",
    "pagedsim.draw",
    "pagedsim.view",
    "pagedsim.labs",
    "pagedsim.engine",
    "pagedsim.testing",
)


def core_modules():
    names = ["pagedsim"]
    for info in pkgutil.walk_packages(pagedsim.__path__, "pagedsim."):
        if info.name == "pagedsim.__main__":
            continue
        if not info.name.startswith(APPS):
            names.append(info.name)
    return names


def imported_after(modules):
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_the_core_is_exactly_the_model():
    modules = core_modules()
    assert "pagedsim.manager" in modules and "pagedsim.policies.prefix_cache" in modules
    assert not any(name.startswith(APPS) for name in modules)


def test_the_core_never_imports_matplotlib_numba_or_an_app():
    loaded = imported_after(core_modules())
    heavy = [m for m in loaded if m.split(".")[0] in ("matplotlib", "numba")]
    apps = [m for m in loaded if m.startswith(APPS)]
    assert heavy == [], f"core imported heavy modules: {heavy}"
    assert apps == [], f"core imported app modules: {apps}"


def test_the_tour_itself_stays_light():
    loaded = imported_after(["pagedsim.app.tour", "pagedsim.app.play"])
    assert not [m for m in loaded if m.split(".")[0] in ("matplotlib", "numba")]
