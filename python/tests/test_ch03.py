#!/usr/bin/env python3
"""test_ch03.py: handfused.ch03's ModelNew against PyTorch's Model (KernelBench level 2 #79).

    python3 python/tests/test_ch03.py      (make torch-test; make test runs it too)

Prints PASS / FAIL / SKIP lines as the chapters' checks do (common/run-tests.sh counts them);
exits 1 if any check failed. The run, the printing and counting and the checks every chapter
makes (parameters, side stream, SGD, torch.compile, bad inputs) are _checks.py's.
  - Without PyTorch or a GPU: the library's own shape checks through ctypes, and the message a
    missing library gives; then one SKIP line for the rest.
  - On a GPU: the parameters ModelNew creates after a seed, against Model's; the output (both
    forwards) and every gradient (dx, dw, the conv's bias, the multiplier) against Model in
    float64 on awkward shapes (batch 1, odd and prime extents, a sample too large for a
    cluster, tied multipliers) and the KernelBench shape; 20 steps of SGD from the same seed
    against Model in fp32; a side stream; torch.compile; bad inputs rejected with their
    messages; python/README.md's example with chapter 3's ModelNew.
Tolerances are the chapter's (problem.cu): an output within 1e-5 relative L2 and 1e-4 of the
float64 reference at every element; a gradient element, a sum, within 1e-5 (TOL_SUM) of the sum
of its terms' magnitudes. The channel max's decision: where the float64 top two channels lie
within 1e-4 of each other, or the winner's normalised value within 1e-4 of a clamp bound,
float32 may decide the other way, and the gradient jumps there; g is zero at those positions,
so that every gradient is a continuous function of the inputs (the chapter's checks bound what
such ambiguous positions could move instead; reference.cu).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from handfused import _lib  # noqa: E402 (after the path)
import _checks as common  # noqa: E402 (after the path)

check, expect_error = common.check, common.expect_error
ARGS = (3, 16, 3, (16, 1, 1, 1), -1.0, 1.0)  # KernelBench's get_init_inputs() for #79


# ch03_check_shape's verdicts: None where it accepts the shape, else a word of its message
SHAPES = (((1, 3, 3, 3, 4), None), ((128, 3, 16, 32, 32), None), ((65535, 3, 3, 3, 4), None),
          ((1, 4, 5, 5, 5), "3 channels"), ((0, 3, 5, 5, 5), "at least 1"),
          ((1, 3, 2, 5, 5), "at least 3"), ((1, 3, 3, 3, 3), "more than one"),
          ((65536, 3, 3, 3, 4), "65535"), ((512, 3, 66, 66, 66), "2^31"))


def library_checks():
    """What runs without PyTorch and without a GPU: ch03_check_shape's verdicts and messages,
    the workspace's size, and a missing library's message."""
    lib = common.library_shapes(3, [shape for shape, word in SHAPES if word is None],
                                [(shape, word) for shape, word in SHAPES if word is not None])
    if lib is None:
        return
    # the largest piece: our dw's partials, 1296 a block of 512 positions of a sample
    size = lib.ch03_workspace_bytes(128, 16, 32, 32)
    least = 4 * 1296 * 128 * ((14 * 30 * 30 + 511) // 512)
    check(size >= least, "ch03_workspace_bytes(128 x 3 x 16 x 32 x 32) = %d (dw's partials "
          "alone: %d)" % (size, least))


def make_model(torch):
    import torch.nn as nn
    import torch.nn.functional as F

    class Model(nn.Module):
        """KernelBench's Model for #79, written from the problem's description; tail() is the
        part after the conv"""

        def __init__(self, in_channels, out_channels, kernel_size, multiplier_shape, clamp_min,
                     clamp_max):
            super().__init__()
            self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
            self.multiplier = nn.Parameter(torch.randn(multiplier_shape))
            self.instance_norm = nn.InstanceNorm3d(out_channels)
            self.clamp_min, self.clamp_max = clamp_min, clamp_max

        def forward(self, x):
            return self.tail(self.conv(x))

        def tail(self, c):
            t = torch.clamp(self.instance_norm(c * self.multiplier), self.clamp_min,
                            self.clamp_max)
            return torch.max(t * self.multiplier, dim=1)[0]

    return Model, F


def gpu_checks(torch, ch03):
    Model, F = make_model(torch)
    dev = torch.device("cuda")
    check(ch03.versions().startswith("forward v"), "this GPU runs: %s" % ch03.versions())

    # ---- the parameters, after the same seed: names, order, shapes, values
    common.same_parameters(Model, ch03.ModelNew, ARGS)

    for i, (shape, tie) in enumerate((((1, 3, 3, 4, 5), False), ((1, 3, 5, 7, 11), False),
                                      ((2, 3, 7, 11, 13), False), ((3, 3, 6, 9, 10), False),
                                      ((2, 3, 6, 9, 10), True), ((1, 3, 32, 34, 34), False),
                                      ((128, 3, 16, 32, 32), False))):
        common.guarded(str(shape), grads_case, torch, F, ch03, Model, dev, shape, 100 + i, tie)
    common.guarded("a side stream", side_stream, torch, ch03, dev)
    common.guarded("SGD", sgd_checks, ch03, Model)
    # ---- torch.compile: a graph break around the library call, the same results as eager
    torch.manual_seed(4)
    common.compile_same(ch03.ModelNew(*ARGS).to(dev), torch.rand((2, 3, 6, 9, 10), device=dev))
    bad_inputs(torch, ch03, dev)
    readme_example()


def readme_example():
    """python/README.md's example with the two changes its chapter-3 part names, run from the
    repository's root"""
    import re
    import subprocess
    readme = open(os.path.join(_lib.REPO, "python", "README.md"), encoding="utf-8").read()
    code = re.findall(r"```python\n(.*?)```", readme, re.S)[0]
    changes = (("from handfused.ch01 import ModelNew", "from handfused.ch03 import ModelNew"),
               ("ModelNew(3, 16, 3, 2, 1, (1, 1, 1, 1))",
                "ModelNew(3, 16, 3, (16, 1, 1, 1), -1.0, 1.0)"))
    if not check(all(a in code for a, _ in changes), "python/README.md's example holds the lines "
                 "its chapter-3 part changes"):
        return
    for a, b in changes:
        code = code.replace(a, b)
    run = subprocess.run([sys.executable, "-c", code], cwd=_lib.REPO, capture_output=True,
                         text=True)
    check(run.returncode == 0, "python/README.md's example with chapter 3's ModelNew runs (exit "
          "%d)%s" % (run.returncode, ": " + run.stderr.strip()[-300:] if run.returncode else ""))


