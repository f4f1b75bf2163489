#!/usr/bin/env python3
"""test_ch02.py: handfused.ch02 (KernelBench level 2 #43) against PyTorch's Model.

Run as python3 python/tests/test_ch02.py, or by make torch-test and make test; the PASS, FAIL
and SKIP lines and the exit status are _checks.py's. On any machine: the library's shape
limits and their messages through ctypes (no PyTorch needed). On a GPU, beside those: Model's
parameters after a seed; y from both forwards and dx, dw, dbias against Model in float64 (batch
1, the smallest volume, odd and prime extents, the KernelBench shape); a side stream; 20 SGD
steps beside Model in fp32; torch.compile; each bad input with its message.
Tolerances: an output within 1e-5 relative L2 and 1e-4 of the float64 reference at every element
(the chapter's, problem.cu); a gradient element, a sum, within 2e-5 of the sum of its terms'
magnitudes: float32's unit roundoff is 2^-24, a 3xTF32 product's error up to 1.25 x 2^-20
(common/tf32.cuh), and dc = dz exp(p - z) carries the forward's rounding of p and z (each from
a conv of 864 terms) into every term.
The max pooling's argmax is discontinuous: where two values of a window lie within float32's
rounding of each other, float32 and float64 may pick different elements, and the gradient moves
to another position. The reference's g is zero at every output whose windows hold such a pair
(the top two within 1e-5 of the window's largest sum of |terms|), so that both sides take the
same branch; the rest, the large majority (checked), carry a gradient.
precision="tf32" (on compute capability 9.0; skipped elsewhere, where its refusal is checked
instead): y of both forwards and dx, dw, dbias against Model in float64, each within twice the
error of Model in float32 with PyTorch's TF32 convs (cudnn.allow_tf32, its default) on the same
tensors, plus a float32 floor (_checks.tf32_close), in relative L2 and in the largest error (y's
absolute, a gradient's over its terms' magnitudes). The argmax is the float32 run's own on each
side: each gradient is compared with the float64 derivative on the branch its run took (each
window's maximum where that run's c has it, relu's mask where its y is positive), so that TF32's
larger rounding, which moves near ties, is measured and not a discontinuity. A planted error
fails the check; precision="bf16" raises ValueError.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checks  # noqa: E402 (after the path)
from _checks import (bad_inputs, both_forwards, check, compile_same, each_shape,  # noqa: E402
                     expect_error, finds_planted, float64_model, guarded, library_shapes,
                     problem_model, pytorch_tf32, same_parameters, same_seed, sgd_compare,
                     sgd_data, skip, step_on_two_streams, still_runs, sum_close, tf32_close,
                     tf32_entry, tf32_finds_planted, tf32_skip_reason)

N_WEIGHT = 64 * 32 * 27
TOL = 2e-5  # a gradient's, against the sum of its terms' magnitudes (the docstring says why)
# y's float32 floor in the TF32 checks (_checks.tf32_close), relative L2 and largest error: y is
# about 4.6, its float32 spacing 2^-21 = 4.8e-7: a few spacings, a few times float32's 2^-24
Y_FLOOR = (2e-7, 2e-6)


def library_checks():
    """What runs without PyTorch and without a GPU: ch02_check_shape's verdicts and messages,
    the workspace size (or, without a device, its message), and a missing library's message."""
    lib = library_shapes(2, ((1, 32, 2, 2, 2), (4, 32, 32, 128, 128), (65535, 32, 2, 2, 2),
                             (1, 32, 3, 5, 7)),
                         (((1, 31, 4, 4, 4), "32 channels"), ((0, 32, 4, 4, 4), "at least 1"),
                          ((1, 32, 1, 4, 4), "at least 2"), ((1, 32, 4, 4, 1), "at least 2"),
                          ((65536, 32, 2, 2, 2), "65535"), ((1, 32, 65536, 2, 2), "65535"),
                          ((8, 32, 64, 256, 256), "2^31"),
                          ((1, 32, 512, 512, 2), "pooled rows")))
    if lib is None:
        return
    err = lambda: lib.ch02_last_error().decode()  # noqa: E731
    fwd, bwd = lib.ch02_workspace_floats(0), lib.ch02_workspace_floats(1)
    if fwd == 0:  # no usable device: both 0, and the reason kept
        check(bwd == 0 and "SM count" in err(),
              "ch02_workspace_floats without a device: 0, %s" % err())
    else:
        check(fwd == N_WEIGHT and bwd > fwd + 64 * 64,
              "ch02_workspace_floats: forward %d, backward %d floats" % (fwd, bwd))
    # the TF32 functions: the sm_90a check before anything else (on this machine's GPU, or none)
    tf32_entry(lib, 2, "ch02_forward_tf32", [None] * 5 + [0, 1, 2, 2, 2, None])
    tf32_entry(lib, 2, "ch02_train_forward_tf32", [None] * 6 + [0, 1, 2, 2, 2, None])
    tf32_entry(lib, 2, "ch02_backward_tf32", [None] * 9 + [0, 1, 2, 2, 2, None])


