"""An ordinary test of the ledger: it passes on every transport's default schedule.

Run it on the simulator over twenty schedule seeds to find the bug:

    pytest --danaus-sim --danaus-seeds 0:20 examples/simulator/test_racy_ledger.py
"""

from racy_ledger import main


def test_entries_are_in_the_order_written():
    assert main() == ["a", "b"]
