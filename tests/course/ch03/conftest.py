"""Checks for chapter 3's exercises. Each check module names its exercise in `EXERCISE`.

The `impl` fixture loads the implementation under test: the reference solution in a
plain `pytest` run, or whatever file `pagedsim check` points PAGEDSIM_IMPL at.
"""

import pytest

from course.impl import load_impl


@pytest.fixture(scope="module")
def impl(request):
    return load_impl(request.module.EXERCISE)


@pytest.fixture
def kernels():
    """The `cuda_kernels` package (a GPU or Numba's CUDA simulator), or skip with the reason."""
    try:
        import cuda_kernels
    except ImportError as e:  # built by another part of the project
        pytest.skip(f"cuda_kernels is not available ({e}); the NumPy parts are still checked")
    return cuda_kernels
