"""Puzzle 3.k6's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_k6_window_drops import *  # noqa: F401,F403
