"""Exercise 3.4a's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_4a_free_list import *  # noqa: F401,F403
