"""``python -m danaus``: the ``danaus`` command, where the environment's scripts are not on PATH."""

import sys

from danaus.cli import main

sys.exit(main())