def grads_case(torch, F, ch03, Model, dev, shape, seed, tie):
    n, _, d, h, w = shape
    torch.manual_seed(seed)
    new = ch03.ModelNew(*ARGS).to(dev)
    if tie:  # two channels with one factor: wherever both clamp at 1, their products tie
        with torch.no_grad():
            new.multiplier[3] = new.multiplier[7] = 3.0
    ref, x, x64 = common.float64_model(Model, ARGS, new, shape)
    c64 = ref.conv(x64)
    c64.retain_grad()
    y64 = ref.tail(c64)
    m = ref.multiplier.detach().view(1, 16, 1, 1, 1)
    with torch.no_grad():
        a = c64 * m
        var, mu = torch.var_mean(a, dim=(2, 3, 4), keepdim=True, unbiased=False)
        rstd = 1 / torch.sqrt(var + 1e-5)
        xh = (a - mu) * rstd
        t = xh.clamp(-1, 1)
        top = torch.topk(t * m, 2, dim=1)
        win = top.indices[:, :1]
        xw = xh.gather(1, win)
        amb = ((top.values[:, 0] - top.values[:, 1]) < 1e-4) | ((xw[:, 0].abs() - 1).abs() < 1e-4)
        inside = (xw.abs() < 1).double().mean().item()
    g64 = torch.randn(y64.shape, device=dev, dtype=torch.float64)
    g64[amb] = 0
    y64.backward(g64)
    tag = "%dx3x%dx%dx%d%s" % (n, d, h, w, ", m[3] = m[7]" if tie else "")
    # both sides of the clamp among the winners (a tiny sample may have one side alone)
    check((0 < inside < 1 or amb.numel() < 100) and amb.double().mean().item() < 0.5,
          "%s: %.0f%% of the winners inside the clamp, %d of %d positions ambiguous (g = 0 "
          "there)%s" % (tag, 100 * inside, int(amb.sum()), amb.numel(),
                        "" if not tie else ": the ties"))
    if tie:
        check(int(amb.sum()) > 0, "%s: the tied factors tie the channel max somewhere" % tag)
    inference, training = ch03.versions().split(", ")  # e.g. forward v18, training step b5
    xg, y = common.both_forwards(tag, new, x, y64, inference, training)
    y.backward(g64.float())
    # the magnitudes of each gradient's terms, in float64: dxh = g m at the winner inside the
    # clamp; da = rstd (dxh - mean dxh - xh mean(dxh xh)), each term taken by its magnitude
    with torch.no_grad():
        du = torch.zeros_like(c64).scatter_(1, win, g64.unsqueeze(1))
        dxh = du * m * (xh.abs() < 1)
        mean_abs = lambda v: v.abs().mean(dim=(2, 3, 4), keepdim=True)  # noqa: E731
        da_abs = rstd * (dxh.abs() + mean_abs(dxh) + xh.abs() * mean_abs(dxh * xh))
        dc_abs = m.abs() * da_abs
        W = ref.conv.weight
        bounds = {
            "dx": F.conv_transpose3d(dc_abs, W.abs()),
            "dw": torch.nn.grad.conv3d_weight(x64.detach().abs(), W.shape, dc_abs),
            "dbias (conv)": dc_abs.sum(dim=(0, 2, 3, 4)),
            "dm (the multiplier, both uses)": ((c64.abs() * da_abs).sum(dim=(0, 2, 3, 4)) +
                                               (du * t).abs().sum(dim=(0, 2, 3, 4))).view(16, 1, 1, 1),
        }
    got = {"dx": (xg.grad, x64.grad), "dw": (new.conv.weight.grad, W.grad),
           "dbias (conv)": (new.conv.bias.grad, ref.conv.bias.grad),
           "dm (the multiplier, both uses)": (new.multiplier.grad, ref.multiplier.grad)}
    for what, (mine, want) in got.items():
        common.sum_close("%s: %s" % (tag, what), mine, want, bounds[what])
    if shape == (2, 3, 7, 11, 13):  # the check can fail: dm with one channel off by 1e-4 of its sum
        common.finds_planted(tag, "dm with one channel", new.multiplier.grad, ref.multiplier.grad,
                             bounds["dm (the multiplier, both uses)"], 5)


