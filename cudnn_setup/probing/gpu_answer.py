"""The GPU probe's answer (probes/gpu_steps.py), read into types.

Every field is taken through the one reader of an answer (probing/answer_values.Fields), and
the gpu check's JSON is written from these records (`to_dict`), never from the child's own
object: a key the child adds, or a field of another type or size, does not reach the output.
"""
from __future__ import annotations

import re
from typing import Collection

from msgspec import Struct, field

from cudnn_setup.probing.answer_values import Fields, shown
from cudnn_setup.report import FAIL, PASS, SKIP, WARN

WHAT = "the GPU probe's answer"
STATUSES = (PASS, WARN, FAIL, SKIP)
PHASES = ("device", "load", "graph", "plan", "execute")  # where the time went, by name
MAX_STEPS = 64
MAX_MAPPED = 16  # libcudnn* files kept per step
PATH_LIMIT = 4096
_LIB = re.compile(r"^lib[\w]{1,64}\Z")


def seconds(answer: Fields, key: str) -> float | None:
    return answer.number(key, 0, 1e6)


def timings(answer: Fields) -> dict[str, float]:
    """Where a step's (or the probe's) time went, by phase: known names, bounded numbers."""
    return {k: v for k, v in ((k, seconds(answer, k)) for k in PHASES) if v is not None}


def _status(value: object) -> str | None:
    return value if isinstance(value, str) and value in STATUSES else None


def _said(answer: Fields, key: str, limit: int) -> str | None:
    """A string the child sent, bounded for a person to read (with an ellipsis where cut)."""
    value = answer.raw(key)
    return shown(value, limit) if isinstance(value, str) else None


class Engine(Struct, frozen=True):
    """The engine a graph step ran: cuDNN's global index and its behaviour notes."""

    global_index: int | None = None
    runtime_compiled: bool | None = None
    tensor_core: bool | None = None
    down_converts: bool | None = None

    @classmethod
    def read(cls, answer: Fields) -> Engine:
        return cls(answer.integer("global_index", 0, 1 << 31), answer.flag("runtime_compiled"),
                   answer.flag("tensor_core"), answer.flag("down_converts"))

    def to_dict(self) -> dict:
        return {"global_index": self.global_index, "runtime_compiled": self.runtime_compiled,
                "tensor_core": self.tensor_core, "down_converts": self.down_converts}


class GpuStep(Struct, frozen=True):
    """One step the probe ran: `status` one of pass, warn, fail, skip (anything else a child
    says is a fail); `stage` where it got to; `blamed` the sub-library a failure points to."""

    name: str
    status: str
    sublibraries: tuple[str, ...] = ()
    stage: str | None = None
    reason: str | None = None
    blamed: str | None = None
    max_rel_error: float | None = None
    engine: Engine | None = None
    mapped: tuple[str, ...] = ()
    seconds: float | None = None
    plan: str | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def read(cls, answer: Fields, names: Collection[str]) -> GpuStep | None:
        """None for a step not named as the probe names its steps."""
        name = answer.raw("name")
        if not isinstance(name, str) or name not in names:
            return None
        engine = answer.fields("engine") if isinstance(answer.raw("engine"), dict) else None
        return cls(name=name, status=_status(answer.raw("status")) or FAIL,
                   sublibraries=tuple(s for s in answer.strings("sublibraries", 70, 8)
                                      if _LIB.match(s)),
                   stage=_said(answer, "stage", 20), reason=_said(answer, "reason", 300),
                   blamed=_said(answer, "blamed", 120),
                   max_rel_error=answer.number("max_rel_error"),
                   engine=Engine.read(engine) if engine is not None else None,
                   mapped=tuple(answer.strings("mapped", PATH_LIMIT, 4000)[:MAX_MAPPED]),
                   seconds=seconds(answer, "seconds"), plan=_said(answer, "plan", 120),
                   timings=timings(answer.fields("timings")))

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "sublibraries": list(self.sublibraries),
                "stage": self.stage, "reason": self.reason, "blamed": self.blamed,
                "max_rel_error": self.max_rel_error,
                "engine": self.engine.to_dict() if self.engine is not None else None,
                "mapped": list(self.mapped), "seconds": self.seconds, "plan": self.plan,
                "timings": self.timings}