def gpu_checks(torch, ch02):
    import torch.nn.functional as F

    # KernelBench's Model for #43 (data/kernelbench.py), with its tail after the conv apart
    class Model(problem_model(2)):
        def tail(self, c):
            return torch.relu(torch.logsumexp(self.max_pool(c), dim=1, keepdim=True))

    ARGS = (32, 64, 3, 1, 1)
    dev = torch.device("cuda")
    same_parameters(Model, ch02.ModelNew, ARGS)

    # ---- the output and every gradient against float64
    def windows(t, pd, ph, pw):
        """N x C x D x H x W -> N x C x pd x ph x pw x 8: each pooling window's 8 values"""
        n, ch = t.shape[:2]
        t = t[:, :, :2 * pd, :2 * ph, :2 * pw].reshape(n, ch, pd, 2, ph, 2, pw, 2)
        return t.permute(0, 1, 2, 4, 6, 3, 5, 7).reshape(n, ch, pd, ph, pw, 8)

    def grads_case(shape, seed):
        n, _, d, h, w = shape
        pd, ph, pw = d // 2, h // 2, w // 2
        torch.manual_seed(seed)
        new = ch02.ModelNew(*ARGS).to(dev)
        ref, x, x64 = float64_model(Model, ARGS, new, shape)
        c64 = ref.conv(x64)
        c64.retain_grad()
        y64 = ref.tail(c64)
        W, B = ref.conv.weight, ref.conv.bias
        with torch.no_grad():
            # each conv output's sum of |terms|, and the outputs whose windows are near a tie
            cabs = F.conv3d(x64.abs(), W.abs(), B.abs(), padding=1)
            top2 = windows(c64, pd, ph, pw).topk(2, dim=-1).values
            scale = windows(cabs, pd, ph, pw).amax(dim=-1)
            tie = ((top2[..., 0] - top2[..., 1]) <= 1e-5 * scale).any(dim=1, keepdim=True)
            # relu: where the float64 z lies within 1e-4 of 0, float32 may fall on the other side
            near0 = y64.abs() < 1e-4
            positive = (y64 > 0).double().mean().item()
        g64 = torch.randn(y64.shape, device=dev, dtype=torch.float64)
        g64[tie | near0] = 0
        zeroed = (g64 == 0).double().mean().item()
        y64.backward(g64)
        tag = "%dx32x%dx%dx%d" % (n, d, h, w)
        check(zeroed < 0.5 and positive > 0.5, "%s: g zero at %.1f%% of the outputs (a near "
              "tie in a window, or z near 0); %.0f%% of the outputs above 0"
              % (tag, 100 * zeroed, 100 * positive))
        xg, y = both_forwards(tag, new, x, y64, "v9", "v8's conv, v5")
        y.backward(g64.float())
        dc64 = c64.grad  # and the magnitudes of each gradient's terms, in float64
        with torch.no_grad():
            dx_abs = F.conv_transpose3d(dc64.abs(), W.abs(), padding=1)
            dbias_abs = dc64.abs().sum(dim=(0, 2, 3, 4))
        Wa = W.detach().abs().requires_grad_()
        F.conv3d(x64.detach().abs(), Wa, padding=1).backward(dc64.abs())
        sum_close("%s: dx" % tag, xg.grad, x64.grad, dx_abs, TOL)
        sum_close("%s: dw" % tag, new.conv.weight.grad, W.grad, Wa.grad, TOL)
        sum_close("%s: dbias" % tag, new.conv.bias.grad, B.grad, dbias_abs, TOL)
        if shape == (2, 32, 5, 7, 11):  # the check can fail: one weight off by 1e-4 of its sum
            finds_planted(tag, "dw with one weight", new.conv.weight.grad, W.grad, Wa.grad, 7,
                          TOL)

    # batch 1; the smallest volume; odd and prime extents (the pooling drops a last row, the
    # 2 x 4 x 32 tile cut at every edge); W a multiple of 4 (the 16-byte paths); KernelBench's
    each_shape(grads_case, ((1, 32, 2, 2, 2), (1, 32, 3, 5, 7), (2, 32, 5, 7, 11),
                            (3, 32, 4, 13, 17), (1, 32, 7, 9, 37), (2, 32, 6, 10, 64),
                            (4, 32, 32, 128, 128)))

    # a side stream: the same bits as on the default stream (every sum in a fixed order)
    def side_stream():
        torch.manual_seed(3)
        x = torch.rand((2, 32, 5, 6, 7), device=dev)
        runs = step_on_two_streams(ch02.ModelNew(*ARGS).to(dev), x,
                                   torch.randn((2, 1, 2, 3, 3), device=dev))
        check(all(torch.equal(a, b) for a, b in zip(*runs)), "a side stream: y (both "
              "forwards), dx, dw, dbias the same bits as on the default stream")

    guarded("a side stream", side_stream)
    guarded("SGD", sgd_checks, torch, ch02, Model, ARGS)
    torch.manual_seed(4)  # torch.compile: a graph break around the library call
    compile_same(ch02.ModelNew(*ARGS).to(dev), torch.rand((2, 32, 5, 6, 7), device=dev))

    # ---- bad inputs
    torch.manual_seed(0)
    new = ch02.ModelNew(*ARGS).to(dev)
    ok_x = torch.rand((1, 32, 4, 5, 6), device=dev)
    bad_inputs(new, ok_x, torch.rand((1, 31, 4, 5, 6), device=dev), "32 channels",
               torch.rand((1, 32, 1, 5, 6), device=dev), "at least 2")
    expect_error("a batch of 65536", lambda: new(torch.rand((65536, 32, 2, 2, 2), device=dev)),
                 ValueError, "65535")
    expect_error("65536 pooled rows", lambda: new(torch.rand((1, 32, 512, 512, 2), device=dev)),
                 ValueError, "pooled rows")
    expect_error("a conv output past 2^31 elements",  # x of 4.3 GB
                 lambda: new(torch.empty((8, 32, 64, 256, 256), device=dev)), ValueError, "2^31")
    expect_error("stride 2", lambda: ch02.ModelNew(32, 64, 3, 2, 1), ValueError, "stride=1")
    expect_error("16 input channels", lambda: ch02.ModelNew(16, 64, 3, 1, 1), ValueError,
                 "in_channels=32")
    expect_error("precision=\"bf16\"", lambda: ch02.ModelNew(*ARGS, precision="bf16"),
                 ValueError, "'fp32'", "'tf32'", "bf16")
    expect_error("precision given by position", lambda: ch02.ModelNew(*ARGS, "tf32"), TypeError,
                 "positional")
    still_runs(new, ok_x, (1, 1, 2, 2, 3))
    guarded("precision=\"tf32\"", tf32_checks, torch, ch02, Model, ARGS, windows)


