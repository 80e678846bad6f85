"""Puzzle 3.k1's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_k1_write_kv import *  # noqa: F401,F403
