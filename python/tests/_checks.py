"""_checks.py: what every chapter's test (test_chNN.py) checks the same way.

PASS / FAIL / SKIP lines as the chapters' checks print them (common/run-tests.sh counts them);
the run of a test (run: the library's own checks, then one SKIP line without PyTorch or a GPU);
the errors a bad input must raise; a gradient element, a sum, against the sum of its terms'
magnitudes; ModelNew's parameters after a seed against Model's; SGD with both from one seed.
"""
import sys

_failed = [0]


def check(ok, msg):
    print(("PASS  " if ok else "FAIL  ") + msg, flush=True)
    _failed[0] += not ok
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


def run(chapter, library_checks, gpu_checks):
    """library_checks(); then, with PyTorch and a GPU, gpu_checks(torch, module) with
    handfused.chNN imported and its library loaded; one SKIP line otherwise. Exits 1 if any
    check failed."""
    library_checks()
    name = "handfused.ch%02d" % chapter
    what = "%s on the GPU (output, gradients, SGD, torch.compile, bad inputs)" % name
    try:
        import torch
    except ImportError:
        skip("%s: PyTorch is not installed" % what)
        torch = None
    if torch is not None and not torch.cuda.is_available():
        skip("%s: no CUDA device" % what)
    elif torch is not None:
        try:
            import importlib
            module = importlib.import_module(name)
            module._library()
        except (ImportError, FileNotFoundError) as e:
            check(False, "import %s and its library: %s" % (name, e))
        else:
            gpu_checks(torch, module)
    sys.exit(1 if _failed[0] else 0)


def sum_ratio(got, ref, abs_sum):
    """the largest error over the sum of its terms' magnitudes; inf where got has a NaN"""
    if not bool(got.isfinite().all()):
        return float("inf")
    return ((got.double() - ref).abs() / abs_sum.clamp_min(1e-300)).max().item()


def sum_close(what, got, ref, abs_sum, tol=1e-5):
    """a sum: every element within tol of the sum of its terms' magnitudes"""
    ratio = sum_ratio(got, ref, abs_sum)
    return check(ratio <= tol, "%s: max error / sum of |terms| %.1e (at most %.0e)"
                 % (what, ratio, tol))


def same_parameters(torch, Model, ModelNew, args):
    """after the same seed, ModelNew(*args) holds Model(*args)'s parameters, in its order"""
    for seed in (0, 5):
        torch.manual_seed(seed)
        ref = Model(*args)
        torch.manual_seed(seed)
        new = ModelNew(*args)
        a, b = list(ref.named_parameters()), list(new.named_parameters())
        same = [n for n, _ in a] == [n for n, _ in b] and all(
            p.shape == q.shape and torch.equal(p, q) for (_, p), (_, q) in zip(a, b))
        check(same, "seed %d: ModelNew's parameters are Model's, in its order (%s)"
              % (seed, ", ".join(n for n, _ in b)))


def sgd(torch, ref, new, data, lr, loss_fn, moved_min=1e-3):
    """SGD over data ((x, target) pairs) with Model (ref) and ModelNew (new), from the same
    parameters: each step's loss within 1e-4 relative, and every parameter moved (more than
    moved_min of its norm) and ending within 1e-3 of Model's move"""
    p0 = [p.detach().clone() for p in ref.parameters()]
    losses = {}
    for name, m in (("Model", ref), ("ModelNew", new)):
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        losses[name] = []
        for x, t in data:
            opt.zero_grad()
            loss = loss_fn(m(x), t)
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    worst = max(abs(a - b) / abs(a) for a, b in zip(losses["Model"], losses["ModelNew"]))
    check(worst <= 1e-4, "SGD, %d steps, lr %g: losses %.6f -> %.6f (Model), ModelNew's within "
          "%.1e relative" % (len(data), lr, losses["Model"][0], losses["Model"][-1], worst))
    for (name, p), q, s in zip(ref.named_parameters(), new.parameters(), p0):
        moved = (p - s).norm().item()
        off = (q - p).norm().item()
        check(moved > moved_min * s.norm().item() and off <= 1e-3 * moved,
              "SGD: %s moved %.2e (%.2g%% of its norm); ModelNew's differs from Model's by %.1e "
              "of that move" % (name, moved, 100 * moved / s.norm().item(),
                                off / max(moved, 1e-300)))


