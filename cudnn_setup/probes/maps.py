"""What is mapped into the probe's own process, read from /proc/self/maps: which copy of a
library the loader (or cuDNN, loading its sub-libraries its own way) actually took.

Imported by the probes as a sibling module, as answer.py is (they run by file path, outside
the package, under any Python 3 the user points at). Standard library only.
"""
import os


def _text(raw):
    """The path as the file system has it: the kernel writes a newline in a name as \\012, and
    bytes that are not UTF-8 travel as Python carries them (surrogates), for the parent to show
    escaped, not as U+FFFD, which would name another file."""
    return raw.replace(b"\\012", b"\n").decode("utf-8", "surrogateescape")


def _regions():
    """(start, end, path as bytes) of each file-backed region; none when maps cannot be read."""
    try:
        with open("/proc/self/maps", "rb") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 6:
                    continue
                lo, _, hi = parts[0].partition(b"-")
                try:
                    yield int(lo, 16), int(hi, 16), parts[5].strip()
                except ValueError:
                    continue
    except OSError:
        return


def mapped_files(prefixes=(b"libcudnn",)):
    """The mapped files whose names start with one of `prefixes`."""
    return {_text(path) for _, _, path in _regions()
            if os.path.basename(path).startswith(tuple(prefixes))}


def mapped_file(address):
    """The file mapped at `address` (an object's load address), or None."""
    for lo, hi, path in _regions():
        if lo <= address < hi:
            return _text(path)
    return None
