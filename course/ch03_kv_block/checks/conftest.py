"""Fixtures and section markers for a plain `pytest course/ch03_kv_block/checks` run
(against the reference solutions)."""

from course.check_fixtures import impl, kernels, pytest_configure, pytest_unconfigure  # noqa: F401
