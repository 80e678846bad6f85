"""The apps built on the simulator core: the tour, the playground, captions and their languages,
trace JSON and the `pagedsim` command line.

The core (the pool, tables, manager, policies, schedulers, trace) never imports this package;
`tests/core/test_core_imports.py` checks that. The modules that used to live at the top of
`pagedsim` keep a deprecated alias there for one release (see `MOVED`).
"""

# old module name -> where it lives now; each old name is a shim that warns once and
# hands back the new module itself (so monkeypatching either name patches both)
MOVED = {
    "pagedsim.tour": "pagedsim.app.tour",
    "pagedsim.tour_zh": "pagedsim.app.tour_zh",
    "pagedsim.play": "pagedsim.app.play",
    "pagedsim.play_session": "pagedsim.app.play_session",
    "pagedsim.lang": "pagedsim.app.lang",
    "pagedsim.describe_zh": "pagedsim.app.captions",
    "pagedsim.app.describe_zh": "pagedsim.app.captions",
    "pagedsim.trace_json": "pagedsim.app.trace_json",
    "pagedsim.cli": "pagedsim.app.cli",
    "pagedsim.interleavings": "pagedsim.labs.interleavings",
}