def tf32_checks(torch, ch02, Model, ARGS, windows):
    """precision="tf32" against Model in float64, within twice PyTorch's TF32 error (the
    module's docstring); on a GPU that is not compute capability 9.0, its refusal"""
    import torch.nn.functional as F
    dev = torch.device("cuda")
    why = tf32_skip_reason(torch)
    if why is not None:
        skip("precision=\"tf32\" against PyTorch's TF32: %s" % why)
        torch.manual_seed(0)
        new = ch02.ModelNew(*ARGS, precision="tf32").to(dev)
        x = torch.rand((1, 32, 4, 5, 6), device=dev)
        with torch.no_grad():
            expect_error("precision=\"tf32\" on this GPU, under no_grad", lambda: new(x),
                         RuntimeError, "ch02_forward_tf32", "sm_90a")
        expect_error("precision=\"tf32\" on this GPU, with autograd",
                     lambda: new(x.requires_grad_()), RuntimeError, "ch02_train_forward_tf32",
                     "sm_90a")
        return

    def routed_dc(c64, route, y_route, g):
        """dL/dc in float64 on the branch a float32 run took: each window's maximum where that
        run's c (route) has it (the first, as MaxPool3d's), relu's mask where its y is
        positive"""
        n, ch, d, h, w = c64.shape
        pd, ph, pw = d // 2, h // 2, w // 2
        win = windows(c64, pd, ph, pw)
        idx = windows(route, pd, ph, pw).argmax(dim=-1, keepdim=True)
        s = torch.softmax(win.gather(-1, idx).squeeze(-1), dim=1)  # logsumexp's derivative
        dp = (g * (y_route > 0)) * s
        dwin = torch.zeros_like(win).scatter_(-1, idx, dp.unsqueeze(-1))
        dc = torch.zeros_like(c64)
        dc[:, :, :2 * pd, :2 * ph, :2 * pw] = dwin.reshape(n, ch, pd, ph, pw, 2, 2, 2).permute(
            0, 1, 2, 5, 3, 6, 4, 7).reshape(n, ch, 2 * pd, 2 * ph, 2 * pw)
        return dc

    def case(shape, seed):
        n, _, d, h, w = shape
        tag = "tf32 %dx32x%dx%dx%d" % (n, d, h, w)
        torch.manual_seed(seed)
        new = ch02.ModelNew(*ARGS, precision="tf32").to(dev)
        ref, x, x64 = float64_model(Model, ARGS, new, shape)
        peer = Model(*ARGS).to(dev)  # PyTorch in float32, TF32 convs
        peer.load_state_dict(new.state_dict())
        W, B = ref.conv.weight, ref.conv.bias
        with torch.no_grad():
            c64 = ref.conv(x64)
        c64.requires_grad_()
        y64 = ref.tail(c64)
        g64 = torch.randn(y64.shape, device=dev, dtype=torch.float64)
        y64.backward(g64)
        # ours: both forwards, then the training step
        with torch.no_grad():
            y_inf = new(x)
        xg = x.clone().requires_grad_()
        y = new(xg)
        c_ours = y.grad_fn.saved_tensors[2]  # the c the training forward kept (x, weight, c)
        y.backward(g64.float())
        # PyTorch's TF32 on the same tensors
        xp = x.clone().requires_grad_()
        with pytorch_tf32(torch):
            c_pt = peer.conv(xp)
            y_pt = peer.tail(c_pt)
            y_pt.backward(g64.float())
        with torch.no_grad():
            dc_self = routed_dc(c64.detach(), c64.detach(), y64.detach(), g64)
            agree = ((dc_self - c64.grad).abs().max() / c64.grad.abs().max()).item()
            dc_ours = routed_dc(c64.detach(), c_ours, y.detach(), g64)
            dc_pt = routed_dc(c64.detach(), c_pt.detach(), y_pt.detach(), g64)
            moved = (dc_ours != dc_self).any(dim=1).double().mean().item()
        check(agree <= 1e-12, "%s: the routed float64 dc on float64's own branch is autograd's "
              "(within %.0e); the TF32 run's branch differs at %.2f%% of the positions"
              % (tag, agree, 100 * moved))

        def conv_grads(dc):
            xr = x64.detach().clone().requires_grad_()
            return torch.autograd.grad(F.conv3d(xr, W, B, padding=1), (xr, W, B), dc)

        dx_o, dw_o, db_o = conv_grads(dc_ours)
        dx_p, dw_p, db_p = conv_grads(dc_pt)
        with torch.no_grad():  # each gradient's terms' magnitudes
            dx_abs = F.conv_transpose3d(dc_ours.abs(), W.abs(), padding=1)
            db_abs = dc_ours.abs().sum(dim=(0, 2, 3, 4))
        Wa = W.detach().abs().requires_grad_()
        dw_abs, = torch.autograd.grad(F.conv3d(x64.detach(), Wa, padding=1), Wa, dc_ours.abs())
        y64d = y64.detach()
        _, theirs = tf32_close("%s: y, inference forward (v10)" % tag, y_inf, y64d,
                               y_pt.detach(), y64d, floor=Y_FLOOR)
        tf32_close("%s: y, training forward (v10's conv, v5)" % tag, y.detach(), y64d,
                   y_pt.detach(), y64d, floor=Y_FLOOR)
        grads = (("dx", xg.grad, dx_o, xp.grad, dx_p, dx_abs),
                 ("dw", new.conv.weight.grad, dw_o, peer.conv.weight.grad, dw_p, dw_abs),
                 ("dbias", new.conv.bias.grad, db_o, peer.conv.bias.grad, db_p, db_abs))
        for name, got, ref_o, pt, ref_p, scale in grads:
            _, theirs_g = tf32_close("%s: %s (b4)" % (tag, name), got, ref_o, pt, ref_p, scale)
            if name == "dw" and shape == (2, 32, 7, 9, 37):
                tf32_finds_planted(tag, "dw with one weight", got, ref_o, theirs_g, 7, scale)
        if shape == (2, 32, 7, 9, 37):  # the check can fail: one output moved
            tf32_finds_planted(tag, "y with one output", y_inf, y64d, theirs, 5,
                               floor=Y_FLOOR)
            fp32 = ch02.ModelNew(*ARGS).to(dev)
            fp32.load_state_dict(new.state_dict())
            with torch.no_grad():
                diff = (fp32(x) - y_inf).abs().max().item()
            check(diff > 0, "%s: precision=\"tf32\" runs other kernels than \"fp32\": their y "
                  "differ by up to %.1e" % (tag, diff))

    # every extent odd (the pooling drops a last row; v10's 2 x 4 x 64 tile cut in every
    # direction); odd depth, W past one tile (300 tiles, more than an H100's SMs); KernelBench's
    each_shape(case, ((2, 32, 7, 9, 37), (3, 32, 9, 20, 100), (4, 32, 32, 128, 128)), seed=300)


def sgd_checks(torch, ch02, Model, ARGS):
    # lr: each step lowers the outputs (about 4.6, the targets in [-1, 1]) by a small part of
    # the way, so that no output reaches relu's 0, where Model's and ModelNew's roundings could
    # take different sides
    ref, new = same_seed(Model, ch02.ModelNew, ARGS, 7)
    sgd_compare(ref, new, sgd_data((2, 32, 5, 6, 7), (2, 1, 2, 3, 3), 20), 0.002)


if __name__ == "__main__":
    _checks.main(2, library_checks, gpu_checks)
