"""The kit's own tests import the example managers in examples/conform/ as modules (see kit_paths)."""

import kit_paths  # noqa: F401  (puts examples/conform on sys.path before any test module imports)
