"""The rapidgzip feeder: stdin (the archive the tool opened) to stdout, hashing every byte it
passes on.

rapidgzip holds the GIL while it waits for input, so no thread of the tool's process could
feed it: this child reads the very file the tool opened (stdin shares its file offset, which is
how the tool sees progress). At the end it writes "<sha256> <bytes> <last 4 bytes in hex>" to
stderr, or "error <errno> <message>" when reading fails. Run by file path with -I -S; standard
library only.

The sha256 runs on a thread of its own while the same buffer is written to the pipe (hashlib
releases the GIL): one after the other they held rapidgzip on many cores to the speed of the
hash alone. A buffer is read into again only once both are done with it.
"""
import hashlib
import os
import queue
import sys
import threading

CHUNK = 1 << 20
BUFFERS = 4


def main() -> int:
    h, total, tail = hashlib.sha256(), 0, b""
    free: queue.Queue = queue.Queue()
    for _ in range(BUFFERS):
        free.put(bytearray(CHUNK))
    hashing: queue.Queue = queue.Queue()

    def hash_them() -> None:
        while (item := hashing.get()) is not None:
            buf, n = item
            h.update(memoryview(buf)[:n])
            free.put(buf)

    hasher = threading.Thread(target=hash_them, daemon=True)
    hasher.start()
    try:
        while True:
            buf = free.get()
            n = sys.stdin.buffer.raw.readinto(buf)
            if not n:
                break
            view = memoryview(buf)
            total += n
            tail = (tail + bytes(view[max(0, n - 4):n]))[-4:]
            hashing.put((buf, n))  # hashed beside the write; back in `free` when hashed
            out = view[:n]
            while out:
                out = out[os.write(1, out):]
    except BrokenPipeError:
        return 1
    except OSError as exc:
        sys.stderr.write(f"error {exc.errno or 5} {exc.strerror}")
        return 1
    hashing.put(None)
    hasher.join()
    sys.stderr.write(f"{h.hexdigest()} {total} {tail.hex() or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
