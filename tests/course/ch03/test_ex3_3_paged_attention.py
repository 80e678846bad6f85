"""Exercise 3.3's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_3_paged_attention import *  # noqa: F401,F403
