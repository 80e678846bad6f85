"""`from course.ch03_kv_block._cuda import cuda`: numba.cuda on a GPU, or the simulator.

`import cuda_kernels` decides (a real GPU when a driver is visible, else Numba's CUDA
simulator) and must run before numba.cuda is first imported. Without that package,
the simulator is chosen here the same way.
"""

import os

try:
    import cuda_kernels  # noqa: F401  (selects the backend as a side effect)
except ImportError:  # pragma: no cover - the kernels package is part of this project
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

from numba import cuda  # noqa: E402

__all__ = ["cuda"]
