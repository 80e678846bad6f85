"""Deprecated: the trace viewer (class `Stepper`) is `pagedsim.draw.trace_viewer` now; this
alias goes away in the next release."""

import importlib
import sys
import warnings

warnings.warn("pagedsim.draw.stepper moved to pagedsim.draw.trace_viewer", DeprecationWarning,
              stacklevel=2)
sys.modules[__name__] = importlib.import_module("pagedsim.draw.trace_viewer")
