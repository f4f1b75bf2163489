#!/usr/bin/env python3
"""test_ch03.py: handfused.ch03's ModelNew against PyTorch's Model (KernelBench level 2 #79).

    python3 python/tests/test_ch03.py      (make torch-test; make test runs it too)

Output lines, exit status and the run without PyTorch or a GPU (one SKIP line after the
library's own shape checks) are _checks.py's, as for every chapter. On a GPU, beside the checks
every chapter's test makes there (parameters after a seed, a side stream, 20 SGD steps against
Model in fp32, torch.compile, bad inputs, python/README.md's example): y of both forwards and dx,
dw, the conv's bias and the multiplier's gradient against Model in float64 on the smallest input
the kernels take (3 x 3 x 4: two conv outputs a channel), batch 1 with odd and prime extents
(x's size not a multiple of 4 floats), a sample too large for a cluster, tied multipliers and
the KernelBench shape; and the library's answer to a pointer that is not 16-byte aligned (an
error code and its message, the process going on).
Tolerances are the chapter's (problem.cu): an output within 1e-5 relative L2 and 1e-4 of the
float64 reference at every element; a gradient element, a sum, within 1e-5 (TOL_SUM) of the sum
of its terms' magnitudes. The channel max's decision: where the float64 top two channels lie
within 1e-4 of each other, or the winner's normalised value within 1e-4 of a clamp bound,
float32 may decide the other way, and the gradient jumps there; g is zero at those positions,
so that every gradient is a continuous function of the inputs (the chapter's own checks bound
what such ambiguous positions could move instead: reference.cu).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checks  # noqa: E402 (after the path)
from _checks import (bad_inputs, both_forwards, check, compile_same, each_shape,  # noqa: E402
                     expect_error, finds_planted, float64_model, guarded, _lib, library_shapes,
                     out_close, problem_model, readme_example, same_on_side_stream, same_parameters,
                     same_seed, sgd_compare, sgd_data, still_runs, sum_close)

ARGS = (3, 16, 3, (16, 1, 1, 1), -1.0, 1.0)  # KernelBench's get_init_inputs() for #79


def library_checks():
    """What runs without PyTorch and without a GPU: ch03_check_shape's verdicts and messages,
    the workspace's size, and a missing library's message."""
    lib = library_shapes(3, ((1, 3, 3, 3, 4), (1, 3, 5, 7, 11), (128, 3, 16, 32, 32),
                             (65535, 3, 3, 3, 4)),
                         (((1, 4, 5, 5, 5), "3 channels"), ((0, 3, 5, 5, 5), "at least 1"),
                          ((1, 3, 2, 5, 5), "at least 3"), ((1, 3, 5, 5, 2), "at least 3"),
                          ((1, 3, 3, 3, 3), "more than one"), ((65536, 3, 3, 3, 4), "65535"),
                          ((512, 3, 66, 66, 66), "2^31")))
    if lib is None:
        return
    # the largest piece: our dw's partials, 1296 a block of 512 positions of a sample
    size = lib.ch03_workspace_bytes(128, 16, 32, 32)
    least = 4 * 1296 * 128 * ((14 * 30 * 30 + 511) // 512)
    check(size >= least, "ch03_workspace_bytes(128 x 3 x 16 x 32 x 32) = %d (dw's partials "
          "alone: %d)" % (size, least))
    # a NULL or misaligned x (the first pointer: the others are never read, nor the device
    # touched): an error code and its message, never an exit
    fake = [0x100000 + 0x100 * i for i in range(15)]
    calls = (("ch03_forward", 6), ("ch03_train_forward", 10), ("ch03_backward", 15))
    for x, words in ((0x100004, "x is not 16-byte aligned"), (None, "x is NULL")):
        for name, count in calls:
            code = getattr(lib, name)(x, *fake[1:count], 1, 5, 7, 11, None)
            err = lib.ch03_last_error().decode()
            check(code == _lib.EINVAL and words in err, "%s with x at %s: code %d: %s"
                  % (name, "NULL" if x is None else hex(x), code, err))


def gpu_checks(torch, ch03):
    import torch.nn.functional as F
    Model = problem_model(3)  # the benchmark's Model for #79, as data/kernelbench.py writes it

    dev = torch.device("cuda")
    versions = ch03.versions()
    check(versions.startswith("forward v"), "this GPU runs: %s" % versions)

    same_parameters(Model, ch03.ModelNew, ARGS)

    # ---- the output and every gradient against float64
    def grads_case(shape, seed):
        tie = shape == (2, 3, 6, 9, 10)
        n, _, d, h, w = shape
        torch.manual_seed(seed)
        new = ch03.ModelNew(*ARGS).to(dev)
        if tie:  # two channels with one factor: wherever both clamp at 1, their products tie
            with torch.no_grad():
                new.multiplier[3] = new.multiplier[7] = 3.0
        ref, x, x64 = float64_model(Model, ARGS, new, shape)
        y64 = ref(x64)
        m = ref.multiplier.detach().view(1, 16, 1, 1, 1)
        with torch.no_grad():
            c64 = ref.conv(x64)
            a = c64 * m
            var, mu = torch.var_mean(a, dim=(2, 3, 4), keepdim=True, unbiased=False)
            rstd = 1 / torch.sqrt(var + 1e-5)
            xh = (a - mu) * rstd
            t = xh.clamp(-1, 1)
            top = torch.topk(t * m, 2, dim=1)
            win = top.indices[:, :1]
            xw = xh.gather(1, win)
            amb = (((top.values[:, 0] - top.values[:, 1]) < 1e-4) |
                   ((xw[:, 0].abs() - 1).abs() < 1e-4))
            inside = (xw.abs() < 1).double().mean().item()
        g64 = torch.randn(y64.shape, device=dev, dtype=torch.float64)
        g64[amb] = 0
        y64.backward(g64)
        tag = "%dx3x%dx%dx%d%s" % (n, d, h, w, ", m[3] = m[7]" if tie else "")
        # both sides of the clamp among the winners (a tiny sample may have one side alone)
        check((0 < inside < 1 or amb.numel() < 100) and amb.double().mean().item() < 0.5,
              "%s: %.0f%% of the winners inside the clamp, %d of %d positions ambiguous (g = 0 "
              "there)" % (tag, 100 * inside, int(amb.sum()), amb.numel()))
        if tie:
            check(int(amb.sum()) > 0, "%s: the tied factors tie the channel max somewhere" % tag)
        xg, y = both_forwards(tag, new, x, y64, versions.split(",")[0],
                              "the same; the backward recomputes")
        # the training forward the backward runs first: its y, from the library conv's c
        out_close("%s: y, the backward's training forward (the library conv, then b5's or b2's "
                  "epilogue)" % tag, ch03.train_forward(x, new.conv.weight, new.conv.bias,
                                                        new.multiplier)[1], y64.detach())
        y.backward(g64.float())
        # the magnitudes of each gradient's terms, in float64: dxh = g m at the winner inside
        # the clamp; da = rstd (dxh - mean dxh - xh mean(dxh xh)), each term by its magnitude
        with torch.no_grad():
            du = torch.zeros_like(c64).scatter_(1, win, g64.unsqueeze(1))
            dxh = du * m * (xh.abs() < 1)

            def mean_abs(v):
                return v.abs().mean(dim=(2, 3, 4), keepdim=True)

            da_abs = rstd * (dxh.abs() + mean_abs(dxh) + xh.abs() * mean_abs(dxh * xh))
            dc_abs = m.abs() * da_abs
            W = ref.conv.weight
            dm_abs = ((c64.abs() * da_abs).sum(dim=(0, 2, 3, 4)) +
                      (du * t).abs().sum(dim=(0, 2, 3, 4))).view(16, 1, 1, 1)
            sums = (("dx", xg.grad, x64.grad, F.conv_transpose3d(dc_abs, W.abs())),
                    ("dw", new.conv.weight.grad, W.grad,
                     torch.nn.grad.conv3d_weight(x64.detach().abs(), W.shape, dc_abs)),
                    ("dbias (conv)", new.conv.bias.grad, ref.conv.bias.grad,
                     dc_abs.sum(dim=(0, 2, 3, 4))),
                    ("dm (the multiplier, both uses)", new.multiplier.grad,
                     ref.multiplier.grad, dm_abs))
        for what, got, want, scale in sums:
            sum_close("%s: %s" % (tag, what), got, want, scale)
        if shape == (2, 3, 7, 11, 13):  # the check can fail: one dm off by 1e-4 of its sum
            finds_planted(tag, "dm with one channel", new.multiplier.grad, ref.multiplier.grad,
                          dm_abs, 5)

    # the smallest input (S = 2), batch 1 with odd and prime extents (x of 1155 and 6006 floats:
    # not whole float4s), a tie, a sample of 30720 positions (too large for v10's cluster: b2),
    # the KernelBench shape
    each_shape(grads_case, ((1, 3, 3, 3, 4), (1, 3, 3, 4, 5), (1, 3, 5, 7, 11),
                            (2, 3, 7, 11, 13), (3, 3, 6, 9, 10), (2, 3, 6, 9, 10),
                            (1, 3, 32, 34, 34), (128, 3, 16, 32, 32)))

    # ---- a pointer not 16-byte aligned, handed to the C function itself: an error code and its
    # message, and the process goes on
    guarded("a misaligned pointer", misaligned, torch, ch03, dev)

    # ---- a side stream: the same results as the default stream's (dx within cuDNN's noise)
    def side_stream():
        torch.manual_seed(3)
        new = ch03.ModelNew(*ARGS).to(dev)
        x = torch.rand((3, 3, 6, 9, 10), device=dev)
        same_on_side_stream(new, x, torch.randn((3, 4, 7, 8), device=dev), "dw, dbias, dm")

    guarded("a side stream", side_stream)
    # ---- 20 steps of SGD, ModelNew and Model (fp32) from the same seed; the instance norm
    # removes any per-channel constant, so the conv's bias has a gradient of zero up to
    # rounding (reference.cu) and stays where it started in both
    def sgd():
        ref, new = same_seed(Model, ch03.ModelNew, ARGS, 7)
        sgd_compare(ref, new, sgd_data((2, 3, 6, 7, 8), (2, 4, 5, 6), 20), 0.1,
                    fixed=("conv.bias",))

    guarded("SGD", sgd)
    # ---- torch.compile: a graph break around the library call, the same results as eager
    torch.manual_seed(4)
    compile_same(ch03.ModelNew(*ARGS).to(dev), torch.rand((2, 3, 6, 9, 10), device=dev))

    # ---- bad inputs, each refused with its message; then a valid input still runs
    guarded("the bad inputs", bad_input_checks, torch, ch03, dev)

    # ---- python/README.md's chapter-3 example, as written, from the repository's root
    readme_example(3, "chapter-3 example")


def bad_input_checks(torch, ch03, dev):
    """every chapter's bad inputs (_checks.bad_inputs), then chapter 3's own limits: one conv
    output a channel, the batch, 2^31 elements, the constructor's geometry"""
    torch.manual_seed(0)
    new = ch03.ModelNew(*ARGS).to(dev)
    ok_x = torch.rand((1, 3, 4, 5, 6), device=dev)
    bad_inputs(new, ok_x, torch.rand((1, 4, 4, 5, 6), device=dev), "3 channels",
               torch.rand((1, 3, 2, 5, 6), device=dev), "at least 3")
    expect_error("one conv output a channel", lambda: new(torch.rand((1, 3, 3, 3, 3),
                                                                     device=dev)),
                 ValueError, "more than one")
    expect_error("a batch of 65536", lambda: new(torch.rand((65536, 3, 3, 3, 4), device=dev)),
                 ValueError, "65535")
    big = torch.empty((512, 3, 66, 66, 66), device=dev)  # 1.8 GB; the conv output past 2^31
    expect_error("a conv output past 2^31 elements", lambda: new(big), ValueError, "2^31")
    del big
    expect_error("kernel_size 5", lambda: ch03.ModelNew(3, 16, 5, (16, 1, 1, 1), -1.0, 1.0),
                 ValueError, "kernel_size=3")
    expect_error("a clamp to [-2, 2]", lambda: ch03.ModelNew(3, 16, 3, (16, 1, 1, 1), -2.0,
                                                              2.0),
                 ValueError, "[-1, 1]")
    expect_error("a multiplier of 1 element", lambda: ch03.ModelNew(3, 16, 3, (1, 1, 1, 1),
                                                                    -1.0, 1.0),
                 ValueError, "multiplier_shape")
    still_runs(new, ok_x, (1, 2, 3, 4))


