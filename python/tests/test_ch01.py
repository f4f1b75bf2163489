#!/usr/bin/env python3
"""test_ch01.py: handfused.ch01's ModelNew against PyTorch's Model (KernelBench level 2 #58).

    python3 python/tests/test_ch01.py      (make torch-test; make test runs it too)

Prints PASS / FAIL / SKIP lines as the chapters' checks do (common/run-tests.sh counts them);
exits 1 if any check failed.
  - Without PyTorch or a GPU: the library's own shape checks through ctypes, and the message a
    missing library gives; then one SKIP line for the rest.
  - On a GPU: the parameters ModelNew creates after a seed, against Model's; the output (both
    forwards) and every gradient against Model in float64 on awkward shapes and the KernelBench
    shape; 20 steps of SGD from the same seed against Model in fp32; a side stream; torch.compile;
    bad inputs rejected with their messages; python/README.md's example, run as written.
Tolerances are the chapter's (problem.cu): an output within 1e-5 relative L2 and 1e-4 of the
float64 reference at every element; a gradient element, a sum, within 1e-5 of the sum of its
terms' magnitudes (the chapter's own bound is 1e-6; float32's unit roundoff is 2^-24).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checks  # noqa: E402 (after the path)
from _checks import (bad_inputs, both_forwards, check, compile_same, expect_error,  # noqa: E402
                     finds_planted, guarded, library_shapes, problem_model, readme_example,
                     same_on_side_stream, same_parameters, same_seed, sgd_compare, sgd_data,
                     still_runs, sum_close)


def library_checks():
    """What runs without PyTorch and without a GPU: ch01_check_shape's verdicts and messages,
    the workspace size, and a missing library's message."""
    lib = library_shapes(1, ((1, 3, 1, 1, 1), (128, 3, 16, 32, 32), (65535, 3, 1, 1, 1)),
                         (((1, 4, 2, 2, 2), "3 channels"), ((0, 3, 2, 2, 2), "at least 1"),
                          ((65536, 3, 1, 1, 1), "65535"), ((1, 3, 65536, 1, 1), "65535"),
                          ((8, 3, 129, 129, 129), "2^31")))
    if lib is None:
        return
    n = lib.ch01_workspace_floats(128, 16, 32, 32)
    check(n >= 16 * 81 * 64, "ch01_workspace_floats(128 x 3 x 16 x 32 x 32) = %d floats" % n)


