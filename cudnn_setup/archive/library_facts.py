"""What the judge reads from each staged library, read while the rest of the archive decodes.

Judging a package reads every library back: its ELF header and sections (`read_elf`), its
symbol table (`code_problem`) and its read-only data for the names it opens at run time
(`named_by`), 80 MB of cuDNN 8.9.6's libcudnn_cnn_infer alone. The staged files were written
with O_DIRECT, so those reads go to the disk; done after the last byte is decoded they add
their whole time to the install (0.3-0.5 s for a cuDNN 8.9 or 9 on the 2-core machine). So
each library's facts are read on a thread of its own as soon as its file is complete, beside
the decoding of the members after it, and the judge takes them from here.
"""
from __future__ import annotations

import os
import queue
import threading
from pathlib import Path

from msgspec import Struct

from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.composition import named_by
from cudnn_setup.facts.elf import ElfInfo, NotElf, code_problem, read_elf

# cuDNN has at most a dozen shared libraries; an archive with more names than this has the
# rest read by the judge itself, after the stream, as before.
MAX_EARLY = 32


class LibraryFacts(Struct, frozen=True):
    """One staged library as the judge sees it."""

    elf: ElfInfo | None  # None: not an ELF file (or a damaged one); `not_elf` says what
    not_elf: str | None
    code: str | None  # code_problem's answer (None: holds code, or not asked)
    named: tuple[list[str], list[str]]  # composition.named_by: (DT_NEEDED, run-time) stems


def read_facts(path: Path) -> LibraryFacts:
    """Everything the judge reads from the library at `path`; code_problem is asked for a
    shared object and for a file that is not ELF (where it tells a truncated file), as the
    judge asks it."""
    try:
        elf, not_elf = read_elf(path), None
    except NotElf as exc:
        elf, not_elf = None, str(exc)
    code = code_problem(path) if elf is None or elf.is_shared_object else None
    return LibraryFacts(elf, not_elf, code, named_by(path))


def early(name: str) -> bool:
    """Whether a member of this name is a shared library the judge will read."""
    return name.startswith("libcudnn") and gen.SHARED_NAME.match(name) is not None


class _Read:
    """One file's facts, read on the reader's thread (or at once): `result` waits for them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done = threading.Event()
        self.value: LibraryFacts | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = read_facts(self.path)
        except BaseException as exc:  # the judge's to see, through result()
            self.error = exc
        finally:
            self.done.set()

    def result(self) -> LibraryFacts:
        self.done.wait()
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value


class FactsReader:
    """Reads the facts of each staged library on one worker thread, in the order the files
    are complete; `get` answers from that work, or reads a file no one submitted (once).

    A plain thread and queue, not concurrent.futures: that package (and the logging it
    imports) would cost every install's start 8 ms for one worker."""

    def __init__(self) -> None:
        self.futures: dict[str, _Read] = {}
        self.pool: threading.Thread | None = None  # the worker, once a file is submitted
        self.queue: queue.SimpleQueue[_Read | None] = queue.SimpleQueue()
        self.lock = threading.Lock()  # files are completed by several writing threads
        self.closed = False

    def _work(self) -> None:
        while (read := self.queue.get()) is not None:
            if self.closed:  # never started: whoever waits on it gets no answer from here
                read.error = RuntimeError("the library facts reader was closed")
                read.done.set()
                continue
            read.run()

    def submit(self, path: Path) -> None:
        """Called on a writing thread once `path` is complete on disk."""
        with self.lock:
            if self.closed or len(self.futures) >= MAX_EARLY:
                return
            if self.pool is None:  # kept once started: one that could not be is never joined
                pool = threading.Thread(target=self._work, name="library-facts", daemon=True)
                pool.start()
                self.pool = pool
            read = self.futures[os.fspath(path)] = _Read(path)
            self.queue.put(read)

    def get(self, path: Path) -> LibraryFacts:
        """The facts of `path`, read once: a file no one submitted is read here, and kept for
        the judge's next question about it."""
        key = os.fspath(path)
        with self.lock:
            read = self.futures.get(key)
        if read is not None:
            return read.result()
        read = _Read(path)
        read.run()
        with self.lock:
            if not self.closed:
                self.futures.setdefault(key, read)
        return read.result()

    def wait(self) -> None:
        """Until every submitted file has been read: the pass that staged them returns with no
        file of the staging dir open."""
        with self.lock:
            reads = list(self.futures.values())
        for read in reads:
            read.done.wait()  # a failure is the judge's to see, through get()

    def close(self) -> None:
        """Stop: what has not started never will, what runs is waited for (its files may be
        about to be removed)."""
        with self.lock:
            self.closed = True
            worker, self.pool = self.pool, None
            self.futures.clear()
        if worker is not None:
            self.queue.put(None)
            worker.join()
