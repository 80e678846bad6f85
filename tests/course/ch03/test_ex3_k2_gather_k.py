"""Puzzle 3.k2's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_k2_gather_k import *  # noqa: F401,F403
