"""Exercise 3.1's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_1_first_fit import *  # noqa: F401,F403
