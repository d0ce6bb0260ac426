"""The tool's state inside a CUDA root: `<root>/.cudnn-setup/` (manifest, journal, lock, staging).

Living inside the root keeps every rename on one filesystem (so atomic) and lets the state
travel with the root. Every piece of it is read and written here, and only after checking that
the state dir, `tx/` and `originals/` are real directories: one that is a symlink, or not a
directory, is refused as damaged state rather than followed out of the root. Each piece is
also judged by its owner and mode before it is read (state/trust.py: nobody but the root's
owner and root may have written it), and whatever the tool creates here is 0755 (directories)
or 0644 (records), whatever the umask.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from msgspec import Struct

from cudnn_setup.durable import DIR_MODE, write_atomic
from cudnn_setup.errors import InstallFailed
from cudnn_setup.state.changed import CHANGED_REL
from cudnn_setup.state.journal import ORIGINALS, TX, Journal
from cudnn_setup.state.manifest import Manifest
from cudnn_setup.state.paths import STATE_DIR, Damaged, damaged_error, real_dir_chain
from cudnn_setup.state.trust import owners, unsafe, unsafe_dirs, unsafe_error
from cudnn_setup.text import escape, plural
from cudnn_setup.untrusted import kind

MANIFEST = "manifest.json"
JOURNAL = "journal.json"
DEFAULT_LOCK_TIMEOUT = 300.0
MAX_STATE_BYTES = 64 << 20  # a manifest of cuDNN 9 is about 40 KiB
T = TypeVar("T")


def permission_hint(path: Path) -> str:
    return (f"run as a user who may write {path} (e.g. with sudo), or pick a CUDA root you own "
            "with --cuda-root")


def permission_error(path: Path, root: Path) -> InstallFailed:
    return InstallFailed(f"permission denied: {path}", permission_hint(root),
                         code="permission-denied")


class StateDir:
    def __init__(self, root: Path):
        self.root = root
        self.path = root / STATE_DIR
        self._owners: frozenset[int] | None = None

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def journal_path(self) -> Path:
        return self.path / JOURNAL

    @property
    def originals(self) -> Path:
        return self.path / ORIGINALS

    @property
    def originals_rel(self) -> str:
        """The originals store relative to the root."""
        return f"{STATE_DIR}/{ORIGINALS}"

    @property
    def tx_path(self) -> Path:
        return self.path / TX

    def tx_dir(self, txid: str) -> Path:
        return self.tx_path / txid

    def tx_rel(self, txid: str) -> str:
        return f"{STATE_DIR}/{TX}/{txid}"

    def damaged(self, what: str) -> InstallFailed:
        return damaged_error(self.root, what)

    # --- checking the pieces ------------------------------------------------------------------

    def trust(self, st: os.stat_result, path: Path) -> None:
        """Refuse (unsafe-state) a piece that someone other than the root's owner or root
        could have written; `st` is its lstat, or the fstat of the descriptor about to be
        read."""
        if self._owners is None:
            self._owners = owners(self.root)
        why = unsafe(st, self._owners)
        if why:
            raise unsafe_error(self.root, path, why)

    def trust_trees(self) -> None:
        """Every directory under tx/ and originals/ trusted (recovery and uninstall move what
        they hold into the root)."""
        for top in (self.tx_path, self.originals):
            if self._real_dir(top):
                found = unsafe_dirs(top, self._owners or owners(self.root))
                if found:
                    raise unsafe_error(self.root, *found)

    def _real_dir(self, path: Path) -> bool:
        """Whether `path` exists as a directory; a symlink or another type is damaged state."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        except PermissionError:  # lstat is refused only where a dir above it cannot be searched
            raise permission_error(path.parent, self.root) from None
        if stat.S_ISLNK(st.st_mode):
            raise self.damaged(f"{path} is a symbolic link (to {os.readlink(path)!r}); the tool "
                               "never makes one there")
        if not stat.S_ISDIR(st.st_mode):
            raise self.damaged(f"{path} is not a directory")
        self.trust(st, path)
        return True

    def exists(self) -> bool:
        return self._real_dir(self.path)

    def check(self) -> bool:
        """The state dir, tx/, originals/ and changed/ are real directories where present;
        whether the state dir exists."""
        if not self.exists():
            return False
        self._real_dir(self.tx_path)
        self._real_dir(self.originals)
        self._real_dir(self.root / CHANGED_REL)  # a repair moves kept files there
        return True

    def inside(self, rel: str) -> Path:
        """`root/rel` for a path under the state dir, after checking that no directory on the
        way there is a symlink."""
        try:
            real_dir_chain(self.root, rel)
        except Damaged as exc:
            raise self.damaged(str(exc)) from None
        return self.root / rel

    def pending(self) -> bool:
        """Whether a journal or leftover staging waits for recovery."""
        if not self.check():
            return False
        return os.path.lexists(self.journal_path) or self.tx_path.exists()

    # --- reading and writing records ----------------------------------------------------------

    def _read(self, name: str) -> object | None:
        if not self.exists():
            return None
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            dir_fd = os.open(self.path, flags | os.O_DIRECTORY)
        except FileNotFoundError:
            return None
        except PermissionError:
            raise permission_error(self.path, self.root) from None
        except OSError as exc:  # ELOOP, ENOTDIR: replaced since it was checked
            raise self.damaged(f"{self.path}: {exc.strerror}") from None
        try:
            self.trust(os.fstat(dir_fd), self.path)  # the very directory read from
            try:
                fd = os.open(name, flags | os.O_NONBLOCK, dir_fd=dir_fd)
            except FileNotFoundError:
                return None
            except PermissionError:
                raise permission_error(self.path / name, self.root) from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self.damaged(f"{name} is a symbolic link") from None
                if exc.errno == errno.ENXIO:  # a socket: open(2) refuses it
                    raise self.damaged(f"{name} is not a regular file (a socket)") from None
                raise
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # judged before fdopen, which refuses a directory
                os.close(fd)
                raise self.damaged(f"{name} is not a regular file ({kind(st.st_mode)})")
            with os.fdopen(fd, "rb") as f:
                self.trust(st, self.path / name)  # the very file read
                data = f.read(MAX_STATE_BYTES + 1)
        finally:
            os.close(dir_fd)
        if len(data) > MAX_STATE_BYTES:
            raise self.damaged(f"{name} is larger than {MAX_STATE_BYTES >> 20} MiB")
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise self.damaged(f"{name} is not valid JSON ({str(exc)[:200]})") from None

    def _record(self, name: str, load: Callable[[object, Path], T]) -> T | None:
        """One validated record, None when there is none; damaged state raises."""
        data = self._read(name)
        if data is None:
            return None
        try:
            return load(data, self.root)
        except Damaged as exc:
            raise self.damaged(f"{name}: {exc}") from None

    def manifest(self) -> Manifest | None:
        """The validated manifest, None when there is none; damaged state raises."""
        return self._record(MANIFEST, Manifest.load)

    def journal(self) -> Journal | None:
        """The validated journal of an unfinished transaction, None when there is none."""
        return self._record(JOURNAL, Journal.load)

    def write_journal(self, journal: Journal) -> None:
        self.check()
        _write_json(self.journal_path, journal.to_dict())

    # --- creating, locking, tidying -----------------------------------------------------------

    def ensure(self) -> bool:
        """Create the state dir; True when this call created it."""
        try:
            os.mkdir(self.path, DIR_MODE)
            os.chmod(self.path, DIR_MODE)  # not the umask's: everyone reads it (verify)
            return True
        except FileExistsError:
            self.exists()  # refuses a symlink (dangling or not) or a file there
            return False
        except PermissionError:
            raise permission_error(self.path, self.root) from None

    def tidy(self) -> None:
        """Drop the transactions dir once no transaction uses it."""
        if self._real_dir(self.tx_path):
            with os.scandir(self.tx_path) as entries:
                empty = next(entries, None) is None
            if empty:
                self.tx_path.rmdir()

    def remove_if_empty(self) -> None:
        """Drop leftovers the tool owns, then the dir itself if nothing is left."""
        if not self.exists():
            return
        self.tidy()
        try:
            self.path.rmdir()
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                raise

    @contextmanager
    def locked(self, timeout: float = DEFAULT_LOCK_TIMEOUT,
               on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        """Hold an exclusive flock on the state dir itself, waiting up to `timeout` seconds.

        Locking the directory rather than a lock file leaves nothing behind once uninstall has
        emptied the dir; a waiter whose dir was removed meanwhile starts over on the new one.
        `on_wait` hears one line when the lock is found held (by whom, since when) and one
        when it is got after waiting, so a person sees why nothing happens meanwhile.
        """
        started = time.monotonic()
        deadline = started + timeout
        delay = 0.05
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        waited = False
        while True:
            self.ensure()
            try:
                fd = os.open(self.path, flags)
            except FileNotFoundError:  # removed by an uninstall finishing meanwhile
                fd = None
            except PermissionError:  # a state dir this user may not read: no damage of it
                raise permission_error(self.path, self.root) from None
            except OSError as exc:  # ELOOP, ENOTDIR: a symlink or a file appeared there
                raise self.damaged(f"{self.path}: {exc.strerror}") from None
            if fd is not None:
                try:
                    self.trust(os.fstat(fd), self.path)
                except InstallFailed:
                    os.close(fd)
                    raise
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if not waited and on_wait is not None:
                        on_wait(waiting_line(self.root, fd, timeout))
                    waited = True
                    os.close(fd)
                    fd = None
            if fd is not None:
                try:
                    same = os.lstat(self.path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    break
                os.close(fd)
            if time.monotonic() >= deadline:
                raise lock_held_error(self.root, timeout)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        if waited and on_wait is not None:
            on_wait(got_line(self.root, started))
        try:
            yield
        finally:
            os.close(fd)

    def lock_held(self) -> str | None:
        """Who holds the lock now (see lock_holder), or None when nobody does; takes nothing."""
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None  # closing the descriptor drops the shared lock again
        except BlockingIOError:
            return lock_holder(fd)
        finally:
            os.close(fd)

    def leftovers(self) -> "Leftovers | None":
        """What runs killed before a journal (or after it was removed) left under tx/."""
        if not self.check() or not self._real_dir(self.tx_path):
            return None
        return measure(self.tx_path)


class Leftovers(Struct, frozen=True):
    """Transaction dirs under tx/: their names, files and bytes (counted up to a bound)."""

    names: tuple[str, ...]
    files: int
    size: int
    counted_all: bool = True

    def describe(self, state_dir: Path) -> str:
        """e.g. "364 MB in 12 files (tx/3f2a…)" for a person."""
        size = f"{self.size / 10**6:.0f} MB" if self.size >= 10**6 else f"{self.size} bytes"
        files = plural(self.files, "file")
        where = ", ".join(f"{TX}/{n}" for n in self.names[:3]) + (" …" if len(self.names) > 3
                                                                 else "")
        more = "at least " if not self.counted_all else ""
        return f"{more}{size} in {files} ({escape(where)}) under {state_dir}"

    def to_dict(self) -> dict:
        return {"transactions": list(self.names), "files": self.files, "bytes": self.size,
                "counted_all": self.counted_all}


MAX_COUNTED = 100_000  # entries looked at to say how much a leftover holds


def measure(tx: Path) -> Leftovers | None:
    """How much the transaction dirs under `tx` hold, links not followed, counting stopped
    after MAX_COUNTED entries (the figure is for a person, the removal does not depend on it)."""
    try:
        names = tuple(sorted(os.listdir(tx)))
    except OSError:
        return None
    if not names:
        return None
    files = size = seen = 0
    stack = [str(tx / n) for n in names]
    while stack and seen < MAX_COUNTED:
        path = stack.pop()
        seen += 1
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                stack += [os.path.join(path, e) for e in os.listdir(path)]
            except OSError:
                pass
        else:
            files += 1
            size += st.st_blocks * 512 if stat.S_ISREG(st.st_mode) else 0
    return Leftovers(names, files, size, counted_all=not stack)


def waiting_line(where: Path, fd: int, timeout: float) -> str:
    """What a person hears when a lock (a root's, a mirror's) is found held."""
    return f"waiting for the lock on {where}: held by {lock_holder(fd)}; waiting up to " \
        f"{timeout:.0f} s"


def got_line(where: Path, started: float) -> str:
    return f"got the lock on {where} after {time.monotonic() - started:.0f} s"


def lock_held_error(where: Path, timeout: float) -> InstallFailed:
    return InstallFailed(f"another cudnn-setup run holds the lock on {where} "
                         f"(waited {timeout:.0f} s)",
                         "wait for it to finish, then run again", code="lock-held")


def lock_holder(fd: int) -> str:
    """Who holds the flock on the file open as `fd`, from /proc/locks: "PID 123 (cudnn-setup
    install …, running since 21:53:07 UTC)", or "another run" where that cannot be read (a
    lock taken in another PID namespace, a kernel without /proc)."""
    try:
        st = os.fstat(fd)
        key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        with open("/proc/locks", "rb") as f:
            table = f.read(1 << 20).decode("ascii", "replace")
    except OSError:
        return "another run"
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 18414 fe:00:2155954 0 EOF"; waiters' lines have "->"
        if len(fields) >= 6 and fields[1] == "FLOCK" and "->" not in fields and \
                fields[5] == key and fields[4].isdigit() and fields[4] != "0":
            pid = int(fields[4])
            return f"PID {pid}" + _process(pid)
    return "another run"


def _process(pid: int) -> str:
    """" (its command line, running since T)", as far as /proc tells."""
    parts = []
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read(4096).split(b"\0")
        words = [os.fsdecode(a) for a in args if a][:6]
        if words:
            words[0] = os.path.basename(words[0])
            parts.append(escape(" ".join(words))[:120])
    except OSError:
        pass
    since = _started(pid)
    if since is not None:
        parts.append("running since " + time.strftime("%H:%M:%S UTC", time.gmtime(since)))
    return f" ({', '.join(parts)})" if parts else ""


def _started(pid: int) -> float | None:
    """When the process started (seconds since the epoch), from /proc/PID/stat and btime."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read(4096).decode("ascii", "replace")
        ticks = int(text[text.rindex(")") + 2:].split()[19])  # field 22, after comm
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f.read(1 << 16).decode().splitlines()
                        if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _write_json(path: Path, data: dict) -> None:
    # anyone may read what is installed; only the writer may change it
    write_atomic(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode(), 0o644)


def write_manifest(path: Path, manifest: Manifest) -> None:
    _write_json(path, manifest.to_dict())


