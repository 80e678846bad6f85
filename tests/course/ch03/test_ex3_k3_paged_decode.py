"""Puzzle 3.k3's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_k3_paged_decode import *  # noqa: F401,F403
