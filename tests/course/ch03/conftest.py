"""The packaged checks run here against the reference solutions (PAGEDSIM_IMPL unset)."""

from course.check_fixtures import impl, kernels  # noqa: F401
