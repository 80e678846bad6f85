"""Puzzle 3.k5's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_k5_copy_blocks import *  # noqa: F401,F403