def side_stream(torch, ch03, dev):
    """the same results on a side stream as on the default stream (dx within cuDNN's noise)"""
    torch.manual_seed(3)
    new = ch03.ModelNew(*ARGS).to(dev)
    x = torch.rand((3, 3, 6, 9, 10), device=dev)
    runs = common.step_on_two_streams(new, x, torch.randn((3, 4, 7, 8), device=dev))
    same = all(torch.equal(a, b) for k, (a, b) in enumerate(zip(*runs)) if k != 1)
    dx_rel = ((runs[0][1] - runs[1][1]).norm() / runs[0][1].norm()).item()
    check(same and dx_rel <= 1e-6, "a side stream: both forwards' y, dw, dbias, dm the same "
          "bits as on the default stream, dx within %.1e" % dx_rel)


def sgd_checks(ch03, Model):
    ref, new = common.same_seed(Model, ch03.ModelNew, ARGS, 7)
    # the instance norm removes any per-channel constant: conv.bias's gradient is zero up to
    # rounding (reference.cu), so the bias stays where it started in both
    common.sgd_compare(ref, new, common.sgd_data((2, 3, 6, 7, 8), (2, 4, 5, 6), 20), 0.1,
                       fixed=("conv.bias",))


def bad_inputs(torch, ch03, dev):
    new = ch03.ModelNew(*ARGS).to(dev)
    ok_x = torch.rand((1, 3, 4, 5, 6), device=dev)
    common.bad_inputs(new, ok_x, torch.rand((1, 4, 4, 5, 6), device=dev), "3 channels",
                      torch.rand((1, 3, 2, 5, 6), device=dev), "at least 3")
    expect_error("a batch of 65536", lambda: new(torch.rand((65536, 3, 3, 3, 4), device=dev)),
                 ValueError, "65535")
    expect_error("a conv output past 2^31 elements (an input of 1.8 GB)",
                 lambda: new(torch.empty((512, 3, 66, 66, 66), device=dev)), ValueError, "2^31")
    expect_error("kernel_size 5", lambda: ch03.ModelNew(3, 16, 5, (16, 1, 1, 1), -1.0, 1.0),
                 ValueError, "kernel_size=3")
    expect_error("clamp to [-2, 2]", lambda: ch03.ModelNew(3, 16, 3, (16, 1, 1, 1), -2.0, 2.0),
                 ValueError, "[-1, 1]")
    expect_error("a multiplier of 1 element", lambda: ch03.ModelNew(3, 16, 3, (1, 1, 1, 1),
                                                                    -1.0, 1.0),
                 ValueError, "multiplier_shape")
    common.still_runs(new, ok_x, (1, 2, 3, 4))

if __name__ == "__main__":
    common.main(3, library_checks, gpu_checks)
