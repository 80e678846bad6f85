"""The apps built on the simulator core: the tour, the playground, captions and their languages,
trace JSON and the `pagedsim` command line.

The core (the pool, tables, manager, policies, schedulers, trace) never imports this package;
`tests/core/test_core_imports.py` checks that.
"""
