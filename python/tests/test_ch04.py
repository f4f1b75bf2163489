#!/usr/bin/env python3
"""test_ch04.py: handfused.ch04's ModelNew against PyTorch's Model (KernelBench level 2 #92).

    python3 python/tests/test_ch04.py      (make torch-test; make test runs it too)

Prints PASS / FAIL / SKIP lines as the chapters' checks do (common/run-tests.sh counts them);
exits 1 if any check failed.
  - Without PyTorch or a GPU: the library's own shape checks through ctypes, and the message a
    missing library gives; then one SKIP line for the rest.
  - On a GPU: the parameters ModelNew creates after a seed, against Model's; the output (both
    forwards) and every gradient against Model in float64 on awkward shapes and the KernelBench
    shape; 20 steps of SGD from the same seed against Model in fp32; a side stream; torch.compile;
    bad inputs rejected with their messages; python/README.md's chapter-4 example, run as written.
Tolerances are the chapter's (problem.cu): an output within 1e-5 relative L2 and 1e-4 of the
float64 reference at every element; a gradient element within 1e-5 of the scale of its float
error, the sum of its terms' magnitudes propagated step by step as reference.cu derives it
(float32's unit roundoff is 2^-24), with c's terms (|w| |x| summed, and |bias|) in place of |c|,
since c here comes from our conv and not from the reference.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from handfused import _lib  # noqa: E402 (after the path)
# PASS / FAIL / SKIP lines and the failure count: one copy, torchtest.py's
import torchtest as lines  # noqa: E402
from torchtest import check, expect_error, skip  # noqa: E402


def library_checks():
    """What runs without PyTorch and without a GPU: ch04_check_shape's verdicts and messages,
    and a missing library's message."""
    with tempfile.TemporaryDirectory() as empty:
        expect_error("a missing library", lambda: _lib.load(4, empty), FileNotFoundError,
                     "make lib CH=4")
    try:
        lib = _lib.load(4)
    except FileNotFoundError as e:
        skip("the library's checks: %s" % e)
        return
    err = lambda: lib.ch04_last_error().decode()  # noqa: E731
    for shape in ((1, 8, 3, 3), (128, 8, 128, 128), (65535, 8, 3, 3), (2, 8, 3, 100000)):
        check(lib.ch04_check_shape(*shape) == 0, "ch04_check_shape accepts %s" % (shape,))
    for shape, words in (((1, 3, 5, 5), "8 channels"), ((0, 8, 5, 5), "at least 1"),
                         ((1, 8, 2, 5), "at least 3"), ((1, 8, 5, 2), "at least 3"),
                         ((65536, 8, 3, 3), "65535"), ((4100, 8, 128, 128), "2^31"),
                         ((1, 8, 3, 2 ** 31), "2^31")):
        code = lib.ch04_check_shape(*shape)
        check(code == _lib.EINVAL and words in err(),
              "ch04_check_shape rejects %s (code %d): %s" % (shape, code, err()))


def main():
    library_checks()
    try:
        import torch
    except ImportError:
        skip("handfused.ch04 on the GPU (output, gradients, SGD, torch.compile, bad inputs): "
             "PyTorch is not installed")
        return
    if not torch.cuda.is_available():
        skip("handfused.ch04 on the GPU (output, gradients, SGD, torch.compile, bad inputs): "
             "no CUDA device")
        return
    try:
        from handfused import ch04
        ch04._library()
    except (ImportError, FileNotFoundError) as e:
        check(False, "import handfused.ch04 and its library: %s" % e)
        return
    gpu_checks(torch, ch04)


