"""Load libcudnn and then each sub-library by its soname, as cuDNN loads them; say what mapped.

    python sublibs.py [--first FUNCTION …] LIBCUDNN SONAME [SONAME …]   (a SONAME may be a path)

LIBCUDNN is opened with RTLD_NOW | RTLD_GLOBAL. Each SONAME is then opened with RTLD_NOW in a
forked child, so one that aborts (cuDNN 8.9 does, with a sub-library missing) or hangs costs
only its own entry. For each: the file the loader mapped (its link-map name and the file
/proc/self/maps shows at its base), the version (cudnnGetVersion when that object itself
exports it, else its cudnn_<name>_version constant, else the number in the file name) and
dlerror() when it fails. The versions cuDNN
reports through its own cudnn<Sub>VersionCheck() functions are added where libcudnn exports
them, with the files that call mapped: those load the sub-library the way cuDNN does, from
libcudnn and so with its RUNPATH ($ORIGIN in NVIDIA's wheels and archives), which a dlopen by
soname from this script does not have. 0 is CUDNN_STATUS_SUCCESS; 2001/2002 (cuDNN 9) are
SUBLIBRARY_LOADING_FAILED and SUBLIBRARY_VERSION_MISMATCH. `cudnn_mapped` lists the libcudnn*
files the library mapped while answering cudnnGetVersion() (cuDNN 8 loads its sub-libraries
then), found the same way.

Each `--first FUNCTION` (a cudnn<Sub>VersionCheck of libcudnn) is called before any child is
started, first in a child of its own (one that dies costs only its entry) and then in this
process: a client's first call loads those sub-libraries before the others (cuDNN 9 opens
libcudnn_graph first, and libcudnn_ops, cnn and adv list libcudnn_graph.so.9 as DT_NEEDED, which
ld.so then matches to the loaded graph library by its SONAME, whatever the links). `opened`
lists the link-map names of the libcudnn* objects a call brought in: the directory the loader
searched and the name the library was opened under (libcudnn_ops.so.9.1.0, not .so.9).

Prints one JSON line. Standard library only.
"""
import ctypes
import json
import os
import re
import select
import signal
import sys
import time

# Its sibling modules (maps.py, answer.py) are imported by file location: a probe runs by path,
# outside the package, under any Python 3 (even under PYTHONSAFEPATH).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from maps import mapped_file, mapped_files  # noqa: E402

RTLD_NOW, RTLD_GLOBAL = os.RTLD_NOW, os.RTLD_GLOBAL
RTLD_DI_LINKMAP = 2
CHILD_TIMEOUT = 60.0
MAX_REPLY = 1 << 16


class LinkMap(ctypes.Structure):
    pass


LinkMap._fields_ = [("l_addr", ctypes.c_size_t), ("l_name", ctypes.c_char_p),
                    ("l_ld", ctypes.c_void_p), ("l_next", ctypes.POINTER(LinkMap)),
                    ("l_prev", ctypes.POINTER(LinkMap))]


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _libc():
    libc = ctypes.CDLL(None)
    for name in ("dlinfo", "dladdr"):
        if not hasattr(libc, name):  # glibc before 2.34 keeps them in libdl
            return ctypes.CDLL("libdl.so.2")
    return libc


LIBC = _libc()
LIBC.dlinfo.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
LIBC.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]


def _text(raw):
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def describe(lib, with_version=True):
    """Link-map name, mapped file and (when asked) version of one loaded object."""
    lm = ctypes.POINTER(LinkMap)()
    out = {"path": None, "mapped": None}
    if LIBC.dlinfo(lib._handle, RTLD_DI_LINKMAP, ctypes.byref(lm)) == 0 and lm:
        out["path"] = _text(lm.contents.l_name)
        base = lm.contents.l_addr
        # l_addr is the load bias: the first PT_LOAD of a shared object starts there
        out["mapped"] = mapped_file(base) if base else None
    if out["path"] and not out["mapped"]:
        out["mapped"] = os.path.realpath(out["path"])
    if with_version:
        out["version"], out["version_from"] = own_version(lib, out["path"])
    return out


