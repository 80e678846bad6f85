"""The kit's own tests import the example managers in examples/conform/ as modules."""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "conform"
sys.path.insert(0, str(EXAMPLES))
