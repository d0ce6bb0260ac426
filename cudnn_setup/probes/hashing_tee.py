"""The rapidgzip feeder: stdin (the archive the tool opened) to stdout, hashing every byte it
passes on.

rapidgzip holds the GIL while it waits for input, so no thread of the tool's process could
feed it: this child reads the very file the tool opened (stdin shares its file offset, which is
how the tool sees progress). At the end it writes "<sha256> <bytes> <last 4 bytes in hex>" to
stderr, or "error <errno> <message>" when reading fails. Run by file path with -I -S; standard
library only.
"""
import hashlib
import os
import sys


def main() -> int:
    h, buf, total, tail = hashlib.sha256(), bytearray(1 << 20), 0, b""
    view = memoryview(buf)
    try:
        while n := sys.stdin.buffer.raw.readinto(buf):
            h.update(view[:n])
            total += n
            tail = (tail + bytes(view[max(0, n - 4):n]))[-4:]
            out = view[:n]
            while out:
                out = out[os.write(1, out):]
    except BrokenPipeError:
        return 1
    except OSError as exc:
        sys.stderr.write(f"error {exc.errno or 5} {exc.strerror}")
        return 1
    sys.stderr.write(f"{h.hexdigest()} {total} {tail.hex() or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
