"""Policies against the kernels (CUDA simulator): swap round trips, windows, cache hits."""
