"""Where the kit's tests find the repository and the example managers (examples/conform/).

A module of its own, not conftest.py: several test folders have a conftest.py, and a
`from conftest import ...` gets whichever one pytest imported last when folders are
run together (`pytest tests/course tests/testing_kit`)."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "conform"
