"""The answer of Theano's test graphs (probes/theano_graph.py), read into types.

Every field is taken through the one reader of an answer (probing/answer_values.Fields); the
theano check's JSON is written from TheanoAnswer (`to_dict`), never from the child's own object.
What the check cannot judge without (the version, device, results) it reads again with the
`need_` getters (checks/theano_check.TheanoGraphs), so a missing one fails the check by name.
"""
from __future__ import annotations

from msgspec import Struct

from cudnn_setup.probing.answer_values import Fields

WHAT = "the answer of Theano's test graphs"
PATH_LIMIT = 4096
OPS = 256  # op names kept from one graph


class DnnConfig(Struct, frozen=True):
    """Theano's [dnn] section as Theano read it."""

    enabled: str | None = None
    include_path: str | None = None
    library_path: str | None = None

    def to_dict(self) -> dict:
        return {"enabled": self.enabled, "include_path": self.include_path,
                "library_path": self.library_path}


class TheanoAnswer(Struct, frozen=True):
    """Everything the probe said, each field as the type it claims or None (an answer with
    `import_error` has little else)."""

    python: str | None = None
    numpy: str | None = None
    import_error: str | None = None
    theano_version: str | None = None
    device: str | None = None
    floatX: str | None = None
    optimizer_including: str | None = None
    optimizer_excluding: str | None = None
    dnn: DnnConfig | None = None
    exp_ops: tuple[str, ...] = ()
    exp_ok: bool | None = None
    conv_ops: tuple[str, ...] = ()
    conv_shape: tuple[int, ...] = ()
    conv_op: str | None = None
    uses_cudnn: bool | None = None
    dnn_reason: str | None = None
    seconds: float | None = None

    @classmethod
    def read(cls, answer: Fields) -> TheanoAnswer:
        dnn = answer.fields("dnn") if answer.has("dnn") else None
        shape = answer.raw("conv_shape")
        return cls(
            python=answer.text("python", 40), numpy=answer.text("numpy", 50),
            import_error=answer.nonempty("import_error", 1000),
            theano_version=answer.text("theano_version", 100), device=answer.text("device", 100),
            floatX=answer.text("floatX", 20),
            optimizer_including=answer.text("optimizer_including", 10000),
            optimizer_excluding=answer.text("optimizer_excluding", 10000),
            dnn=DnnConfig(dnn.text("enabled", 20), dnn.text("include_path", PATH_LIMIT),
                          dnn.text("library_path", PATH_LIMIT)) if dnn is not None else None,
            exp_ops=tuple(answer.strings("exp_ops", 100, OPS)), exp_ok=answer.flag("exp_ok"),
            conv_ops=tuple(answer.strings("conv_ops", 100, OPS)),
            conv_shape=tuple(n for n in shape[:8] if type(n) is int) if isinstance(shape, list)
            else (),
            conv_op=answer.text("conv_op", 100), uses_cudnn=answer.flag("uses_cudnn"),
            dnn_reason=answer.nonempty("dnn_reason", 1000),
            seconds=answer.number("seconds", 0, 1e6))

    def to_dict(self) -> dict:
        """The theano check's `data` (with the check's own config_files, theano_flags, reason)."""
        return {"python": self.python, "numpy": self.numpy, "import_error": self.import_error,
                "theano_version": self.theano_version, "device": self.device,
                "floatX": self.floatX, "optimizer_including": self.optimizer_including,
                "optimizer_excluding": self.optimizer_excluding,
                "dnn": self.dnn.to_dict() if self.dnn is not None else None,
                "exp_ops": list(self.exp_ops), "exp_ok": self.exp_ok,
                "conv_ops": list(self.conv_ops), "conv_shape": list(self.conv_shape),
                "conv_op": self.conv_op, "uses_cudnn": self.uses_cudnn,
                "dnn_reason": self.dnn_reason, "seconds": self.seconds}
