#!/usr/bin/env python3
"""test_ch05.py: handfused.ch05's ModelNew against PyTorch's Model (KernelBench level 2 #38).

    python3 python/tests/test_ch05.py      (make torch-test; make test runs it too)

Output lines, exit status and the run without PyTorch or a GPU (one SKIP line after the
library's own shape checks) are _checks.py's, as for every chapter. On a GPU, beside the checks
every chapter's test makes there (parameters after a seed, a side stream, 20 SGD steps against
Model in fp32, torch.compile, bad inputs): y of both forwards and dx, dw, dbias, dscale against
Model in float64 on batch 1, prime and odd extents (the pool drops a last slice), and rows of the
KernelBench length (131072 values, more than a cluster's shared memory holds).
Tolerances are the chapter's (problem.cu): every softmax row's outputs are far below 1, so each
row's error is judged against that row's largest value (1e-5, plus 4 times the conv's own float32
error where the conv ran in float32), and the whole output within 1e-5 relative L2; a gradient
element, a sum, within 1e-5 of the sum of its terms' magnitudes.
precision="tf32" (on compute capability 9.0; skipped elsewhere, where its refusal is checked
instead): y of the inference forward (v8) against Model in float64, within twice the error of
Model in float32 with PyTorch's TF32 convs (cudnn.allow_tf32, its default) on the same tensors,
plus a float32 floor (_checks.tf32_close), in relative L2 and in each row's largest error over
the row's largest value; a planted error fails the check. With autograd the chapter has no
TF32 path: its y is precision="fp32"'s, bit for bit. precision="bf16" raises ValueError.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checks  # noqa: E402 (after the path)
from _checks import (bad_inputs, check, compile_same, each_shape, expect_error,  # noqa: E402
                     finds_planted, guarded, library_shapes, on_two_streams, problem_model,
                     pytorch_tf32, same_parameters, same_seed, sgd_compare, skip, still_runs,
                     sum_close, tf32_close, tf32_entry, tf32_finds_planted, tf32_skip_reason)


def library_checks():
    """What runs without PyTorch and without a GPU: ch05_check_shape's verdicts and messages,
    a missing library's message, and the TF32 forward's refusal where it cannot run."""
    lib = library_shapes(5, ((1, 32, 2, 2, 2), (32, 32, 32, 64, 64), (1, 32, 3, 5, 7),
                             (128, 32, 32, 64, 64)),
                         (((1, 3, 4, 4, 4), "32 channels"), ((0, 32, 4, 4, 4), "at least"),
                          ((1, 32, 1, 4, 4), "at least 2"), ((2, 32, 4, 4, 1), "at least 2"),
                          ((256, 32, 32, 64, 64), "2^31"), ((1, 32, 2049, 200, 200), "2^31")))
    if lib is not None:  # the sm_90a check before anything else (on this machine's GPU, or none)
        tf32_entry(lib, 5, "ch05_forward_tf32", [None] * 6 + [1, 2, 2, 2, None])


def gpu_checks(torch, ch05):
    import torch.nn.functional as F

    # KernelBench's Model for #38 (data/kernelbench.py), with its conv and its tail apart
    class Model(problem_model(5)):
        def front(self, x):
            return self.conv_transpose(self.avg_pool(x))

        def tail(self, c):
            z = torch.clamp(c, self.clamp_min, self.clamp_max)
            n, ch = z.shape[:2]
            return torch.softmax(z.view(n, ch, -1), dim=2).view(z.shape) * self.scale

    ARGS = (32, 64, 3, 2, 1, 1, 2, 0.0, 1.0)
    dev = torch.device("cuda")
    check(ch05._library().ch05_clusters() in (0, 1), "ch05_clusters: 1 (b3's backward) or 0 "
          "(b2's), not a CUDA error")

    same_parameters(Model, ch05.ModelNew, ARGS)

    def row_ratio(got, ref):
        """the largest error of each (n, channel) row over that row's largest |value|; inf
        where got has a NaN; a row of zeros (scale 0) must be zeros"""
        if not bool(torch.isfinite(got).all()):
            return float("inf")
        n, ch = ref.shape[:2]
        err = (got.double() - ref).abs().reshape(n, ch, -1).amax(dim=2)
        top = ref.abs().reshape(n, ch, -1).amax(dim=2)
        return (err / top.clamp_min(1e-300)).max().item()

    def out_close(what, got, ref, tol_row):
        rel = ((got.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()
        ratio = row_ratio(got, ref)
        return check(rel <= 1e-5 and ratio <= tol_row,
                     "%s: rel_l2 %.1e, worst row error / row max %.1e (at most %.1e)"
                     % (what, rel, ratio, tol_row))

    def set_params(new, gen):
        """the scale as the chapter tests it (1.5 U(-1, 1), channel 5 zero), and 8 channels'
        conv bias raised by 0.9 so that both clamp bounds cut"""
        with torch.no_grad():
            new.scale.copy_(1.5 * (2 * torch.rand(new.scale.shape, generator=gen) - 1))
            new.scale[0, 5] = 0
            new.conv_transpose.bias[:8] += 0.9

    def grads_case(shape, seed):
        n, _, d, h, w = shape
        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        new = ch05.ModelNew(*ARGS)
        set_params(new, gen)
        new = new.to(dev)
        ref = Model(*ARGS).to(dev).double()
        ref.load_state_dict(new.state_dict())
        x = torch.rand(shape, device=dev)
        tag = "%dx32x%dx%dx%d" % (n, d, h, w)
        # the float64 reference: Model's forward, its c kept
        x64 = x.double().requires_grad_()
        c64 = ref.front(x64)
        c64.retain_grad()
        y64 = ref.tail(c64)
        with torch.no_grad():
            inside = ((c64 > 0) & (c64 < 1)).double().mean().item()
        check(inside >= 0.1 and inside <= 0.99, "%s: %.0f%% of c inside the clamp's band, the "
              "rest clamped (both the softmax's gradient and the clamp's mask are tested)"
              % (tag, 100 * inside))
        with torch.no_grad():
            y_inf = new(x)
        xg = x.clone().requires_grad_()
        y = new(xg)
        c32 = y.grad_fn.saved_tensors[3]  # the c the training forward kept (ch05.Ch05Function)
        c_err = (c32.double() - c64.detach()).abs().max().item()
        tol_row = 1e-5 + 4 * c_err
        out_close("%s: y, inference forward (v7)" % tag, y_inf, y64.detach(), tol_row)
        out_close("%s: y, training forward (the pool, then v7)" % tag, y, y64.detach(), tol_row)
        check(torch.equal(y, y_inf), "%s: the training forward's y is the inference forward's, "
              "bit for bit (both v7)" % tag)
        g = torch.randn(y64.shape, device=dev, dtype=torch.float64)
        y64.backward(g)
        y.backward(g.float())
        # dc by the softmax's derivative, with the clamp's mask of the c the kernels computed:
        # where c64 lies within float32's error of a bound the two sides' gradients differ, and
        # either is a derivative of the model there
        with torch.no_grad():
            sc = ref.scale
            z = c64.detach().clamp(0, 1)
            p = torch.softmax(z.reshape(n, 64, -1), dim=2).reshape(z.shape)
            mask32 = ((c32 >= 0) & (c32 <= 1)).double()
            mask64 = ((c64 >= 0) & (c64 <= 1)).double()
            dot = (g * p).sum(dim=(2, 3, 4), keepdim=True)
            dc64 = mask32 * sc * p * (g - dot)
            abs_dc = mask32 * sc.abs() * p * (g.abs() + (g.abs() * p).sum(dim=(2, 3, 4),
                                                                           keepdim=True))
            flips = (mask32 != mask64)
            near = (c64.detach().abs() < 1e-4) | ((c64.detach() - 1).abs() < 1e-4)
            same = mask64 * sc * p * (g - dot)
            agree = ((same - c64.grad).abs().max() / c64.grad.abs().max()).item()
        check(bool((~flips | near).all()) and agree <= 1e-12, "%s: the reference's dc is Model's "
              "(autograd, within %.0e), the clamp's mask differing at %d positions, each within "
              "1e-4 of a bound" % (tag, agree, int(flips.sum())))
        # the conv's and the pool's gradients of dc64, and of the terms' magnitudes abs_dc
        xr = x.double().requires_grad_()
        cr = ref.front(xr)
        dx64, dw64, db64 = torch.autograd.grad(cr, (xr, ref.conv_transpose.weight,
                                                    ref.conv_transpose.bias), dc64)
        W = ref.conv_transpose.weight
        xa = x.double().requires_grad_()
        Wa = W.detach().abs().requires_grad_()
        ca = F.conv_transpose3d(F.avg_pool3d(xa, 2), Wa, stride=2, padding=1, output_padding=1)
        dx_abs, dw_abs = torch.autograd.grad(ca, (xa, Wa), abs_dc)
        db_abs = abs_dc.sum(dim=(0, 2, 3, 4))
        ds_abs = (g * p).abs().sum(dim=(0, 2, 3, 4)).reshape(1, 64, 1, 1, 1)
        sum_close("%s: dx" % tag, xg.grad, dx64, dx_abs)
        sum_close("%s: dw" % tag, new.conv_transpose.weight.grad, dw64, dw_abs)
        sum_close("%s: dbias (conv)" % tag, new.conv_transpose.bias.grad, db64, db_abs)
        sum_close("%s: dscale" % tag, new.scale.grad, ref.scale.grad, ds_abs)
        if shape == (2, 32, 4, 6, 10):  # the check can fail: one dw off by 1e-4 of its sum
            finds_planted(tag, "dw with one weight", new.conv_transpose.weight.grad, dw64, dw_abs,
                          7)

    # batch 1, the smallest extents, odd and prime extents (the pool drops their last slice),
    # and rows of the KernelBench length (131072: more than a cluster's shared memory holds)
    each_shape(grads_case, ((1, 32, 2, 2, 2), (1, 32, 3, 5, 7), (2, 32, 4, 6, 10),
                            (3, 32, 5, 13, 17), (1, 32, 7, 11, 64), (2, 32, 16, 32, 32),
                            (2, 32, 32, 64, 64)))

    # ---- a side stream: the same results as the default stream's (within the library conv's
    # run-to-run noise where it ran: its engine may not be deterministic)
    def side_stream():
        torch.manual_seed(3)
        new = ch05.ModelNew(*ARGS)
        set_params(new, torch.Generator().manual_seed(3))
        new = new.to(dev)
        x = torch.rand((2, 32, 5, 6, 7), device=dev)
        g = torch.randn((2, 64, 4, 6, 6), device=dev)

        def step():
            new.zero_grad()
            xg = x.clone().requires_grad_()
            with torch.no_grad():
                y_inf = new(x)
            y = new(xg)
            y.backward(g)
            return [y_inf, y, new.scale.grad.clone(), xg.grad,
                    new.conv_transpose.weight.grad.clone(), new.conv_transpose.bias.grad.clone()]

        runs = on_two_streams(step)
        same = all(torch.equal(runs[0][i], runs[1][i]) for i in (0, 1, 2))
        lib_rel = max(((a - b).norm() / a.norm()).item() for a, b in zip(runs[0][3:], runs[1][3:]))
        check(same and lib_rel <= 1e-5, "a side stream: y of both forwards (v7) and the scale's "
              "gradient the same bits as on the default stream; the gradients through the "
              "library conv within %.1e" % lib_rel)

    guarded("a side stream", side_stream)

    # ---- 20 steps of SGD, ModelNew and Model (fp32) from the same seed
    guarded("SGD", sgd_checks, torch, ch05, Model, ARGS, dev)

    # ---- torch.compile: a graph break around the library call, the same results as eager
    # (within the library conv's run-to-run noise)
    torch.manual_seed(4)
    compile_same(ch05.ModelNew(*ARGS).to(dev), torch.rand((2, 32, 5, 6, 7), device=dev), 1e-5)

    # ---- bad inputs
    torch.manual_seed(0)
    new = ch05.ModelNew(*ARGS).to(dev)
    ok_x = torch.rand((1, 32, 4, 5, 6), device=dev)
    bad_inputs(new, ok_x, torch.rand((1, 3, 4, 5, 6), device=dev), "32 channels",
               torch.rand((1, 32, 1, 5, 6), device=dev), "at least 2")
    big = torch.empty((256, 32, 32, 64, 64), device=dev)  # 4.3 GB; the conv output 2^31
    expect_error("a conv output past 2^31 elements", lambda b=big: new(b), ValueError, "2^31")
    del big
    expect_error("stride 1", lambda: ch05.ModelNew(32, 64, 3, 1, 1, 1, 2, 0.0, 1.0), ValueError,
                 "stride=2")
    expect_error("clamp_max 2", lambda: ch05.ModelNew(32, 64, 3, 2, 1, 1, 2, 0.0, 2.0),
                 ValueError, "clamp_max=1")
    expect_error("precision=\"bf16\"", lambda: ch05.ModelNew(*ARGS, precision="bf16"),
                 ValueError, "'fp32'", "'tf32'", "bf16")
    expect_error("precision given by position", lambda: ch05.ModelNew(*ARGS, "tf32"), TypeError,
                 "positional")
    still_runs(new, ok_x, (1, 64, 4, 4, 6))
    guarded("precision=\"tf32\"", tf32_checks, torch, ch05, Model, ARGS, dev, set_params)


def tf32_checks(torch, ch05, Model, ARGS, dev, set_params):
    """precision="tf32"'s inference forward (v8) against Model in float64, within twice
    PyTorch's TF32 error (the module's docstring); on a GPU that is not compute capability 9.0,
    its refusal"""
    why = tf32_skip_reason(torch)
    if why is not None:
        skip("precision=\"tf32\" against PyTorch's TF32: %s" % why)
        torch.manual_seed(0)
        new = ch05.ModelNew(*ARGS, precision="tf32").to(dev)
        with torch.no_grad():
            expect_error("precision=\"tf32\" on this GPU, under no_grad",
                         lambda: new(torch.rand((1, 32, 4, 5, 6), device=dev)), RuntimeError,
                         "ch05_forward_tf32", "sm_90a")
        return

    def case(shape, seed):
        n, _, d, h, w = shape
        tag = "tf32 %dx32x%dx%dx%d" % (n, d, h, w)
        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        new = ch05.ModelNew(*ARGS, precision="tf32")
        set_params(new, gen)
        new = new.to(dev)
        ref = Model(*ARGS).to(dev).double()
        ref.load_state_dict(new.state_dict())
        peer = Model(*ARGS).to(dev)  # PyTorch in float32, TF32 convs
        peer.load_state_dict(new.state_dict())
        fp32 = ch05.ModelNew(*ARGS).to(dev)
        fp32.load_state_dict(new.state_dict())
        x = torch.rand(shape, device=dev)
        with torch.no_grad():
            y64 = ref(x.double())
            y = new(x)
            with pytorch_tf32(torch):
                y_pt = peer(x)
            y_fp32 = fp32(x)
            # each row's largest |value|, over the row: the existing checks' per-row scale
            top = y64.abs().amax(dim=(2, 3, 4), keepdim=True).expand_as(y64)
        _, theirs = tf32_close("%s: y, inference forward (v8), per row" % tag, y, y64, y_pt, y64,
                               top)
        if shape == (3, 32, 5, 13, 17):  # the check can fail: one output moved
            k = 4 * 12 * 16 + 5  # in row 1 (sample 0, channel 1: channel 5's scale is zero)
            tf32_finds_planted(tag, "y with one output", y, y64, theirs, k, top)
            diff = (y_fp32 - y).abs().max().item()
            check(diff > 0, "%s: precision=\"tf32\" runs other kernels than \"fp32\" without "
                  "autograd: their y differ by up to %.1e" % (tag, diff))
        # with autograd: fp32 in both precisions (no TF32 backward)
        y_a = new(x.clone().requires_grad_())
        y_b = fp32(x.clone().requires_grad_())
        check(torch.equal(y_a, y_b) and torch.equal(y_b, y_fp32), "%s: with autograd "
              "precision=\"tf32\"'s y is \"fp32\"'s (v7) bit for bit" % tag)

    # odd and prime extents (the pool drops a last slice); uneven tiles; rows of the KernelBench
    # length (131072)
    each_shape(case, ((3, 32, 5, 13, 17), (2, 32, 6, 10, 22), (2, 32, 32, 64, 64)), seed=300)


def sgd_checks(torch, ch05, Model, ARGS, dev):
    shape = (2, 32, 5, 6, 7)
    ref, new = same_seed(Model, ch05.ModelNew, ARGS, 7)
    gen = torch.Generator(device=dev)
    gen.manual_seed(11)
    # targets of the output's size: a softmax row of 144 positions sums to 1 (times the scale)
    data = [(torch.rand(shape, device=dev, generator=gen),
             torch.rand((2, 64, 4, 6, 6), device=dev, generator=gen) / 72)
            for _ in range(20)]
    sgd_compare(ref, new, data, 0.5, moved_min=1e-4, loss_fn=lambda y, t: (y - t).square().sum())


if __name__ == "__main__":
    _checks.main(5, library_checks, gpu_checks)
