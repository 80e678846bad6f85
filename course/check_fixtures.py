"""The fixtures every exercise check (and an instructor's extra check) may ask for.

    impl      the implementation under test, imported once per module: the reference
              solution in a plain pytest run, the student's file under `pagedsim check`
    kernels   the `cuda_kernels` package (a GPU or Numba's CUDA simulator), or a skip

`pagedsim check` registers this module as a pytest plugin, so files passed with
`--extra-checks` get both fixtures without a conftest of their own.
"""

import os

import pytest

from course.impl import load_impl


@pytest.fixture(scope="module")
def impl(request):
    exercise = getattr(request.module, "EXERCISE", None) or os.environ.get("PAGEDSIM_EXERCISE")
    if exercise is None:
        pytest.fail("this check file names no EXERCISE and PAGEDSIM_EXERCISE is unset")
    return load_impl(exercise)


@pytest.fixture
def kernels():
    """The `cuda_kernels` package (a GPU or Numba's CUDA simulator), or skip with the reason."""
    try:
        import cuda_kernels
    except ImportError as e:  # built by another part of the project
        pytest.skip(f"cuda_kernels is not available ({e}); the NumPy parts are still checked")
    return cuda_kernels
