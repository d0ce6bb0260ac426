"""Decode .xz straight into the caller's buffer, through liblzma.

Python's lzma module returns every piece of output as a new bytes object, which then has to be
copied into the page-aligned buffers that direct I/O writes from. Calling liblzma's lzma_code
with next_out pointing into those buffers decodes each byte exactly where it will be written
from. liblzma is the library Python's own lzma module runs on, so it is already trusted in this
process; ctypes gives the GIL back for the length of every call.
"""
from __future__ import annotations

import ctypes
import io
import lzma
from typing import IO

LZMA_OK, LZMA_STREAM_END, LZMA_BUF_ERROR = 0, 1, 10
LZMA_RUN, LZMA_FINISH = 0, 3
LZMA_CONCATENATED = 0x08  # several streams and the zero padding between them, as `xz` reads
NO_MEMORY_LIMIT = 2**64 - 1
INPUT_BYTES = 1 << 20

ERRORS = {5: "cannot allocate memory", 6: "memory usage limit reached",
          7: "file format not recognized", 8: "unsupported compression options",
          9: "compressed data is corrupt", 10: "unexpected end of input",
          11: "programming error in liblzma"}


class _Stream(ctypes.Structure):
    """lzma_stream, whose layout liblzma 5 keeps stable."""

    _fields_ = [("next_in", ctypes.c_void_p), ("avail_in", ctypes.c_size_t),
                ("total_in", ctypes.c_uint64),
                ("next_out", ctypes.c_void_p), ("avail_out", ctypes.c_size_t),
                ("total_out", ctypes.c_uint64),
                ("allocator", ctypes.c_void_p), ("internal", ctypes.c_void_p),
                ("reserved_ptr", ctypes.c_void_p * 4),
                ("seek_pos", ctypes.c_uint64), ("reserved_int2", ctypes.c_uint64),
                ("reserved_int3", ctypes.c_size_t), ("reserved_int4", ctypes.c_size_t),
                ("reserved_enum1", ctypes.c_int), ("reserved_enum2", ctypes.c_int)]


def load() -> ctypes.CDLL | None:
    """liblzma 5, or None where it cannot be loaded (the caller then uses Python's lzma)."""
    try:
        lib = ctypes.CDLL("liblzma.so.5")
        lib.lzma_stream_decoder.argtypes = [ctypes.POINTER(_Stream), ctypes.c_uint64,
                                            ctypes.c_uint32]
        lib.lzma_code.argtypes = [ctypes.POINTER(_Stream), ctypes.c_int]
        lib.lzma_end.argtypes = [ctypes.POINTER(_Stream)]
        lib.lzma_end.restype = None
    except (OSError, AttributeError):
        return None
    return lib


class XzReader(io.RawIOBase):
    """The decoded bytes of `raw`, an .xz stream; readinto() decodes into the buffer it is given."""

    def __init__(self, lib: ctypes.CDLL, raw: IO[bytes]):
        self.lib = lib
        self.raw = raw
        self.stream = _Stream()
        self.input = bytearray(INPUT_BYTES)
        self.input_at = ctypes.addressof(ctypes.c_char.from_buffer(self.input))
        self.input_ended = False
        self.ended = False
        ret = lib.lzma_stream_decoder(ctypes.byref(self.stream), NO_MEMORY_LIMIT,
                                      LZMA_CONCATENATED)
        if ret != LZMA_OK:
            raise lzma.LZMAError(f"cannot start the xz decoder ({ERRORS.get(ret, ret)})")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        if self.ended or not len(view):
            return 0
        s = self.stream
        target = (ctypes.c_char * len(view)).from_buffer(view)
        s.next_out, s.avail_out = ctypes.addressof(target), len(view)
        while s.avail_out == len(view):
            if not s.avail_in and not self.input_ended:
                n = self.raw.readinto(self.input)
                s.next_in, s.avail_in = self.input_at, n
                self.input_ended = not n
            ret = self.lib.lzma_code(ctypes.byref(s), LZMA_FINISH if self.input_ended else LZMA_RUN)
            if ret == LZMA_STREAM_END:
                self.ended = True
                break
            if ret == LZMA_BUF_ERROR and self.input_ended:
                raise EOFError("the xz stream ends before its end marker")
            if ret != LZMA_OK:
                raise lzma.LZMAError(ERRORS.get(ret, f"liblzma error {ret}"))
        del target  # the view may be released once this returns
        return len(view) - s.avail_out

    def close(self) -> None:
        if not self.closed:
            self.lib.lzma_end(ctypes.byref(self.stream))
            self.raw.close()
        super().close()
