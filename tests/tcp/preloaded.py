"""A module that tells which process imported it (a fork server preloads it in some tests)."""

import os

IMPORTED_BY = os.getpid()