def loaded_names(handle):
    """The link-map names of every libcudnn* object loaded in this process."""
    lm = ctypes.POINTER(LinkMap)()
    if LIBC.dlinfo(handle, RTLD_DI_LINKMAP, ctypes.byref(lm)) != 0 or not lm:
        return set()
    while lm.contents.l_prev:
        lm = lm.contents.l_prev
    names = set()
    while lm:
        name = _text(lm.contents.l_name or b"")
        if os.path.basename(name).startswith("libcudnn"):
            names.add(name)
        lm = lm.contents.l_next
    return names


def own_version(lib, path):
    fn = getattr(lib, "cudnnGetVersion", None)
    if fn is not None and path:
        info = DlInfo()
        addr = ctypes.cast(fn, ctypes.c_void_p).value
        if LIBC.dladdr(addr, ctypes.byref(info)) and info.dli_fname and \
                os.path.realpath(_text(info.dli_fname)) == os.path.realpath(path):
            fn.restype = ctypes.c_size_t
            fn.argtypes = []
            return int(fn()), "cudnnGetVersion"
    found = symbol_version(lib, path) if path else None
    if found:
        return found
    real = os.path.realpath(path) if path else ""
    m = re.search(r"\.so\.(\d+(?:\.\d+)*)$", real) or re.search(r"\.so\.(\d+(?:\.\d+)*)$", path or "")
    return (m.group(1) if m else None), "file name"


def symbol_version(lib, path):
    """cuDNN's sub-libraries export their version as a 4-byte constant cudnn_<name>_version
    (9.x: ops, adv, graph as cudnn_ops_infer_version, cudnn_adv_infer_version,
    cudnn_graph_version; 8.x: the _infer/_train ones) whose hex digits read M.mm.pp: 0x90100
    is 9.1.0, 0x80906 is 8.9.6. Only the object's own symbol counts."""
    m = re.match(r"libcudnn_(\w+?)\.so", os.path.basename(os.path.realpath(path)))
    if not m:
        return None
    for name in (f"cudnn_{m.group(1)}_version", f"cudnn_{m.group(1)}_infer_version"):
        try:
            var = ctypes.c_uint32.in_dll(lib, name)
        except ValueError:
            continue
        info = DlInfo()
        if not LIBC.dladdr(ctypes.addressof(var), ctypes.byref(info)) or not info.dli_fname or \
                os.path.realpath(_text(info.dli_fname)) != os.path.realpath(path):
            continue
        digits = "%x" % var.value
        if digits.isdigit() and 5 <= len(digits) <= 6:
            return "%d.%d.%d" % (int(digits[:-4]), int(digits[-4:-2]), int(digits[-2:])), name
    return None


def asked_version(lib, path):
    """The library's version, and the libcudnn* files it mapped to answer (cuDNN loading its
    sub-libraries its own way: from its directory, through its RUNPATH)."""
    before = mapped_files()
    version, source = own_version(lib, path)
    return {"version": version, "version_from": source,
            "cudnn_mapped": sorted(mapped_files() - before)}


def in_child(work, timeout=CHILD_TIMEOUT):
    """Run work() in a forked child; its dict comes back, or how the child died."""
    return collect(start_child(work, timeout))


def start_child(work, timeout=CHILD_TIMEOUT):
    """work() started in a forked child; collect() gives its answer. Children started one
    after another run at the same time, each with its own time limit."""
    sys.stdout.flush()
    sys.stderr.flush()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            data = json.dumps(work()).encode()
        except BaseException as exc:  # a child must always report and exit
            data = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
        os.write(wfd, data[:MAX_REPLY])
        os._exit(0)
    os.close(wfd)
    return pid, rfd, time.monotonic() + timeout, timeout


