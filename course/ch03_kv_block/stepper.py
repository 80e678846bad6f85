"""Deprecated: the interleaving scheduler for CUDA-style kernels (class `Stepper`) is
`course.ch03_kv_block.interleaver` now; this alias goes away in the next release."""

import importlib
import sys
import warnings

warnings.warn("course.ch03_kv_block.stepper moved to course.ch03_kv_block.interleaver",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("course.ch03_kv_block.interleaver")
