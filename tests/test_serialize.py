"""Which buffers travel out of band, as frames of their own, and that they come back equal."""

from __future__ import annotations

import pytest

from danaus.core.serialize import LIFT_MAX_ITEMS, OUT_OF_BAND_MIN, bytes_storage, dumps, loads

BIG = b"x" * OUT_OF_BAND_MIN
SMALL = b"x" * (OUT_OF_BAND_MIN - 1)


@pytest.mark.parametrize(
    ("value", "out_of_band"),
    [
        (((BIG,), {}), 1),
        (((), {"data": bytearray(BIG)}), 1),
        ((([BIG, BIG],), {}), 2),
        (((SMALL,), {}), 0),
        ((([BIG] * (LIFT_MAX_ITEMS + 1),), {}), 0),
        ([BIG, {"nested": BIG}], 2),
    ],
    ids=["argument", "keyword", "in-a-list", "small", "long-list", "result"],
)
def test_large_bytes_go_out_of_band_unless_deep_in_a_long_container(value, out_of_band):
    frames = dumps(value)
    assert len(frames) - 1 == out_of_band
    assert loads(frames) == value
    assert type(loads(frames)) is type(value)


def test_the_package_itself_pickles_by_name():
    """Code defined in ``__main__`` travels by value and may refer to ``danaus`` itself."""
    import pickle

    import cloudpickle

    import danaus

    assert pickle.loads(cloudpickle.dumps(danaus)) is danaus


def test_functions_by_value_keep_their_file_name_for_tracebacks_and_pdb():
    def outer(x):
        def inner():
            return x + 1

        return inner()

    copy = loads(dumps(outer))
    assert copy(1) == 2
    assert copy.__code__.co_filename == __file__
    nested = next(c for c in copy.__code__.co_consts if hasattr(c, "co_filename"))
    assert nested.co_filename == __file__


def test_bytes_received_into_bytes_storage_are_that_object_not_a_copy():
    frames = dumps(((BIG, bytearray(BIG)), {}))
    received = [frames[0]]
    for frame in frames[1:]:
        storage = bytes_storage(len(frame))
        storage[:] = frame
        received.append(storage)
    (data, mutable), _ = loads(received)
    assert data == BIG and mutable == BIG
    assert data is received[1].obj.owner, "the bytes were copied out of their storage"
    assert type(mutable) is bytearray, "a bytearray must own a copy, not share the storage"


def test_a_part_of_a_bytes_storage_is_copied_not_handed_out():
    frames = dumps(((BIG,), {}))
    part = bytes_storage(len(frames[1]) + 1)
    part[1:] = frames[1]
    (data,), _ = loads([frames[0], part[1:]])
    assert data == BIG and data is not part.obj.owner
