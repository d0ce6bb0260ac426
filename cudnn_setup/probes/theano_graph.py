"""Build the classic Theano graphs and report which ops Theano chose.

`python theano_graph.py` under the interpreter whose Theano is checked; THEANORC and
THEANO_FLAGS come from the environment. Prints one JSON line.
"""
import os
import sys
import time


def reason_dnn_unavailable(theano, out):
    try:
        from theano.gpuarray import dnn  # noqa: F401  needs pygpu
    except Exception as exc:  # ImportError, or pygpu's own errors
        return f"Theano's GPU backend is not available ({type(exc).__name__}: {exc})"
    try:
        from theano.gpuarray import pygpu_activated
        if not pygpu_activated:
            return f"the GPU backend is not active (device={theano.config.device})"
        present = dnn.dnn_present()
        if not present:
            return f"cuDNN not usable by Theano: {dnn.dnn_present.msg}"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def main() -> dict:
    started = time.time()
    out = {"python": sys.version.split()[0]}
    import numpy as np
    out["numpy"] = np.__version__
    try:
        import theano
    except Exception as exc:  # what the user's own `import theano` meets: the check's verdict
        out["import_error"] = f"{type(exc).__name__}: {exc}"[:1000]
        return out
    import theano.tensor as T
    from theano.tensor.nnet import conv2d, relu
    from theano.tensor.signal.pool import pool_2d

    cfg = theano.config
    out.update(theano_version=theano.__version__, device=cfg.device, floatX=cfg.floatX,
               optimizer_including=cfg.optimizer_including,
               optimizer_excluding=cfg.optimizer_excluding,
               dnn={"enabled": str(cfg.dnn.enabled), "include_path": cfg.dnn.include_path,
                    "library_path": cfg.dnn.library_path})
    vec = theano.shared(np.arange(10, dtype=cfg.floatX))
    f = theano.function([], T.exp(vec))
    ok_exp = np.allclose(f(), np.exp(np.arange(10, dtype=cfg.floatX)), rtol=1e-4)
    out["exp_ops"] = [type(n.op).__name__ for n in f.maker.fgraph.toposort()]
    out["exp_ok"] = bool(ok_exp)
    x = T.tensor4("x")
    rng = np.random.RandomState(0)
    w = theano.shared(rng.randn(8, 3, 5, 5).astype(cfg.floatX))
    net = pool_2d(relu(conv2d(x, w)), (2, 2), ignore_border=True)
    g = theano.function([x], net)
    ops = [type(n.op).__name__ for n in g.maker.fgraph.toposort()]
    data = rng.randn(2, 3, 24, 24).astype(cfg.floatX)
    result = g(data)
    out["conv_ops"] = ops
    out["conv_shape"] = list(result.shape)
    out["conv_op"] = next((o for o in ops if "Conv" in o or "Corr" in o), None)
    out["uses_cudnn"] = any(o.startswith("GpuDnn") for o in ops)
    out["dnn_reason"] = None if out["uses_cudnn"] else reason_dnn_unavailable(theano, out)
    out["seconds"] = round(time.time() - started, 2)
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # even under PYTHONSAFEPATH
    from answer import emit

    emit(main)
