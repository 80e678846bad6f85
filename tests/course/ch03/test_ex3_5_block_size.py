"""Exercise 3.5's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_5_block_size import *  # noqa: F401,F403
