"""Puzzle 3.k4's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_k4_lse_merge import *  # noqa: F401,F403