def collect(started):
    """The dict a child started by start_child() sent, or how it died."""
    pid, rfd, deadline, timeout = started
    chunks, status = [], None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(rfd)
            return {"error": f"did not finish in {timeout:.0f} s"}
        ready, _, _ = select.select([rfd], [], [], min(left, 0.05))
        if ready:
            chunk = os.read(rfd, 65536)
            if not chunk:
                break
            if sum(map(len, chunks)) < MAX_REPLY:
                chunks.append(chunk)
            continue
        # Nothing to read: once the child has exited, all it wrote has been read; a daemon a
        # library's constructor started may hold the pipe open for ever, so no EOF is awaited.
        done, waited = os.waitpid(pid, os.WNOHANG)
        if done:
            status = waited
            break
    os.close(rfd)
    if status is None:
        _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return {"error": f"the process died of {name}", "signal": name}
    try:
        return json.loads(b"".join(chunks).decode("utf-8", "replace"))
    except ValueError:
        return {"error": "no reply from the child"}


def open_sub(soname):
    def work():
        try:
            lib = ctypes.CDLL(soname, mode=RTLD_NOW)
        except OSError as exc:
            return {"loaded": False, "dlerror": str(exc)}
        return {"loaded": True, **describe(lib)}
    return work


def check_function(soname):
    """cudnnOpsInferVersionCheck for libcudnn_ops_infer.so.8, cudnnGraphVersionCheck for …graph
    (given by soname or by path)."""
    m = re.match(r"libcudnn_(\w+?)\.so", os.path.basename(soname))
    if not m:
        return None
    return "cudnn" + "".join(p.title() for p in m.group(1).split("_")) + "VersionCheck"


def version_check(main, name):
    """Call cuDNN's own check: it loads the sub-library the way cuDNN does (from libcudnn, so
    with libcudnn's RUNPATH), and the files it mapped show which copy it took."""
    def work():
        before, names = mapped_files(), loaded_names(main._handle)
        fn = getattr(main, name)
        fn.restype = ctypes.c_int
        fn.argtypes = []
        status = int(fn())
        return {"status": status, "mapped": sorted(mapped_files() - before),
                "opened": sorted(loaded_names(main._handle) - names)}
    return work


def open_first(main, names):
    """Call each of `names` (libcudnn's version checks) as a client's first call would load
    them: in a child first, then here when the child survived."""
    done = []
    for name in names:
        entry = {"function": name}
        if not hasattr(main, name):
            entry["error"] = "libcudnn does not export it"
        else:
            entry.update(in_child(version_check(main, name)))
            if "error" not in entry:
                entry.update(version_check(main, name)())
        done.append(entry)
    return done


def main(argv):
    first = []
    while len(argv) >= 2 and argv[0] == "--first":
        first.append(argv[1])
        argv = argv[2:]
    if not argv:
        return {"error": "usage: sublibs.py [--first FUNCTION…] LIBCUDNN SONAME…"}
    target, sonames = argv[0], argv[1:]
    out = {"library": target, "sublibraries": []}
    try:
        main_lib = ctypes.CDLL(target, mode=RTLD_NOW | RTLD_GLOBAL)
    except OSError as exc:
        out["loaded"], out["dlerror"] = False, str(exc)
        return out
    out["loaded"] = True
    out.update(describe(main_lib, with_version=False))
    # cuDNN 8.9's cudnnGetVersion() aborts when a sub-library is missing: ask in a child
    # Every child is started before any is waited for: each loads one large library, and on
    # several cores they load side by side (cuDNN 9: ten children instead of ten in a row).
    asked = start_child(lambda: asked_version(main_lib, out["path"]))
    if first:
        out["opened_first"] = open_first(main_lib, first)
    started = []
    for soname in sonames:
        check = check_function(soname)
        checking = start_child(version_check(main_lib, check)) \
            if check and hasattr(main_lib, check) else None
        started.append((soname, start_child(open_sub(soname)), check, checking))
    out.update(collect(asked))
    for soname, opened, check, checking in started:
        entry = {"soname": soname, **collect(opened)}
        if checking is not None:
            entry["version_check"] = {"function": check, **collect(checking)}
        out["sublibraries"].append(entry)
    return out


if __name__ == "__main__":
    from answer import emit

    emit(lambda: main(sys.argv[1:]))