def misaligned(torch, ch03, dev):
    """ch03_train_forward and ch03_forward on an x 4 bytes into a buffer, then on a workspace
    likewise: CAPI_EINVAL (1) naming the pointer; then the same call aligned runs"""
    lib = ch03._library()
    torch.manual_seed(1)
    new = ch03.ModelNew(*ARGS).to(dev)
    n, d, h, w = 1, 5, 7, 11
    shape = (n, 3, d, h, w)  # 1155 floats
    buf = torch.rand(1155 + 4, device=dev)
    x_off = buf[1:1 + 1155].view(shape)  # data_ptr 4 bytes past a 512-byte aligned block
    x_ok = buf[4:4 + 1155].view(shape)   # 16 bytes past it: aligned
    c = torch.empty((n, 16, d - 2, h - 2, w - 2), device=dev)
    y = torch.empty((n, d - 2, h - 2, w - 2), device=dev)
    mean, rstd = torch.empty((n, 16), device=dev), torch.empty((n, 16), device=dev)
    win = torch.empty(y.shape, device=dev, dtype=torch.uint8)
    ws = torch.empty(lib.ch03_workspace_bytes(n, d, h, w) + 16, device=dev, dtype=torch.uint8)
    params = [p.data_ptr() for p in (new.conv.weight, new.conv.bias, new.multiplier)]
    st = torch.cuda.current_stream(dev).cuda_stream

    def train(x, workspace):
        return lib.ch03_train_forward(x.data_ptr(), *params, c.data_ptr(), y.data_ptr(),
                                      mean.data_ptr(), rstd.data_ptr(), win.data_ptr(),
                                      workspace, n, d, h, w, st)

    def infer(x, workspace):
        return lib.ch03_forward(x.data_ptr(), *params, y.data_ptr(), workspace, n, d, h, w, st)

    for name, fn in (("ch03_train_forward", train), ("ch03_forward", infer)):
        for what, x, workspace in (("x", x_off, ws.data_ptr()), ("workspace", x_ok,
                                                                 ws.data_ptr() + 4)):
            code = fn(x, workspace)
            msg = lib.ch03_last_error().decode()
            check(code == _lib.EINVAL and "%s is not 16-byte aligned" % what in msg,
                  "%s with %s 4 bytes off 16: code %d: %s" % (name, what, code, msg))
        code = fn(x_ok, ws.data_ptr())
        torch.cuda.synchronize()
        check(code == 0 and bool(torch.isfinite(y).all()), "%s with every pointer aligned "
              "(x 16 bytes into its buffer): code %d, y finite" % (name, code))


if __name__ == "__main__":
    _checks.main(3, library_checks, gpu_checks)
