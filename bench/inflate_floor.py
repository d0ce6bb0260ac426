"""The floor a wheel install is measured against: every member inflated and written, on every
core, the largest first, and nothing else (no checks, no hashes, no fsync: the timing's `sync`
pays the writes, as it does the installers').

    python bench/inflate_floor.py WHEEL TARGET

Members land under TARGET by their names in the wheel, as pip and uv place them.
"""
from __future__ import annotations

import os
import struct
import sys
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor

try:  # the inflater the tool uses where it is installed (about twice zlib's speed)
    from isal import isal_zlib as inflating
except ImportError:  # pragma: no cover
    inflating = zlib  # type: ignore[assignment]

PIECE = 4 << 20


def inflate(wheel: str, info: zipfile.ZipInfo, target: str) -> None:
    path = os.path.join(target, info.filename)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(wheel, "rb", buffering=0) as f, open(path, "wb", buffering=0) as out:
        f.seek(info.header_offset)
        name_len, extra_len = struct.unpack_from("<HH", f.read(30), 26)
        f.seek(info.header_offset + 30 + name_len + extra_len)
        d = inflating.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
        left = info.compress_size
        while left:
            piece = f.read(min(left, PIECE))
            left -= len(piece)
            out.write(d.decompress(piece) if d is not None else piece)
        if d is not None:
            out.write(d.flush())


def main() -> int:
    wheel, target = sys.argv[1], sys.argv[2]
    with zipfile.ZipFile(wheel) as z:
        members = sorted((i for i in z.infolist() if not i.is_dir()), key=lambda i: -i.file_size)
    with ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:  # the cores it may use
        for done in [pool.submit(inflate, wheel, i, target) for i in members]:
            done.result()
    return 0


if __name__ == "__main__":
    sys.exit(main())
