"""Chapter 3's checks: one pytest file per exercise, shipped inside the package.

`pagedsim check 3.4a` runs the exercise's file against the student's implementation;
tests/course/ch03/ imports the same files so that CI runs them against the reference
solutions. Each file names its exercise in `EXERCISE` and its section's marker
(`ch3_1` ... `ch3_7`) in `pytestmark`. The fixtures come from course/check_fixtures.py.
"""
