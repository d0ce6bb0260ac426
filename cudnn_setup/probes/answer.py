"""How a probe hands back its answer: one JSON line alone on stdout.

Imported by the probes as a sibling module (they run by file path, outside the package).
Standard library only.
"""
import json
import os
import sys


def emit(run):
    """Native code may print to stdout too: it gets stderr, the JSON line alone gets stdout."""
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    result = run()
    sys.stdout.flush()
    os.write(out_fd, (json.dumps(result) + "\n").encode())
