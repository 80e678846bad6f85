"""`python -m pagedsim` is the `pagedsim` command."""

import sys

from .app.cli import main

sys.exit(main())
