"""Exercise 3.7's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_7_align_and_pop import *  # noqa: F401,F403