def gpu_checks(torch, ch04):
    import torch.nn as nn
    import torch.nn.functional as F

    # KernelBench's Model for #92, written from the problem's description
    class Model(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, groups, eps=1e-5):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
            self.group_norm = nn.GroupNorm(groups, out_channels, eps=eps)

        def forward(self, x):
            return self.tail(self.conv(x))

        def tail(self, c, keep=None):
            gn = self.group_norm(c)
            if keep is not None:
                gn.retain_grad()
                keep.append(gn)
            return torch.logsumexp(c + F.hardswish(torch.tanh(gn)), dim=1, keepdim=True)

    ARGS = (8, 64, 3, 16)
    dev = torch.device("cuda")
    torch.backends.cudnn.allow_tf32 = False  # the reference in fp32 (or float64), never TF32
    torch.backends.cuda.matmul.allow_tf32 = False
    lib = ch04._library()
    ws = lib.ch04_workspace_floats(128, 128, 128)
    check(ws >= 2 * 128 * 16 * 126, "ch04_workspace_floats(128 x 8 x 128 x 128) = %d floats "
          "on this device" % ws)

    # ---- the parameters, after the same seed
    for seed in (0, 5):
        torch.manual_seed(seed)
        ref = Model(*ARGS)
        torch.manual_seed(seed)
        new = ch04.ModelNew(*ARGS)
        a, b = list(ref.named_parameters()), list(new.named_parameters())
        same = [n for n, _ in a] == [n for n, _ in b] and all(
            p.shape == q.shape and torch.equal(p, q) for (_, p), (_, q) in zip(a, b))
        check(same, "seed %d: ModelNew's parameters are Model's, in its order (%s)"
              % (seed, ", ".join(n for n, _ in b)))

    # ---- the output and every gradient against float64
    def out_close(what, got, ref):
        """an output of order 1: 1e-5 relative L2, 1e-4 at every element, no NaN"""
        err = (got.double() - ref).abs()
        rel = (err.norm() / ref.norm().clamp_min(1e-300)).item()
        worst = err.max().item() if err.numel() else 0.0
        ok = bool(torch.isfinite(got).all()) and rel <= 1e-5 and worst <= 1e-4
        return check(ok, "%s: rel_l2 %.1e, max_abs %.1e" % (what, rel, worst))

    def scale_ratio(got, ref, scale):
        """the largest error over its scale; inf where got has a NaN"""
        if not bool(torch.isfinite(got).all()):
            return float("inf")
        return ((got.double() - ref).abs() / scale.clamp_min(1e-300)).max().item()

    def scale_close(what, got, ref, scale, tol=1e-5):
        ratio = scale_ratio(got, ref, scale)
        return check(ratio <= tol, "%s: max error / its scale %.1e (at most %.0e)"
                     % (what, ratio, tol))

    def grads_case(shape, seed):
        n, _, h, w = shape
        torch.manual_seed(seed)
        new = ch04.ModelNew(*ARGS).to(dev)
        with torch.no_grad():
            # GroupNorm's affine part learned away from 1 and 0 (problem.cu's distributions),
            # so that a gamma or beta applied per group instead of per channel shows
            new.group_norm.weight.uniform_(-1.5, 1.5)
            new.group_norm.bias.uniform_(-1, 1)
        ref = Model(*ARGS).to(dev).double()
        ref.load_state_dict(new.state_dict())
        x = torch.rand(shape, device=dev)
        x64 = x.double().requires_grad_()
        c64 = ref.conv(x64)
        c64.retain_grad()
        keep = []
        y64 = ref.tail(c64, keep)
        gn64 = keep[0]
        g64 = torch.randn(y64.shape, device=dev, dtype=torch.float64)
        y64.backward(g64)
        tag = "%dx8x%dx%d" % (n, h, w)
        with torch.no_grad():
            y_inf = new(x)
        out_close("%s: y, inference forward (v9)" % tag, y_inf, y64.detach())
        xg = x.clone().requires_grad_()
        y = new(xg)
        out_close("%s: y, training forward (v9, c and the statistics kept)" % tag, y,
                  y64.detach())
        y.backward(g64.float())
        # each gradient's error scale in float64 (reference.cu's derivation, c's terms for |c|)
        W, gamma, beta = ref.conv.weight, ref.group_norm.weight, ref.group_norm.bias
        with torch.no_grad():
            c, yd, gn = c64.detach(), y64.detach(), gn64.detach()
            cs = F.conv2d(x64.detach().abs(), W.abs(), ref.conv.bias.abs())  # c's terms
            grp = lambda v: v.reshape(n, 16, -1)  # noqa: E731 (a group's values in a row)
            M = grp(c).shape[2]
            mean = grp(c).mean(dim=2, keepdim=True)
            rstd = 1 / (grp(c).var(dim=2, unbiased=False, keepdim=True) + 1e-5).sqrt()
            xh = ((grp(c) - mean) * rstd).reshape(c.shape)
            X = ((grp(cs) + mean.abs()) * rstd).reshape(c.shape)
            t = torch.tanh(gn)
            r = c + F.hardswish(t)
            p = torch.exp(r - yd)
            dr = g64 * p
            Dr = g64.abs() * p * (1 + cs + r.abs() + yd.abs())
            G, B = gamma.abs().view(1, -1, 1, 1), beta.abs().view(1, -1, 1, 1)
            T = (1 - t * t) * (G * X + B) + 1
            f = (2 * t + 3) / 6 * (1 - t * t)
            Dg = Dr * f.abs() + 2 * dr.abs() * T
            dgn = dr * f
            dxh = dgn * gamma.view(1, -1, 1, 1)
            A1 = grp(G * Dg).sum(dim=2, keepdim=True)
            A2 = grp(G * Dg * xh.abs() + dxh.abs() * X).sum(dim=2, keepdim=True)
            m2 = grp(dxh * xh).mean(dim=2, keepdim=True)
            abs_dc = Dr + (rstd * (grp(G * Dg) + A1 / M + grp(X) * m2.abs()
                                   + grp(xh.abs()) * A2 / M)).reshape(c.shape)
            dx_abs = torch.nn.grad.conv2d_input(x64.shape, W.abs(), abs_dc)
            dw_abs = torch.nn.grad.conv2d_weight(x64.detach().abs(), W.shape, abs_dc)
            dbias_abs = abs_dc.sum(dim=(0, 2, 3))
            dgamma_abs = (Dg * xh.abs() + dgn.abs() * X).sum(dim=(0, 2, 3))
            dbeta_abs = Dg.sum(dim=(0, 2, 3))
        sum_terms = (("dx", xg.grad, x64.grad, dx_abs),
                     ("dw", new.conv.weight.grad, W.grad, dw_abs),
                     ("dbias (conv)", new.conv.bias.grad, ref.conv.bias.grad, dbias_abs),
                     ("dgamma", new.group_norm.weight.grad, gamma.grad, dgamma_abs),
                     ("dbeta", new.group_norm.bias.grad, beta.grad, dbeta_abs))
        for name, got, want, scale in sum_terms:
            scale_close("%s: %s" % (tag, name), got, want, scale)
        if shape == (2, 8, 5, 7):  # the check can fail: one dgamma off by 1e-4 of its scale
            bad = new.group_norm.weight.grad.clone()
            bad[5] += 1e-4 * dgamma_abs[5].float()
            ratio = scale_ratio(bad, gamma.grad, dgamma_abs)
            check(ratio > 1e-5, "%s: the gradient check finds dgamma with one channel off by "
                  "1e-4 of its scale (ratio %.1e)" % (tag, ratio))

    # batch 1 and primes; S = 1 (one position); a row of 258 columns (three 128-column tiles);
    # 13 samples of 128 x 128, more than b3's teams (team_plan sizes them by the L2); the
    # KernelBench shape
    for i, shape in enumerate(((1, 8, 3, 3), (2, 8, 5, 7), (3, 8, 3, 35), (1, 8, 19, 19),
                               (5, 8, 41, 47), (2, 8, 7, 260), (13, 8, 128, 128),
                               (128, 8, 128, 128))):
        try:
            grads_case(shape, 100 + i)
        except Exception as e:  # noqa: BLE001
            check(False, "%s: raised %s: %s" % (shape, type(e).__name__, e))

    # ---- a side stream: the same results as the default stream's (dx within cuDNN's noise)
    try:
        torch.manual_seed(3)
        new = ch04.ModelNew(*ARGS).to(dev)
        x = torch.rand((3, 8, 11, 13), device=dev)
        g = torch.randn((3, 1, 9, 11), device=dev)
        runs = []
        for side in (False, True):
            new.zero_grad()
            xg = x.clone().requires_grad_()
            st = torch.cuda.Stream() if side else torch.cuda.current_stream()
            st.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(st):
                y = new(xg)
                y.backward(g)
                out = [y, xg.grad] + [p.grad.clone() for p in new.parameters()]
            torch.cuda.current_stream().wait_stream(st)
            torch.cuda.synchronize()
            runs.append(out)
        same = all(torch.equal(a, b) for i, (a, b) in enumerate(zip(*runs)) if i != 1)
        dx_rel = ((runs[0][1] - runs[1][1]).norm() / runs[0][1].norm()).item()
        check(same and dx_rel <= 1e-6, "a side stream: y, dw, dbias, dgamma, dbeta the same bits "
              "as on the default stream, dx within %.1e" % dx_rel)
    except Exception as e:  # noqa: BLE001
        check(False, "a side stream: raised %s: %s" % (type(e).__name__, e))

    # ---- 20 steps of SGD, ModelNew and Model (fp32) from the same seed
    try:
        sgd_checks(torch, ch04, Model, ARGS, dev)
    except Exception as e:  # noqa: BLE001
        check(False, "SGD: raised %s: %s" % (type(e).__name__, e))

    # ---- torch.compile: a graph break around the library call, the same results as eager
    try:
        torch.manual_seed(4)
        new = ch04.ModelNew(*ARGS).to(dev)
        compiled = torch.compile(new)
        x = torch.rand((2, 8, 9, 10), device=dev)
        with torch.no_grad():
            same_fwd = torch.equal(compiled(x), new(x))
        grads = []
        for m in (new, compiled):
            new.zero_grad()
            m(x).square().sum().backward()
            grads.append([p.grad.clone() for p in new.parameters()])
        same_bwd = all(torch.equal(a, b) for a, b in zip(*grads))
        check(same_fwd and same_bwd, "torch.compile(ModelNew): forward and gradients the same "
              "bits as eager")
    except Exception as e:  # noqa: BLE001
        check(False, "torch.compile(ModelNew): raised %s: %s" % (type(e).__name__, e))

    # ---- bad inputs
    torch.manual_seed(0)
    new = ch04.ModelNew(*ARGS).to(dev)
    ok_x = torch.rand((1, 8, 5, 6), device=dev)
    for grad in (True, False):
        mode = "with autograd" if grad else "under no_grad"
        with torch.set_grad_enabled(grad):
            expect_error("float64 x, " + mode, lambda: new(ok_x.double()), TypeError, "float32")
            expect_error("x on the CPU, " + mode, lambda: new(ok_x.cpu()), ValueError, "CUDA")
            expect_error("non-contiguous x, " + mode, lambda: new(ok_x.transpose(2, 3)),
                         ValueError, "contiguous")
            expect_error("x with 3 channels, " + mode,
                         lambda: new(torch.rand((1, 3, 5, 6), device=dev)), ValueError,
                         "8 channels")
            expect_error("x of 2 x 9 (H below 3), " + mode,
                         lambda: new(torch.rand((1, 8, 2, 9), device=dev)), ValueError,
                         "at least 3")
            expect_error("5-D x, " + mode, lambda: new(ok_x[None]), ValueError, "4-D")
    expect_error("a batch of 65536", lambda: new(torch.rand((65536, 8, 3, 3), device=dev)),
                 ValueError, "65535")
    big = torch.empty((4100, 8, 128, 128), device=dev)
    expect_error("a conv output past 2^31 elements", lambda: new(big), ValueError, "2^31")
    del big
    expect_error("16 groups", lambda: ch04.ModelNew(8, 64, 3, 8), ValueError, "groups=16")
    expect_error("kernel 5", lambda: ch04.ModelNew(8, 64, 5, 16), ValueError, "kernel_size=3")
    expect_error("eps 1e-3", lambda: ch04.ModelNew(8, 64, 3, 16, eps=1e-3), ValueError,
                 "eps=1e-5")
    expect_error("float64 parameters", lambda: ch04.ModelNew(*ARGS).to(dev).double()(ok_x),
                 TypeError, "float32")
    with torch.no_grad():
        y = new(ok_x)
    check(y.shape == (1, 1, 3, 4) and bool(torch.isfinite(y).all()),
          "after the errors, a valid input runs: y of shape %s" % (tuple(y.shape),))

    # ---- python/README.md's chapter-4 example, as written, from the repository's root
    import re
    import subprocess
    readme = open(os.path.join(_lib.REPO, "python", "README.md"), encoding="utf-8").read()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S)
              if "handfused.ch04" in b]
    if check(len(blocks) == 1, "python/README.md holds one chapter-4 Python example"):
        run = subprocess.run([sys.executable, "-c", blocks[0]], cwd=_lib.REPO,
                             capture_output=True, text=True)
        check(run.returncode == 0, "python/README.md's chapter-4 example runs as written "
              "(exit %d)%s" % (run.returncode,
                               ": " + run.stderr.strip()[-300:] if run.returncode else ""))


