"""The `pagedsim` command line and its apps: the tour, the playground, capacity.

The core never imports this package (`tests/core/test_core_imports.py`).
"""
