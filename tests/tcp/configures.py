"""A module that configures Danaus when it is imported, and notes each process that imported it
(in the file ``DANAUS_TEST_MARKS`` names); a fork server preloads it in a test.

Only its first importer configures: were a fork server to start a server of its own for
``configure()``, which would preload this module again, the chain ends at the second.
"""

import os

import danaus

with open(os.environ["DANAUS_TEST_MARKS"], "a+") as marks:
    marks.seek(0)
    first = not marks.read()
    marks.write(f"{os.getpid()}\n")
if first:
    danaus.configure(transport="tcp")
