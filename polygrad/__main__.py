"""``python -m polygrad``: the command line (see :mod:`polygrad.cli`)."""

import sys

from .cli import main

sys.exit(main())
