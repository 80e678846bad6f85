"""The pagedsim course: lessons, exercises and checks that follow the chapter on KV blocks.

    course/curriculum.toml   the exercises in course order (id, stub, solution, checks, hint)
    course/curriculum.py     loads it (tomllib, or a tiny reader on Python 3.10) and validates it
    course/impl.py           which implementation a check loads: solution, stub, or any file
    course/runner.py         runs an exercise's checks in-process and words each failure
    course/cli.py            `pagedsim lesson 3.4` and `pagedsim check 3.4a`
    course/ch03_kv_block/    chapter 3: lessons, stubs, solutions, mutants, the stepper

The checks themselves are pytest files in tests/course/ch03/ (marker ch3_1 ... ch3_7).
"""
