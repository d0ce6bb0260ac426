"""Time a few training steps of a small conv net and of an MLP in Theano.

Run twice by `cudnn-setup bench`: with optimizer_including=cudnn and with
optimizer_excluding=cudnn (set through THEANO_FLAGS). Prints one JSON line.
"""
import os
import sys
import time

STEPS = 5


def sgd(theano, T, params, cost, lr=0.01):
    return [(p, p - lr * g) for p, g in zip(params, T.grad(cost, params))]


def timed(fn, args, steps):
    fn(*args)  # first call: compile caches, allocations
    start = time.perf_counter()
    for _ in range(steps):
        fn(*args)
    return (time.perf_counter() - start) / steps


def main(steps):
    import numpy as np
    import theano
    import theano.tensor as T
    from theano.tensor.nnet import conv2d, relu, softmax
    from theano.tensor.signal.pool import pool_2d

    fx = theano.config.floatX
    rng = np.random.RandomState(1)

    def shared(*shape):
        return theano.shared((rng.randn(*shape) * 0.05).astype(fx))

    x, y = T.tensor4("x"), T.ivector("y")
    w1, w2, w3 = shared(20, 3, 5, 5), shared(50, 20, 5, 5), shared(50 * 3 * 3, 10)
    h = pool_2d(conv2d(x, w1), (2, 2), ignore_border=True)
    h = relu(pool_2d(conv2d(h, w2), (2, 2), ignore_border=True))
    p = softmax(T.dot(h.flatten(2), w3))
    cost = -T.mean(T.log(p)[T.arange(y.shape[0]), y])
    t0 = time.perf_counter()
    conv_step = theano.function([x, y], cost, updates=sgd(theano, T, [w1, w2, w3], cost))
    conv_compile = time.perf_counter() - t0
    ops = [type(n.op).__name__ for n in conv_step.maker.fgraph.toposort()]
    data = (rng.randn(100, 3, 24, 24).astype(fx), rng.randint(0, 10, 100).astype("int32"))
    conv_s = timed(conv_step, data, steps)

    m = T.matrix("m")
    v1, v2, v3 = shared(784, 1000), shared(1000, 500), shared(500, 10)
    q = softmax(T.dot(T.tanh(T.dot(T.tanh(T.dot(m, v1)), v2)), v3))
    mcost = -T.mean(T.log(q)[T.arange(y.shape[0]), y])
    mlp_step = theano.function([m, y], mcost, updates=sgd(theano, T, [v1, v2, v3], mcost))
    mdata = (rng.randn(100, 784).astype(fx), data[1])
    mlp_s = timed(mlp_step, mdata, steps)
    return {
        "theano_version": theano.__version__, "device": theano.config.device,
        "optimizer_including": theano.config.optimizer_including,
        "optimizer_excluding": theano.config.optimizer_excluding,
        "conv_ops": sorted({o for o in ops if "Conv" in o or "Corr" in o}),
        "uses_cudnn": any(o.startswith("GpuDnn") for o in ops),
        "conv_step_s": conv_s, "conv_compile_s": conv_compile, "mlp_step_s": mlp_s,
        "steps": steps,
    }


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # even under PYTHONSAFEPATH
    from answer import emit

    emit(lambda: main(int(sys.argv[1]) if len(sys.argv) > 1 else STEPS))