def sgd_checks(torch, ch04, Model, ARGS, dev):
    steps, lr, shape = 20, 0.05, (2, 8, 9, 11)
    torch.manual_seed(7)
    ref = Model(*ARGS).to(dev)
    torch.manual_seed(7)
    new = ch04.ModelNew(*ARGS).to(dev)
    p0 = [p.detach().clone() for p in ref.parameters()]
    gen = torch.Generator(device=dev)
    gen.manual_seed(11)
    # targets below the outputs (y is log 64 = 4.16 plus the residual's share at Model's
    # initialisation), so that every step moves every parameter
    data = [(torch.rand(shape, device=dev, generator=gen),
             3 + torch.rand((2, 1, 7, 9), device=dev, generator=gen)) for _ in range(steps)]
    losses = {}
    for name, m in (("Model", ref), ("ModelNew", new)):
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        losses[name] = []
        for x, t in data:
            opt.zero_grad()
            loss = (m(x) - t).square().mean()
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    worst = max(abs(a - b) / abs(a) for a, b in zip(losses["Model"], losses["ModelNew"]))
    check(worst <= 1e-4, "SGD, %d steps, lr %g: losses %.6f -> %.6f (Model), ModelNew's within "
          "%.1e relative" % (steps, lr, losses["Model"][0], losses["Model"][-1], worst))
    for (name, p), q, s in zip(ref.named_parameters(), new.parameters(), p0):
        moved, norm = (p - s).norm().item(), s.norm().item()
        off = (q - p).norm().item()
        # moved far past float32's rounding of it (group_norm.bias starts at zero: against 1)
        check(moved > 1e-5 * max(norm, 1.0) and off <= 1e-3 * moved,
              "SGD: %s moved %.2e (norm at the start %.2e); ModelNew's differs from Model's by "
              "%.1e of that move" % (name, moved, norm, off / max(moved, 1e-300)))


if __name__ == "__main__":
    main()
    sys.exit(1 if lines.failed else 0)
