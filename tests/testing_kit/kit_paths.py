"""Where the kit's tests find the repository and its example managers (examples/conform/)."""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "conform"
if str(EXAMPLES) not in sys.path:  # the examples are imported as top-level modules
    sys.path.insert(0, str(EXAMPLES))