def on_both_streams(torch, run_step):
    """run_step() (it returns a list of tensors) on the current stream, then on a side stream,
    each after the work before it; the two lists"""
    runs = []
    for side in (False, True):
        st = torch.cuda.Stream() if side else torch.cuda.current_stream()
        st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st):
            out = run_step()
        torch.cuda.current_stream().wait_stream(st)
        torch.cuda.synchronize()
        runs.append(out)
    return runs


def compiled_as_eager(torch, new, x, grad_tol):
    """torch.compile(new) against new itself: the forward the same bits, each parameter's
    gradient (of the output's sum of squares: an upstream gradient of its own) the same bits
    (grad_tol 0) or within grad_tol relative"""
    try:
        compiled = torch.compile(new)
        with torch.no_grad():
            same_fwd = torch.equal(compiled(x), new(x))
        grads = []
        for m in (new, compiled):
            new.zero_grad()
            m(x).square().sum().backward()
            grads.append([p.grad.clone() for p in new.parameters()])
        if grad_tol == 0:
            ok, how = all(torch.equal(a, b) for a, b in zip(*grads)), "the same bits"
        else:
            rel = max(((a - b).norm() / a.norm().clamp_min(1e-30)).item() for a, b in zip(*grads))
            ok, how = rel <= grad_tol, "within %.1e (at most %.0e)" % (rel, grad_tol)
        check(same_fwd and ok, "torch.compile(ModelNew): forward the same bits as eager, "
              "gradients %s" % how)
    except Exception as e:  # noqa: BLE001
        check(False, "torch.compile(ModelNew): raised %s: %s" % (type(e).__name__, e))


def bad_inputs(torch, new, args, ok_x, bad_shapes):
    """new (a ModelNew(*args) on the GPU) refuses, with autograd and under no_grad, x of the wrong
    dtype, device, layout or rank, and each (what, x, words) of bad_shapes, with a message
    holding those words; then the parameters made float64"""
    for grad in (True, False):
        mode = "with autograd" if grad else "under no_grad"
        with torch.set_grad_enabled(grad):
            expect_error("float64 x, " + mode, lambda: new(ok_x.double()), TypeError, "float32")
            expect_error("x on the CPU, " + mode, lambda: new(ok_x.cpu()), ValueError, "CUDA")
            expect_error("non-contiguous x, " + mode, lambda: new(ok_x.transpose(3, 4)),
                         ValueError, "contiguous")
            expect_error("4-D x, " + mode, lambda: new(ok_x[0]), ValueError, "5-D")
            for what, x, words in bad_shapes:
                expect_error("%s, %s" % (what, mode), lambda b=x: new(b), ValueError, words)
    expect_error("float64 parameters", lambda: type(new)(*args).to(ok_x.device).double()(ok_x),
                 TypeError, "float32")


def guarded(what, fn, *args):
    """fn(*args); an exception it raises is a failed check naming what"""
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 (reported as the failure)
        check(False, "%s: raised %s: %s" % (what, type(e).__name__, e))


def shape_limits(chapter, accepted, rejected):
    """The library's chNN_check_shape, without PyTorch or a GPU: each shape of accepted taken,
    each (shape, words) of rejected refused with a message holding words; before that, a
    missing library's message names the make command. The library, or None (a SKIP line) when
    it is not built."""
    import tempfile
    from handfused import _lib
    with tempfile.TemporaryDirectory() as empty:
        expect_error("a missing library", lambda: _lib.load(chapter, empty), FileNotFoundError,
                     "make lib CH=%d" % chapter)
    try:
        lib = _lib.load(chapter)
    except FileNotFoundError as e:
        skip("the library's checks: %s" % e)
        return None
    name = "ch%02d_check_shape" % chapter
    last_error = getattr(lib, "ch%02d_last_error" % chapter)
    for shape in accepted:
        check(getattr(lib, name)(*shape) == 0, "%s accepts %s" % (name, shape))
    for shape, words in rejected:
        code = getattr(lib, name)(*shape)
        msg = last_error().decode()
        check(code == _lib.EINVAL and words in msg, "%s rejects %s (code %d): %s"
              % (name, shape, code, msg))
    return lib
