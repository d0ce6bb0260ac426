"""The load probe's answer (probes/load.py), read into types: the library it loaded and what
that library said of itself.

The load check reads it once (probing/answer_values.Fields); the checks that need cuDNN's own
version or the CUDA it was built for (coherence, deps, cuda, driver) take this value, not the
check's JSON.
"""
from __future__ import annotations

from msgspec import Struct

from cudnn_setup.facts import cuda as cuda_facts
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.probing.answer_values import Fields, integer

WHAT = "the load probe's answer"
PATH_LIMIT = 4096


class LoadAnswer(Struct, frozen=True):
    """`version`: cudnnGetVersion() (None: the library has none, as R1); `cudart_version`:
    cudnnGetCudartVersion(), the CUDA it was built for (12040); `mapped`: the libcudnn* files
    the child had mapped once loaded."""

    path: str | None = None
    version: int | None = None
    cudart_version: int | None = None
    mapped: tuple[str, ...] = ()

    @classmethod
    def read(cls, answer: Fields) -> LoadAnswer:
        return cls(path=answer.text("path", PATH_LIMIT), version=answer.integer("cudnnGetVersion"),
                   cudart_version=answer.integer("cudnnGetCudartVersion", 0, 10**7),
                   mapped=tuple(answer.paths("mapped")))

    @property
    def cudnn(self) -> str | None:
        """cuDNN's version as text ("9.1.0"), from cudnnGetVersion()."""
        number = integer(self.version, 1, 10**7)
        return gen.version_text(number) if number is not None else None

    @property
    def cuda(self) -> str | None:
        """The CUDA version it was built for as text ("12.4"), from cudnnGetCudartVersion()."""
        number = integer(self.cudart_version, 1000, 10**6)
        return cuda_facts.version_text(number) if number is not None else None

    def to_dict(self) -> dict:
        """The load check's `data`."""
        return {"path": self.path, "cudnnGetVersion": self.version,
                "cudnnGetCudartVersion": self.cudart_version, "mapped": list(self.mapped)}
