"""Load a libcudnn and ask it its versions: `python load.py LIB` (the run's key on stdin)."""
import ctypes
import os
import sys


def main(path: str) -> dict:
    out = {"path": path}
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    for name in ("cudnnGetVersion", "cudnnGetCudartVersion"):
        fn = getattr(lib, name, None)
        if fn is None:
            out[name] = None
            continue
        fn.restype = ctypes.c_size_t
        fn.argtypes = []
        out[name] = int(fn())
    # the libcudnn* files the loader (and cuDNN 8, answering cudnnGetVersion) actually mapped
    from maps import mapped_files

    out["mapped"] = sorted(mapped_files())
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # even under PYTHONSAFEPATH
    from answer import emit

    emit(lambda: main(sys.argv[1]))
