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
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from handfused import _lib  # noqa: E402 (after the path)

failed = 0


def check(ok, msg):
    global failed
    print(("PASS  " if ok else "FAIL  ") + msg, flush=True)
    failed += not ok
    return ok


def skip(msg):
    print("SKIP  " + msg, flush=True)


def expect_error(what, fn, exc, *words):
    """fn() must raise exc whose message holds every word."""
    try:
        fn()
    except exc as e:
        msg = str(e)
        return check(all(w in msg for w in words), "%s: %s: %s" % (what, type(e).__name__, msg))
    except Exception as e:  # noqa: BLE001 (the wrong exception is the failure reported)
        return check(False, "%s: raised %s (%s), not %s" % (what, type(e).__name__, e,
                                                             exc.__name__))
    return check(False, "%s: no error raised" % what)


def library_checks():
    """What runs without PyTorch and without a GPU: ch01_check_shape's verdicts and messages,
    the workspace size, and a missing library's message."""
    with tempfile.TemporaryDirectory() as empty:
        expect_error("a missing library", lambda: _lib.load(1, empty), FileNotFoundError,
                     "make lib CH=1")
    try:
        lib = _lib.load(1)
    except FileNotFoundError as e:
        skip("the library's checks: %s" % e)
        return
    err = lambda: lib.ch01_last_error().decode()  # noqa: E731
    for shape in ((1, 3, 1, 1, 1), (128, 3, 16, 32, 32), (65535, 3, 1, 1, 1)):
        check(lib.ch01_check_shape(*shape) == 0, "ch01_check_shape accepts %s" % (shape,))
    for shape, words in (((1, 4, 2, 2, 2), "3 channels"), ((0, 3, 2, 2, 2), "at least 1"),
                         ((65536, 3, 1, 1, 1), "65535"), ((1, 3, 65536, 1, 1), "65535"),
                         ((8, 3, 129, 129, 129), "2^31")):
        code = lib.ch01_check_shape(*shape)
        check(code == _lib.EINVAL and words in err(),
              "ch01_check_shape rejects %s (code %d): %s" % (shape, code, err()))
    n = lib.ch01_workspace_floats(128, 16, 32, 32)
    check(n >= 16 * 81 * 64, "ch01_workspace_floats(128 x 3 x 16 x 32 x 32) = %d floats" % n)


def main():
    library_checks()
    try:
        import torch
    except ImportError:
        skip("handfused.ch01 on the GPU (output, gradients, SGD, torch.compile, bad inputs): "
             "PyTorch is not installed")
        return
    if not torch.cuda.is_available():
        skip("handfused.ch01 on the GPU (output, gradients, SGD, torch.compile, bad inputs): "
             "no CUDA device")
        return
    try:
        from handfused import ch01
        ch01._library()
    except (ImportError, FileNotFoundError) as e:
        check(False, "import handfused.ch01 and its library: %s" % e)
        return
    gpu_checks(torch, ch01)


