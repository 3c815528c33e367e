"""How an authenticated UCX connection carries a message: a header of sizes, then the frames.

The header says how many frames follow and the size of each. The receiver
reads it into a buffer of fixed size and checks it against the limits (frame
count, ``max_message_bytes``) before it allocates anything for the frames; a
message over the size limit is refused (`OverLimit`), the connection going on.
A header with no frames ends the connection (`BYE`), and is answered in kind.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from danaus.core import wire

MAX_FRAMES = 1 + wire.MAX_FRAMES
"""A kind frame, then at most what the wire allows."""

_COUNT = struct.Struct("<I")
_SIZE = struct.Struct("<Q")
HEADER_BYTES = _COUNT.size + _SIZE.size * MAX_FRAMES
BYE = _COUNT.pack(0)


class FramingError(ValueError):
    """A header that declares too many frames or too many bytes."""


class OverLimit(FramingError):
    """A header that declares more bytes than the limit: the message is refused, not read."""

    def __init__(self, message: str, sizes: list[int]) -> None:
        super().__init__(message)
        self.sizes = sizes
        """The sizes of its frames, which follow all the same."""


def header(sizes: Sequence[int]) -> bytes:
    """The header announcing frames of ``sizes`` bytes (none: `BYE`)."""
    return _COUNT.pack(len(sizes)) + b"".join(_SIZE.pack(size) for size in sizes)


def read_header(
    data: bytes | bytearray | memoryview, max_message_bytes: int, limit: str = ""
) -> list[int]:
    """The frame sizes ``data`` announces, checked; ``[]`` for `BYE`.

    ``limit`` says what the limit is, for the `OverLimit` error.
    """
    view = memoryview(data)
    if view.nbytes < _COUNT.size:
        raise FramingError("a header too short to hold its frame count")
    (count,) = _COUNT.unpack_from(view)
    if count > MAX_FRAMES:
        raise FramingError(f"a header declaring {count} frames (at most {MAX_FRAMES})")
    if view.nbytes < _COUNT.size + _SIZE.size * count:
        raise FramingError(f"a header too short for its {count} frames")
    sizes = [_SIZE.unpack_from(view, _COUNT.size + _SIZE.size * i)[0] for i in range(count)]
    total = sum(sizes)
    if total > max_message_bytes:
        raise OverLimit(
            f"a message of {total} bytes ({limit or f'at most {max_message_bytes}'})", sizes
        )
    return sizes
