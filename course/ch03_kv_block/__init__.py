"""Chapter 3, "KV Block design": lessons, exercise stubs, reference solutions and mutants.

lessons/     one module per section 3.1 ... 3.7 (`pagedsim lesson 3.4`)
exercises/   the stubs students edit (`pagedsim check 3.4a`)
solutions/   the reference solutions, kept apart from the stubs
mutants.toml known-buggy variants of the solutions that the checks must catch
interleaver.py  a step-by-step scheduler for CUDA-style Python kernels (3.7)
"""
