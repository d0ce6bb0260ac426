#!/usr/bin/env python3
"""PyTorch's own cuDNN paths against one cuDNN directory: what a real client does with those files.

    LD_LIBRARY_PATH=DIR LD_PRELOAD=DIR/libcudnn….so.9:… python damage-corpus-torch.py DIR [WORKLOAD…]

Workloads (each compared with the same computation on the CPU): conv_fwd_fp32,
conv_bwd_fp32, conv_fp16_benchmark (cudnn.benchmark on), batchnorm, lstm, sdpa_cudnn
(scaled_dot_product_attention restricted to the cuDNN backend). After each, every libcudnn*
file mapped into the process (/proc/self/maps) must be under DIR: a workload that passed with
another copy mapped is `foreign`, not `pass`.

Prints one JSON line per workload as it finishes ({"workload", "status", "error", "mapped"}),
so a caller whose child died knows which workload killed it. Used by scripts/damage-corpus.py.
"""
import json
import os
import sys
import traceback

WORKLOADS = ("conv_fwd_fp32", "conv_bwd_fp32", "conv_fp16_benchmark", "batchnorm", "lstm",
             "sdpa_cudnn")


def mapped_cudnn():
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and os.path.basename(parts[5].strip()).startswith("libcudnn"):
                out.add(os.path.realpath(parts[5].strip()))
    return sorted(out)


def close(a, b, tol):
    import torch

    err = (a.double().cpu() - b.double().cpu()).abs().max().item()
    scale = max(1.0, b.double().abs().max().item())
    if not err / scale <= tol:
        raise AssertionError(f"differs from the CPU by {err / scale:.3g} (relative)")


def run(name):
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    torch.backends.cudnn.enabled = True
    torch.backends.cudnn.allow_tf32 = False
    cuda = torch.device("cuda")
    if name == "conv_fwd_fp32":
        x, w = torch.randn(4, 8, 16, 16), torch.randn(16, 8, 3, 3)
        close(F.conv2d(x.to(cuda), w.to(cuda), padding=1), F.conv2d(x, w, padding=1), 1e-4)
    elif name == "conv_bwd_fp32":
        x, w = torch.randn(4, 8, 16, 16, requires_grad=True), torch.randn(16, 8, 3, 3, requires_grad=True)
        xg, wg = x.detach().to(cuda).requires_grad_(), w.detach().to(cuda).requires_grad_()
        F.conv2d(x, w, padding=1).sum().backward()
        F.conv2d(xg, wg, padding=1).sum().backward()
        close(xg.grad, x.grad, 1e-4)
        close(wg.grad, w.grad, 1e-4)
    elif name == "conv_fp16_benchmark":
        torch.backends.cudnn.benchmark = True
        x, w = torch.randn(8, 16, 32, 32), torch.randn(32, 16, 3, 3) * 0.2
        got = F.conv2d(x.to(cuda).half(), w.to(cuda).half(), padding=1)
        close(got, F.conv2d(x.half().float(), w.half().float(), padding=1), 2e-2)
        torch.backends.cudnn.benchmark = False
    elif name == "batchnorm":
        x = torch.randn(8, 6, 10, 10)
        bn = torch.nn.BatchNorm2d(6)
        want = bn(x)
        got = bn.to(cuda)(x.to(cuda))
        close(got, want, 1e-4)
    elif name == "lstm":
        lstm = torch.nn.LSTM(10, 20, num_layers=2)
        x = torch.randn(5, 3, 10)
        want, _ = lstm(x)
        got, _ = lstm.to(cuda)(x.to(cuda))
        close(got, want, 1e-4)
    elif name == "sdpa_cudnn":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = (torch.randn(2, 4, 64, 64) for _ in range(3))
        want = F.scaled_dot_product_attention(q, k, v)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            got = F.scaled_dot_product_attention(*(t.to(cuda).half() for t in (q, k, v)))
        close(got, want, 2e-2)
    torch.cuda.synchronize()


def main(argv):
    where = os.path.realpath(argv[0])
    for name in argv[1:] or WORKLOADS:
        print(json.dumps({"workload": name, "status": "started"}), flush=True)
        entry = {"workload": name}
        try:
            run(name)
            entry["status"] = "pass"
        except Exception as exc:  # what PyTorch says is the data
            text = str(exc).strip().splitlines()
            entry.update(status="fail", error=f"{type(exc).__name__}: "
                         + (text[0][:300] if text else traceback.format_exc(limit=1)[-300:]))
        entry["mapped"] = mapped_cudnn()
        foreign = [p for p in entry["mapped"] if os.path.dirname(p) != where]
        if foreign:
            entry["foreign"] = foreign
            if entry["status"] == "pass":
                entry["status"] = "foreign"
        print(json.dumps(entry), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
