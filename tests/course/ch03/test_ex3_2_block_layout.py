"""Exercise 3.2's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_2_block_layout import *  # noqa: F401,F403
