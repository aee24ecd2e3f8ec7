"""gzip of an exposition from its families' bytes, recompressing only what changed.

Each family's bytes (``text.Renderer.parts``) are compressed on their own, by a fresh
raw-deflate stream ended with a sync flush: a run of non-final deflate blocks, byte
aligned, that depends on nothing before it. Such runs concatenate into one valid
deflate stream (closed by an empty final block), wrapped in one gzip member (RFC 1952:
header, the stream, CRC-32 and length of the whole), which any gzip reader inflates
like ``gzip.compress``'s output. A family whose parts are the same object as at the
last render keeps its compressed run. Across families the compressor loses only the
back-references at their borders: ~1 % more bytes at 1,000 containers
(bench/README.md).
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Sequence

from .text import Parts

_FINAL_EMPTY_BLOCK = b"\x03\x00"  # a final, empty, fixed-Huffman deflate block


def _header(level: int) -> bytes:
    # Magic, deflate, no flags, mtime 0 (like gzip.compress(mtime=0)), XFL, OS unknown.
    xfl = 2 if level == 9 else 4 if level == 1 else 0
    return struct.pack("<BBBBLBB", 0x1F, 0x8B, 8, 0, 0, xfl, 255)


def _deflate(chunk: bytes, level: int) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(chunk) + c.flush(zlib.Z_SYNC_FLUSH)


class Gzipper:
    """gzips expositions one after another, keeping each family's compressed run while
    its parts (``text.Parts``: the same object means the same bytes) come back. Holds
    only the last exposition: its body (the one that was served), and where each run
    is in it. Thread-safe."""

    def __init__(self, level: int) -> None:
        self.level = level
        # id(parts) -> (parts, start, end of its run in the body)
        self._runs: dict[int, tuple[Parts, int, int]] = {}
        self._body = b""
        self._lock = threading.Lock()

    def gzip(self, exposition: Sequence[Parts]) -> bytes:
        with self._lock:
            runs: dict[int, tuple[Parts, int, int]] = {}
            last = memoryview(self._body)  # a kept run is a slice of it: no copy kept
            out: list[bytes | memoryview] = [_header(self.level)]
            at = len(out[0])
            crc = 0
            size = 0
            for parts in exposition:
                chunk = b"".join(parts)
                # Keyed by identity, with the parts held: an id cannot be reused while
                # its object lives, so a hit is this very object.
                hit = self._runs.get(id(parts))
                if hit is not None and hit[0] is parts:
                    run: bytes | memoryview = last[hit[1] : hit[2]]
                else:
                    run = _deflate(chunk, self.level)
                runs[id(parts)] = (parts, at, at + len(run))
                at += len(run)
                out.append(run)
                crc = zlib.crc32(chunk, crc)
                size += len(chunk)
            out.append(_FINAL_EMPTY_BLOCK)
            out.append(struct.pack("<LL", crc, size & 0xFFFFFFFF))
            body = b"".join(out)
            self._runs, self._body = runs, body
            return body
