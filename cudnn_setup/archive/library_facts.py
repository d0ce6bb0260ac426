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
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.composition import named_by
from cudnn_setup.facts.elf import ElfInfo, NotElf, code_problem, read_elf

# cuDNN has at most a dozen shared libraries; an archive with more names than this has the
# rest read by the judge itself, after the stream, as before.
MAX_EARLY = 32


@dataclass(frozen=True)
class LibraryFacts:
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


class FactsReader:
    """Reads the facts of each staged library on one worker thread, in the order the files
    are complete; `get` answers from that work, or reads a file no one submitted (once)."""

    def __init__(self) -> None:
        self.futures: dict[str, Future] = {}
        self.pool: ThreadPoolExecutor | None = None
        self.lock = threading.Lock()  # files are completed by several writing threads
        self.closed = False

    def submit(self, path: Path) -> None:
        """Called on a writing thread once `path` is complete on disk."""
        with self.lock:
            if self.closed or len(self.futures) >= MAX_EARLY:
                return
            if self.pool is None:
                self.pool = ThreadPoolExecutor(max_workers=1,
                                               thread_name_prefix="library-facts")
            self.futures[os.fspath(path)] = self.pool.submit(read_facts, path)

    def get(self, path: Path) -> LibraryFacts:
        """The facts of `path`, read once: a file no one submitted is read here, and kept for
        the judge's next question about it."""
        key = os.fspath(path)
        with self.lock:
            future = self.futures.get(key)
        if future is not None:
            return future.result()
        facts = read_facts(path)
        with self.lock:
            if not self.closed:
                done: Future = Future()
                done.set_result(facts)
                self.futures.setdefault(key, done)
        return facts

    def wait(self) -> None:
        """Until every submitted file has been read: the pass that staged them returns with no
        file of the staging dir open."""
        with self.lock:
            futures = list(self.futures.values())
        for future in futures:
            future.exception()  # waits; a failure is the judge's to see, through get()

    def close(self) -> None:
        """Stop: what has not started never will, what runs is waited for (its files may be
        about to be removed)."""
        with self.lock:
            self.closed = True
            pool, self.pool = self.pool, None
            self.futures.clear()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
