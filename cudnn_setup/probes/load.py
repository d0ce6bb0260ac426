"""Load a libcudnn and ask it its versions: `python -m cudnn_setup.probes.load LIB`."""
import ctypes
import json
import sys


def main(path: str) -> None:
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
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
