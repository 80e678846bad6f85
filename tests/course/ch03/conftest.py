"""The packaged checks run here against the reference solutions (PAGEDSIM_IMPL unset); the
section markers are registered from the curriculum."""

from course.check_fixtures import impl, kernels, pytest_configure, pytest_unconfigure  # noqa: F401
