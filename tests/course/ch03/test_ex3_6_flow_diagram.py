"""Exercise 3.6's packaged checks, run against the reference solution."""

from course.ch03_kv_block.checks.test_ex3_6_flow_diagram import *  # noqa: F401,F403
