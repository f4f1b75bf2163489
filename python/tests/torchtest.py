"""torchtest.py: the checks every chapter's PyTorch test (test_chNN.py) makes the same way.

PASS / FAIL / SKIP lines as the chapters' checks print them (common/run-tests.sh counts them);
`failed` counts the failures, exit_status() is the test's exit status. The numeric checks:
  out_close    an output of order 1: 1e-5 relative L2, 1e-4 at every element (the chapters'
               tolerances), no NaN
  sum_close    a sum (a gradient element): its error within tol of the sum of its terms'
               magnitudes, computed by the caller in float64
Only check, skip and expect_error run without PyTorch; the rest import it when called.
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


def exit_status():
    return 1 if failed else 0


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


def library_shapes(chapter, accepted, rejected):
    """Without PyTorch or a GPU: a missing library's message, then chNN_check_shape on each
    accepted shape and each (shape, word of its message) rejected. The library, or None (with a
    SKIP line) when it is not built."""
    with tempfile.TemporaryDirectory() as empty:
        expect_error("a missing library", lambda: _lib.load(chapter, empty), FileNotFoundError,
                     "make lib CH=%d" % chapter)
    try:
        lib = _lib.load(chapter)
    except FileNotFoundError as e:
        skip("the library's checks: %s" % e)
        return None
    name = "ch%02d_check_shape" % chapter
    shape_check, last_error = getattr(lib, name), getattr(lib, "ch%02d_last_error" % chapter)
    for shape in accepted:
        check(shape_check(*shape) == 0, "%s accepts %s" % (name, shape,))
    for shape, words in rejected:
        code = shape_check(*shape)
        err = last_error().decode()
        check(code == _lib.EINVAL and words in err,
              "%s rejects %s (code %d): %s" % (name, shape, code, err))
    return lib


def gpu_module(chapter):
    """handfused.chNN with its library loaded, or None after one SKIP line (no PyTorch, no CUDA
    device) or a FAIL (the module or its library missing)."""
    what = ("handfused.ch%02d on the GPU (output, gradients, SGD, torch.compile, bad inputs)"
            % chapter)
    try:
        import torch
    except ImportError:
        skip("%s: PyTorch is not installed" % what)
        return None
    if not torch.cuda.is_available():
        skip("%s: no CUDA device" % what)
        return None
    try:
        import importlib
        module = importlib.import_module("handfused.ch%02d" % chapter)
        _lib.load(chapter)
    except (ImportError, FileNotFoundError) as e:
        check(False, "import handfused.ch%02d and its library: %s" % (chapter, e))
        return None
    return module


def same_parameters(Model, ModelNew, args, seeds=(0, 5)):
    """After the same seed, ModelNew's parameters are Model's: names, order, shapes, values."""
    import torch
    for seed in seeds:
        torch.manual_seed(seed)
        ref = Model(*args)
        torch.manual_seed(seed)
        new = ModelNew(*args)
        a, b = list(ref.named_parameters()), list(new.named_parameters())
        same = [n for n, _ in a] == [n for n, _ in b] and all(
            p.shape == q.shape and torch.equal(p, q) for (_, p), (_, q) in zip(a, b))
        check(same, "seed %d: ModelNew's parameters are Model's, in its order (%s)"
              % (seed, ", ".join(n for n, _ in b)))


def out_close(what, got, ref):
    """an output of order 1: 1e-5 relative L2, 1e-4 at every element, no NaN"""
    import torch
    err = (got.double() - ref).abs()
    rel = (err.norm() / ref.norm().clamp_min(1e-300)).item()
    worst = err.max().item() if err.numel() else 0.0
    ok = bool(torch.isfinite(got).all()) and got.shape == ref.shape and rel <= 1e-5 \
        and worst <= 1e-4
    return check(ok, "%s: rel_l2 %.1e, max_abs %.1e" % (what, rel, worst))


def sum_ratio(got, ref, abs_sum):
    """the largest error over the sum of its terms' magnitudes; inf where got has a NaN"""
    import torch
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    return ((got.double() - ref).abs() / abs_sum.clamp_min(1e-300)).max().item()


def sum_close(what, got, ref, abs_sum, tol):
    """a sum: every element within tol of the sum of its terms' magnitudes"""
    ratio = sum_ratio(got, ref, abs_sum)
    return check(ratio <= tol, "%s: max error / sum of |terms| %.1e (at most %.0e)"
                 % (what, ratio, tol))


def on_two_streams(run):
    """run() (a list of tensors) on the current stream, then inside a side stream; both lists"""
    import torch
    runs = []
    for side in (False, True):
        st = torch.cuda.Stream() if side else torch.cuda.current_stream()
        st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st):
            out = run()
        torch.cuda.current_stream().wait_stream(st)
        torch.cuda.synchronize()
        runs.append(out)
    return runs


def compile_same(new, x):
    """torch.compile(new): its forward and gradients the same bits as eager's"""
    import torch
    try:
        compiled = torch.compile(new)
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


