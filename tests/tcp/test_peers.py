"""A proc's peers: one place for where each receives, what waits for that, and which are lost."""

from __future__ import annotations

from danaus.core.transport import ProcLoss
from danaus.transports.tcp import control
from danaus.transports.tcp.peers import Peers

AT = control.Address("tcp://10.0.0.2:1", "tcp://10.0.0.2:2,local:b")


def test_the_directory_is_asked_once_for_both_planes():
    peers = Peers()
    assert peers.hold_data("b", [b"D", b"1"])
    assert not peers.hold_control("b", [b"C", b"1"])
    assert not peers.hold_data("b", [b"D", b"2"])
    assert peers.hold_control("c", [b"C", b"1"])
    assert not peers.hold_data("c", [b"D", b"1"])


def test_what_waited_goes_in_the_order_sent_and_nothing_overtakes_it():
    peers = Peers()
    peers.hold_data("b", [b"1"])
    peers.hold_control("b", [b"C"])
    assert peers.data_address("b") is None
    assert peers.learn("b", AT) == [[b"C"]]
    assert peers.address("b") == AT
    # Known, but data still waits: a new message waits behind it, and no one is asked again.
    assert peers.data_address("b") is None
    assert not peers.hold_data("b", [b"2"])
    assert peers.take_data("b") == (AT.data, [[b"1"], [b"2"]])
    assert peers.data_address("b") == AT.data
    assert peers.take_data("b") is None
    assert not peers.waiting_data()


def test_a_lost_peer_gets_nothing_more_and_what_waited_for_it_is_dropped():
    peers = Peers()
    peers.learn("b", AT)
    peers.hold_data("c", [b"1"])
    peers.hold_control("c", [b"C"])
    assert peers.lose(ProcLoss("c", "exited"))
    assert not peers.lose(ProcLoss("c", "exited")), "a loss is taken once"
    assert peers.lose(ProcLoss("b", "exited"))
    assert peers.data_address("b") is None, "a lost peer's address is not given out"
    assert not peers.hold_data("b", [b"2"]) and not peers.waiting_data()
    assert peers.learn("c", AT) == [] and peers.take_data("c") is None
    assert set(peers.lost) == {"b", "c"}
