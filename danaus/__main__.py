"""``python -m danaus``: the ``danaus`` command, where the environment's scripts are not on PATH."""

import sys

from danaus.cli import main

if __name__ == "__main__":
    sys.exit(main())
