"""A package with an import cycle that takes a while to import, as torch has and does.

Importing it imports `leaf`, which imports this package back. A thread that imports
``leaf`` directly while another imports the package finds one of them half made,
unless the two imports happen one after the other.
"""

import time

time.sleep(0.2)

from tests.programs.slow_cycle import leaf  # noqa: E402 - the slow part comes first

VALUE = leaf.BASE + 1
