"""Deprecated: NHD's scalar loaders moved to `cuda_kernels.labs.layouts.NHD_SCALAR`, next to
the NHD layout they are the fallback of; this alias goes away in the next release."""

from __future__ import annotations

import warnings

from cuda_kernels.labs.layouts import NHD_SCALAR, load_k_nhd, load_v_nhd

SPLIT_NHD = NHD_SCALAR
__all__ = ["SPLIT_NHD", "load_k_nhd", "load_v_nhd"]

warnings.warn("cuda_kernels.layout_demo moved: use cuda_kernels.labs.layouts.NHD_SCALAR",
              DeprecationWarning, stacklevel=2)
