"""Credit-based flow control on a message queue pair: a SEND only where a receive waits for it.

Each side posts ``receives`` receive buffers and may send as many messages as
the other side has posted and not yet filled (its credits). A side reposts a
buffer as soon as it has copied a message out, and reports the buffers it
reposted (its debt) in the header of every message it sends. When it has
nothing to send it reports them in a message of their own, an update, once
the debt reaches ``threshold``. Messages that carry data never take the last
credit, which only an update may use; so each side can always report its
debt, and two sides that both want to send can never wait on each other.
A sender therefore never sends into a receive queue with no buffer posted:
receiver-not-ready does not happen.
"""

from __future__ import annotations


class Credits:
    """One side's account with its peer."""

    def __init__(self, receives: int) -> None:
        if receives < 3:
            raise ValueError("credit-based flow control needs at least three receives")
        self.available = receives
        """The peer's receives this side may still fill."""
        self.owed = 0
        """This side's receives reposted since it last reported them."""
        self.threshold = max(2, receives // 2)

    def can_send_data(self) -> bool:
        return self.available >= 2

    def update_due(self) -> bool:
        """Whether this side should report its debt even with nothing else to send."""
        return self.owed >= self.threshold and self.available >= 1

    def take(self) -> int:
        """Spend a credit on a message; the debt it reports, now settled."""
        if self.available < 1:
            raise RuntimeError("no credit left: the peer has no receive posted")
        self.available -= 1
        reported, self.owed = self.owed, 0
        return reported

    def reposted(self) -> None:
        self.owed += 1

    def returned(self, count: int) -> None:
        self.available += count