def gpu_checks(torch, ch01):
    import torch.nn.functional as F

    # KernelBench's Model for #58 (data/kernelbench.py), with its tail after the conv apart
    class Model(problem_model(1)):
        def tail(self, c):
            z = torch.logsumexp(c, dim=1, keepdim=True)
            return torch.clamp(z * torch.sigmoid(z + 3) / 6 - self.bias, min=-1, max=1)

    ARGS = (3, 16, 3, 2, 1, (1, 1, 1, 1))
    dev = torch.device("cuda")

    # ---- the parameters, after the same seed
    same_parameters(Model, ch01.ModelNew, ARGS)

    # ---- the output and every gradient against float64
    def grads_case(shape, seed, b_value=0.1):
        n, _, d, h, w = shape
        torch.manual_seed(seed)
        new = ch01.ModelNew(*ARGS).to(dev)
        ref = Model(*ARGS).to(dev).double()
        x = torch.rand(shape, device=dev)
        cut = b_value is None
        if cut:
            # b = the median of z sigmoid(z + 3) / 6, minus 1: about half the outputs pass the
            # clamp's upper bound, so its gradient's zeros are checked beside the rest
            with torch.no_grad():
                ref.load_state_dict(new.state_dict())
                z = torch.logsumexp(ref.conv_transpose(x.double()), dim=1)
                b_value = (z * torch.sigmoid(z + 3) / 6).median().item() - 1
        with torch.no_grad():
            # inside the clamp's band: a b ~ N(0, 1) may clamp every output, and the gradients
            # would test the clamp alone
            new.bias.fill_(b_value)
        ref.load_state_dict(new.state_dict())
        x64 = x.double().requires_grad_()
        c64 = ref.conv_transpose(x64)
        c64.retain_grad()
        y64 = ref.tail(c64)
        with torch.no_grad():
            z = torch.logsumexp(c64, dim=1, keepdim=True)
            s = z * torch.sigmoid(z + 3) / 6 - ref.bias
            # where the float64 s lies within 1e-4 of a clamp bound, float32 may fall on the
            # other side, where the gradient jumps: g is zero there
            near = ((s.abs() - 1).abs() < 1e-4)
            inside = (s.abs() < 1).double().mean().item()
        g64 = torch.randn(y64.shape, device=dev, dtype=torch.float64)
        g64[near] = 0
        y64.backward(g64)
        tag = "%dx3x%dx%dx%d, b %.3g" % (n, d, h, w, b_value)
        if cut:
            check(0.2 < inside < 0.8, "%s: %.0f%% of the outputs inside the clamp's band, the "
                  "rest clamped" % (tag, 100 * inside))
        else:
            check(inside > 0, "%s: %.0f%% of the outputs inside the clamp's band (the gradients "
                  "are not the clamp's alone)" % (tag, 100 * inside))
        xg, y = both_forwards(tag, new, x, y64, "v8", "b3's conv, v7")
        y.backward(g64.float())
        # the magnitudes of each gradient's terms, in float64
        dc64 = c64.grad
        with torch.no_grad():
            W = ref.conv_transpose.weight
            dx_abs = F.conv3d(dc64.abs(), W.abs(), stride=2, padding=1)
            dbias_abs = dc64.abs().sum(dim=(0, 2, 3, 4))
            ds_abs = g64.abs().sum()
        Wa = W.detach().abs().requires_grad_()
        F.conv_transpose3d(x64.detach().abs(), Wa, stride=2, padding=1).backward(dc64.abs())
        sum_close("%s: dx" % tag, xg.grad, x64.grad, dx_abs)
        sum_close("%s: dw" % tag, new.conv_transpose.weight.grad, W.grad, Wa.grad)
        sum_close("%s: dbias (conv)" % tag, new.conv_transpose.bias.grad,
                  ref.conv_transpose.bias.grad, dbias_abs)
        sum_close("%s: db (the subtracted bias)" % tag, new.bias.grad, ref.bias.grad,
                  ds_abs.reshape(1, 1, 1, 1))
        if shape == (2, 3, 3, 7, 11):  # the check can fail: dw with one weight off by 1e-4 of its sum
            finds_planted(tag, "dw with one weight", new.conv_transpose.weight.grad, W.grad,
                          Wa.grad, 7)

    # b = 0.1 puts every output inside the band (z is near log 16); None: b chosen so that the
    # clamp cuts about half (grads_case)
    for i, (shape, b_value) in enumerate((((1, 3, 1, 1, 1), 0.1), ((1, 3, 2, 3, 5), 0.1),
                                          ((2, 3, 3, 7, 11), 0.1), ((3, 3, 5, 13, 17), 0.1),
                                          ((3, 3, 5, 13, 17), None), ((1, 3, 4, 16, 33), 0.1),
                                          ((2, 3, 7, 5, 64), 0.1), ((128, 3, 16, 32, 32), 0.1))):
        guarded("%s, b %s" % (shape, b_value), grads_case, shape, 100 + i, b_value)

    # ---- a side stream: the same results as the default stream's (dx within cuDNN's noise)
    def side_stream():
        torch.manual_seed(3)
        new = ch01.ModelNew(*ARGS).to(dev)
        x = torch.rand((2, 3, 5, 6, 7), device=dev)
        same_on_side_stream(new, x, torch.randn((2, 1, 9, 11, 13), device=dev), "dw, dbias, db")

    guarded("a side stream", side_stream)
    # ---- 20 steps of SGD, ModelNew and Model (fp32) from the same seed
    guarded("SGD", sgd_checks, torch, ch01, Model, ARGS)
    # ---- torch.compile: a graph break around the library call, the same results as eager
    torch.manual_seed(4)
    compile_same(ch01.ModelNew(*ARGS).to(dev), torch.rand((2, 3, 5, 6, 7), device=dev))

    # ---- bad inputs
    torch.manual_seed(0)
    new = ch01.ModelNew(*ARGS).to(dev)
    ok_x = torch.rand((1, 3, 4, 5, 6), device=dev)
    bad_inputs(new, ok_x, torch.rand((1, 4, 4, 5, 6), device=dev), "3 channels", None, None)
    expect_error("a batch of 65536", lambda: new(torch.rand((65536, 3, 1, 1, 1), device=dev)),
                 ValueError, "65535")
    big = torch.empty((8, 3, 129, 129, 129), device=dev)
    expect_error("a conv output past 2^31 elements", lambda: new(big), ValueError, "2^31")
    del big
    expect_error("stride 1", lambda: ch01.ModelNew(3, 16, 3, 1, 1, (1, 1, 1, 1)), ValueError,
                 "stride=2")
    expect_error("a bias of 16 elements", lambda: ch01.ModelNew(3, 16, 3, 2, 1, (16, 1, 1, 1)),
                 ValueError, "one element")
    still_runs(new, ok_x, (1, 1, 7, 9, 11))

    # ---- python/README.md's example, as written, from the repository's root
    readme_example(1)


def sgd_checks(torch, ch01, Model, ARGS):
    ref, new = same_seed(Model, ch01.ModelNew, ARGS, 7)
    with torch.no_grad():  # inside the clamp's band, for both
        ref.bias.fill_(0.1)
        new.bias.fill_(0.1)
    sgd_compare(ref, new, sgd_data((2, 3, 5, 6, 7), (2, 1, 9, 11, 13), 20), 0.1)


if __name__ == "__main__":
    _checks.main(1, library_checks, gpu_checks)