def gpu_checks(torch, ch01):
    import torch.nn as nn
    import torch.nn.functional as F

    # KernelBench's Model for #58, written from the problem's description
    class Model(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias_shape):
            super().__init__()
            self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size,
                                                     stride=stride, padding=padding)
            self.bias = nn.Parameter(torch.randn(bias_shape))

        def forward(self, x):
            return self.tail(self.conv_transpose(x))

        def tail(self, c):
            z = torch.logsumexp(c, dim=1, keepdim=True)
            return torch.clamp(z * torch.sigmoid(z + 3) / 6 - self.bias, min=-1, max=1)

    ARGS = (3, 16, 3, 2, 1, (1, 1, 1, 1))
    dev = torch.device("cuda")
    torch.backends.cudnn.allow_tf32 = False  # the reference in fp32 (or float64), never TF32
    torch.backends.cuda.matmul.allow_tf32 = False

    # ---- the parameters, after the same seed
    for seed in (0, 5):
        torch.manual_seed(seed)
        ref = Model(*ARGS)
        torch.manual_seed(seed)
        new = ch01.ModelNew(*ARGS)
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

    def sum_ratio(got, ref, abs_sum):
        """the largest error over the sum of its terms' magnitudes; inf where got has a NaN"""
        if not bool(torch.isfinite(got).all()):
            return float("inf")
        return ((got.double() - ref).abs() / abs_sum.clamp_min(1e-300)).max().item()

    def sum_close(what, got, ref, abs_sum, tol=1e-5):
        """a sum: every element within tol of the sum of its terms' magnitudes"""
        ratio = sum_ratio(got, ref, abs_sum)
        return check(ratio <= tol, "%s: max error / sum of |terms| %.1e (at most %.0e)"
                     % (what, ratio, tol))

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
        with torch.no_grad():
            y_inf = new(x)
        out_close("%s: y, inference forward (v8)" % tag, y_inf, y64.detach())
        xg = x.clone().requires_grad_()
        y = new(xg)
        out_close("%s: y, training forward (b3's conv, v7)" % tag, y, y64.detach())
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
            bad = new.conv_transpose.weight.grad.clone()
            bad.view(-1)[7] += 1e-4 * Wa.grad.view(-1)[7].float()
            ratio = sum_ratio(bad, W.grad, Wa.grad)
            check(ratio > 1e-5, "%s: the gradient check finds dw with one weight off by 1e-4 of "
                  "its sum (ratio %.1e)" % (tag, ratio))

    # b = 0.1 puts every output inside the band (z is near log 16); None: b chosen so that the
    # clamp cuts about half (grads_case)
    for i, (shape, b_value) in enumerate((((1, 3, 1, 1, 1), 0.1), ((1, 3, 2, 3, 5), 0.1),
                                          ((2, 3, 3, 7, 11), 0.1), ((3, 3, 5, 13, 17), 0.1),
                                          ((3, 3, 5, 13, 17), None), ((1, 3, 4, 16, 33), 0.1),
                                          ((2, 3, 7, 5, 64), 0.1), ((128, 3, 16, 32, 32), 0.1))):
        try:
            grads_case(shape, 100 + i, b_value)
        except Exception as e:  # noqa: BLE001
            check(False, "%s, b %s: raised %s: %s" % (shape, b_value, type(e).__name__, e))

    # ---- a side stream: the same results as the default stream's (dx within cuDNN's noise)
    try:
        torch.manual_seed(3)
        new = ch01.ModelNew(*ARGS).to(dev)
        x = torch.rand((2, 3, 5, 6, 7), device=dev)
        g = torch.randn((2, 1, 9, 11, 13), device=dev)
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
        check(same and dx_rel <= 1e-6, "a side stream: y, dw, dbias, db the same bits as on the "
              "default stream, dx within %.1e" % dx_rel)
    except Exception as e:  # noqa: BLE001
        check(False, "a side stream: raised %s: %s" % (type(e).__name__, e))

    # ---- 20 steps of SGD, ModelNew and Model (fp32) from the same seed
    try:
        sgd_checks(torch, ch01, Model, ARGS, dev)
    except Exception as e:  # noqa: BLE001
        check(False, "SGD: raised %s: %s" % (type(e).__name__, e))

    # ---- torch.compile: a graph break around the library call, the same results as eager
    try:
        torch.manual_seed(4)
        new = ch01.ModelNew(*ARGS).to(dev)
        compiled = torch.compile(new)
        x = torch.rand((2, 3, 5, 6, 7), device=dev)
        with torch.no_grad():
            same_fwd = torch.equal(compiled(x), new(x))
        grads = []
        for m in (new, compiled):
            new.zero_grad()
            m(x).square().sum().backward()  # an expanded upstream gradient on the way
            grads.append([p.grad.clone() for p in new.parameters()])
        same_bwd = all(torch.equal(a, b) for a, b in zip(*grads))
        check(same_fwd and same_bwd, "torch.compile(ModelNew): forward and gradients the same "
              "bits as eager")
    except Exception as e:  # noqa: BLE001
        check(False, "torch.compile(ModelNew): raised %s: %s" % (type(e).__name__, e))

    # ---- bad inputs
    torch.manual_seed(0)
    new = ch01.ModelNew(*ARGS).to(dev)
    ok_x = torch.rand((1, 3, 4, 5, 6), device=dev)
    for grad in (True, False):
        mode = "with autograd" if grad else "under no_grad"
        with torch.set_grad_enabled(grad):
            expect_error("float64 x, " + mode, lambda: new(ok_x.double()), TypeError, "float32")
            expect_error("x on the CPU, " + mode, lambda: new(ok_x.cpu()), ValueError, "CUDA")
            expect_error("non-contiguous x, " + mode, lambda: new(ok_x.transpose(3, 4)),
                         ValueError, "contiguous")
            expect_error("x with 4 channels, " + mode,
                         lambda: new(torch.rand((1, 4, 4, 5, 6), device=dev)), ValueError,
                         "3 channels")
            expect_error("4-D x, " + mode, lambda: new(ok_x[0]), ValueError, "5-D")
    expect_error("a batch of 65536", lambda: new(torch.rand((65536, 3, 1, 1, 1), device=dev)),
                 ValueError, "65535")
    big = torch.empty((8, 3, 129, 129, 129), device=dev)
    expect_error("a conv output past 2^31 elements", lambda: new(big), ValueError, "2^31")
    del big
    expect_error("stride 1", lambda: ch01.ModelNew(3, 16, 3, 1, 1, (1, 1, 1, 1)), ValueError,
                 "stride=2")
    expect_error("a bias of 16 elements", lambda: ch01.ModelNew(3, 16, 3, 2, 1, (16, 1, 1, 1)),
                 ValueError, "one element")
    expect_error("float64 parameters", lambda: ch01.ModelNew(*ARGS).to(dev).double()(ok_x),
                 TypeError, "float32")
    with torch.no_grad():
        y = new(ok_x)
    check(y.shape == (1, 1, 7, 9, 11) and bool(torch.isfinite(y).all()),
          "after the errors, a valid input runs: y of shape %s" % (tuple(y.shape),))

    # ---- python/README.md's example, as written, from the repository's root
    import re
    import subprocess
    readme = open(os.path.join(_lib.REPO, "python", "README.md"), encoding="utf-8").read()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S)
              if "handfused.ch01" in b]
    if check(len(blocks) == 1, "python/README.md holds one chapter-1 Python example"):
        run = subprocess.run([sys.executable, "-c", blocks[0]], cwd=_lib.REPO,
                             capture_output=True, text=True)
        check(run.returncode == 0, "python/README.md's example runs as written (exit %d)%s"
              % (run.returncode, ": " + run.stderr.strip()[-300:] if run.returncode else ""))


def sgd_checks(torch, ch01, Model, ARGS, dev):
    steps, lr, shape = 20, 0.1, (2, 3, 5, 6, 7)
    torch.manual_seed(7)
    ref = Model(*ARGS).to(dev)
    torch.manual_seed(7)
    new = ch01.ModelNew(*ARGS).to(dev)
    with torch.no_grad():  # inside the clamp's band, for both
        ref.bias.fill_(0.1)
        new.bias.fill_(0.1)
    p0 = [p.detach().clone() for p in ref.parameters()]
    gen = torch.Generator(device=dev)
    gen.manual_seed(11)
    data = [(torch.rand(shape, device=dev, generator=gen),
             2 * torch.rand((2, 1, 9, 11, 13), device=dev, generator=gen) - 1)
            for _ in range(steps)]
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
        moved = (p - s).norm().item()
        off = (q - p).norm().item()
        check(moved > 1e-3 * s.norm().item() and off <= 1e-3 * moved,
              "SGD: %s moved %.2e (%.1f%% of its norm); ModelNew's differs from Model's by %.1e "
              "of that move" % (name, moved, 100 * moved / s.norm().item(),
                                off / max(moved, 1e-300)))


if __name__ == "__main__":
    main()
    sys.exit(1 if failed else 0)