def sgd_compare(ref, new, data, lr):
    """SGD on the mean squared error to the targets, one step per (x, target) of data, for
    Model (ref) and ModelNew (new) from the same parameters: the losses within 1e-4 relative,
    each parameter moved, and ModelNew's within 1e-3 of that move of Model's."""
    import torch
    p0 = [p.detach().clone() for p in ref.parameters()]
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
          "%.1e relative" % (len(data), lr, losses["Model"][0], losses["Model"][-1], worst))
    for (name, p), q, s in zip(ref.named_parameters(), new.parameters(), p0):
        moved = (p - s).norm().item()
        off = (q - p).norm().item()
        check(moved > 1e-3 * s.norm().item() and off <= 1e-3 * moved,
              "SGD: %s moved %.2e (%.1f%% of its norm); ModelNew's differs from Model's by %.1e "
              "of that move" % (name, moved, 100 * moved / s.norm().item(),
                                off / max(moved, 1e-300)))


def bad_inputs(new, ok_x, channels_x, channels_word, short_x, short_word):
    """The inputs every chapter rejects, with autograd and under no_grad: float64, on the CPU,
    non-contiguous, the wrong channel count (channels_x), 4-D, and short_x (an extent the
    kernels do not take; None: none); and float64 parameters (a copy of new's)."""
    import copy
    import torch
    expect_error("float64 parameters", lambda: copy.deepcopy(new).double()(ok_x), TypeError,
                 "float32")
    for grad in (True, False):
        mode = "with autograd" if grad else "under no_grad"
        with torch.set_grad_enabled(grad):
            expect_error("float64 x, " + mode, lambda: new(ok_x.double()), TypeError, "float32")
            expect_error("x on the CPU, " + mode, lambda: new(ok_x.cpu()), ValueError, "CUDA")
            expect_error("non-contiguous x, " + mode, lambda: new(ok_x.transpose(3, 4)),
                         ValueError, "contiguous")
            expect_error("x with %d channels, %s" % (channels_x.shape[1], mode),
                         lambda: new(channels_x), ValueError, channels_word)
            expect_error("4-D x, " + mode, lambda: new(ok_x[0]), ValueError, "5-D")
            if short_x is not None:
                expect_error("x of shape %s, %s" % (tuple(short_x.shape), mode),
                             lambda: new(short_x), ValueError, short_word)


def main(chapter, library_checks, gpu_checks):
    """A chapter's test: library_checks() everywhere, gpu_checks(torch, module) where PyTorch
    and a GPU are (TF32 off: the references run in fp32 or float64), then exit with the status."""
    library_checks()
    module = gpu_module(chapter)
    if module is not None:
        import torch
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        gpu_checks(torch, module)
    sys.exit(exit_status())


def guarded(what, fn, *args):
    """fn(*args), its checks; an exception is a FAIL naming what raised"""
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001
        check(False, "%s: raised %s: %s" % (what, type(e).__name__, e))


def same_seed(Model, ModelNew, args, seed):
    """Model and ModelNew on the GPU, each built after torch.manual_seed(seed)"""
    import torch
    torch.manual_seed(seed)
    ref = Model(*args).cuda()
    torch.manual_seed(seed)
    return ref, ModelNew(*args).cuda()


def sgd_data(x_shape, y_shape, steps, seed=11):
    """steps pairs (x ~ U[0, 1), target ~ U[-1, 1)) from their own generator"""
    import torch
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    return [(torch.rand(x_shape, device="cuda", generator=gen),
             2 * torch.rand(y_shape, device="cuda", generator=gen) - 1) for _ in range(steps)]


def both_forwards(tag, new, x, y64, inference, training):
    """new(x) without and with autograd, each against the float64 y64 (inference, training:
    what runs, for the messages); x's copy that asks for a gradient, and the training y"""
    import torch
    with torch.no_grad():
        out_close("%s: y, inference forward (%s)" % (tag, inference), new(x), y64.detach())
    xg = x.clone().requires_grad_()
    y = new(xg)
    out_close("%s: y, training forward (%s)" % (tag, training), y, y64.detach())
    return xg, y


def step_on_two_streams(new, x, g):
    """a training step's y, dx and parameter gradients and the inference forward's y, on the
    current stream and on a side stream: [y, dx, gradients..., y without autograd], twice"""
    import torch

    def run():
        new.zero_grad()
        xg = x.clone().requires_grad_()
        y = new(xg)
        y.backward(g)
        with torch.no_grad():
            y_inf = new(x)
        return [y, xg.grad] + [p.grad.clone() for p in new.parameters()] + [y_inf]

    return on_two_streams(run)


def still_runs(new, ok_x, shape):
    """after the errors, a valid input runs"""
    import torch
    with torch.no_grad():
        y = new(ok_x)
    check(y.shape == shape and bool(torch.isfinite(y).all()),
          "after the errors, a valid input runs: y of shape %s" % (tuple(y.shape),))
