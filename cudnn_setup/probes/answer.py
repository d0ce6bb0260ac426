"""How a probe hands back its answer: one JSON line alone on stdout, marked with the run's key.

The parent writes a fresh random key on the probe's stdin, one line, and closes it. The probe
reads it first of all, before any library or framework is loaded, and puts /dev/null in its
place: code loaded afterwards (a library's constructor, a framework's import) cannot read it
anywhere, so an answer it prints, or an exit before the probe answers, is never taken for the
probe's. The parent takes only the line that carries its key, whole.

Imported by the probes as a sibling module (they run by file path, outside the package, under
any Python 3 the user points at). Standard library only.
"""
import json
import os
import sys

KEY_FIELD = "answer_key"
MAX_KEY = 128


def take_key():
    """The run's key from stdin ("" when none was given); stdin is /dev/null afterwards."""
    data = b""
    try:
        while not data.endswith(b"\n") and len(data) < MAX_KEY:
            chunk = os.read(0, MAX_KEY - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    except OSError:
        pass
    return data.decode("ascii", "replace").strip()


def line(key, result, **dumps):
    """The answer line for `result` (a dict)."""
    return (json.dumps({KEY_FIELD: key, "answer": result}, **dumps) + "\n").encode("ascii")


def emit(run):
    """The key first; then native code may print to stdout too: it gets stderr, the answer line
    alone gets stdout."""
    key = take_key()
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    result = run()
    sys.stdout.flush()
    data = line(key, result)
    while data:
        data = data[os.write(out_fd, data):]
