"""The kit's own tests import the example managers in examples/conform/ as modules."""

import sys

from kit_paths import EXAMPLES

sys.path.insert(0, str(EXAMPLES))