class GpuAnswer(Struct, frozen=True):
    """What the probe said of the GPU (device 0) and each step. `status` as the child said it
    (None for anything but pass, warn, fail, skip); `driver_version` is cuDriverGetVersion()."""

    status: str | None = None
    reason: str | None = None
    gpu: str | None = None
    compute_capability: str | None = None
    gpu_count: int | None = None
    driver_version: int | None = None
    cudnn_version_number: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    steps: tuple[GpuStep, ...] = ()
    kept_plan_set_aside: str | None = None  # a kept plan that failed and was compiled again

    @classmethod
    def read(cls, data: object, names: Collection[str]) -> GpuAnswer:
        """The answer's fields, each checked and bounded; steps named in `names` only."""
        answer = Fields(data, WHAT)
        steps = (GpuStep.read(s, names) for s in answer.items("steps", MAX_STEPS))
        return cls(status=_status(answer.raw("status")),
                   reason=answer.text("reason", 500), gpu=answer.text("gpu", 200),
                   compute_capability=answer.text("compute_capability", 16),
                   gpu_count=answer.integer("gpu_count", 0, 4096),
                   driver_version=answer.integer("driver_version", 0, 10**7),
                   cudnn_version_number=answer.integer("cudnn_version_number", 0, 10**7),
                   timings=timings(answer.fields("timings")),
                   steps=tuple(s for s in steps if s is not None),
                   kept_plan_set_aside=answer.text("kept_plan_set_aside", 200))

    def to_dict(self) -> dict:
        """The gpu check's `data`, as docs/json.md describes it."""
        return {"status": self.status, "reason": self.reason, "gpu": self.gpu,
                "compute_capability": self.compute_capability, "gpu_count": self.gpu_count,
                "driver_version": self.driver_version,
                "cudnn_version_number": self.cudnn_version_number, "timings": self.timings,
                "steps": [s.to_dict() for s in self.steps],
                "kept_plan_set_aside": self.kept_plan_set_aside}


def _dims(value: object) -> tuple[int, ...]:
    """A tensor's shape as the probe sent it: up to 8 whole numbers, else nothing."""
    if not isinstance(value, list) or len(value) > 8:
        return ()
    return tuple(v for v in value if type(v) is int and 0 <= v < 1 << 31)


class Algorithm(Struct, frozen=True):
    """One forward algorithm cuDNN timed (`--bench`): its name, time and workspace."""

    algo: str | None = None
    ms: float | None = None
    workspace_bytes: int | None = None

    @classmethod
    def read(cls, answer: Fields) -> Algorithm:
        return cls(answer.text("algo", 80), answer.number("ms", 0, 1e9),
                   answer.integer("workspace_bytes", 0, 1 << 62))

    def to_dict(self) -> dict:
        return {"algo": self.algo, "ms": self.ms, "workspace_bytes": self.workspace_bytes}


class BenchLayer(Struct, frozen=True):
    """One convolution layer of the benchmark: its shapes and the algorithms, fastest first."""

    input: tuple[int, ...] = ()
    filter: tuple[int, ...] = ()
    output: tuple[int, ...] = ()
    algorithms: tuple[Algorithm, ...] = ()
    fastest: Algorithm | None = None

    @classmethod
    def read(cls, answer: Fields) -> BenchLayer:
        fastest = answer.fields("fastest")
        return cls(_dims(answer.raw("input")), _dims(answer.raw("filter")),
                   _dims(answer.raw("output")),
                   tuple(Algorithm.read(a) for a in answer.items("algorithms", 16)),
                   Algorithm.read(fastest) if fastest else None)

    def to_dict(self) -> dict:
        return {"input": list(self.input), "filter": list(self.filter),
                "output": list(self.output), "algorithms": [a.to_dict() for a in self.algorithms],
                "fastest": self.fastest.to_dict() if self.fastest is not None else None}


class BenchAnswer(Struct, frozen=True):
    """The probe's answer in `--bench` mode: the GPU as in GpuAnswer, and each layer timed."""

    gpu: GpuAnswer
    layers: dict[str, BenchLayer] = field(default_factory=dict)

    @classmethod
    def read(cls, data: object) -> BenchAnswer:
        answer = Fields(data, "the GPU benchmark's answer")
        return cls(GpuAnswer.read(data, ()), {name[:100]: BenchLayer.read(layer) for name, layer
                                              in answer.fields("layers").entries(64)})

    def to_dict(self) -> dict:
        """The cudnn-algorithms check's `data`."""
        out = self.gpu.to_dict()
        del out["steps"]  # the benchmark runs none
        out["layers"] = {name: layer.to_dict() for name, layer in self.layers.items()}
        return out
