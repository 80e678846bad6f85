"""Exercise 3.4b's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_4b_copy_on_write import *  # noqa: F401,F403
