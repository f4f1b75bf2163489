"""_checks.py: the checks every chapter's PyTorch test (test_chNN.py) makes the same way.

PASS / FAIL / SKIP lines as the chapters' checks print them (common/run-tests.sh counts them);
`failed` counts the failures, exit_status() is the test's exit status. The numeric checks:
  out_close    an output of order 1: 1e-5 relative L2, 1e-4 at every element (the chapters'
               tolerances), no NaN
  sum_close    a sum (a gradient element): its error within tol of the sum of its terms'
               magnitudes, computed by the caller in float64
  tf32_close   a TF32 result (ModelNew(..., precision="tf32")): its error against float64
               within twice PyTorch's own TF32 error on the same tensors, plus a float32 floor,
               in relative L2 and in largest error (absolute, or over a scale: a sum's terms'
               magnitudes, a row's largest value)
Only check, skip and expect_error run without PyTorch; the rest import it when called.
"""
import contextlib
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


def tf32_entry(lib, chapter, name, args):
    """Without PyTorch: lib's name(*args) (a TF32 function, its tensors NULL) refuses with its
    reason: a CUDA error naming the function (no usable device), CAPI_ENOTSUP (a GPU or build
    without sm_90a code), or, where its kernels would run, EINVAL for the NULL x; never 0"""
    code = getattr(lib, name)(*args)
    err = getattr(lib, "ch%02d_last_error" % chapter)().decode()
    want = {_lib.ECUDA: name, _lib.ENOTSUP: "needs an sm_90a GPU", _lib.EINVAL: "x is NULL"}
    check(code in want and want[code] in err, "%s, its tensors NULL: code %d: %s"
          % (name, code, err))


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


def sum_close(what, got, ref, abs_sum, tol=1e-5):
    """a sum: every element within tol of the sum of its terms' magnitudes"""
    ratio = sum_ratio(got, ref, abs_sum)
    return check(ratio <= tol, "%s: max error / sum of |terms| %.1e (at most %.0e)"
                 % (what, ratio, tol))


def finds_planted(tag, what, got, ref, abs_sum, k, tol=1e-5):
    """the gradient check can fail: got with its element k (flat) moved by 1e-4 of that
    element's sum of |terms| must be found (its ratio above tol); what names the error (e.g.
    "dw with one weight")"""
    bad = got.clone()
    bad.view(-1)[k] += 1e-4 * abs_sum.reshape(-1)[k].float()
    ratio = sum_ratio(bad, ref, abs_sum)
    check(ratio > tol, "%s: the gradient check finds %s off by 1e-4 of its sum (ratio %.1e)"
          % (tag, what, ratio))


# ---- TF32 (precision="tf32"): within twice PyTorch's own TF32 error, plus a float32 floor
TF32_FACTOR = 2.0
# the floor (relative L2, scaled largest error) where the caller gives none: float32's rounding
# of the results and of their sums (2^-24 = 6e-8 each, over sums of thousands of terms), which
# both sides carry beside TF32's and which may outweigh it in a long sum (a gradient's error
# over its terms' magnitudes shrinks as TF32's errors cancel)
TF32_FLOOR = (1e-6, 1e-6)


def tf32_skip_reason(torch):
    """None on a GPU of compute capability 9.0, where the TF32 kernels (wgmma, sm_90a code) run;
    else why the TF32 checks are skipped"""
    cc = torch.cuda.get_device_capability()
    if cc == (9, 0):
        return None
    return ("precision=\"tf32\" needs compute capability 9.0 (H100, H200: its kernels are "
            "Hopper's wgmma, sm_90a code); this GPU is %d.%d" % cc)


@contextlib.contextmanager
def pytorch_tf32(torch):
    """PyTorch's default precision for convs inside (cudnn.allow_tf32 on: cuDNN may run a conv
    and its gradients in TF32); the flag as it was after"""
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = old


def tf32_errors(got, ref, scale=None):
    """(relative L2, largest error) of got against the float64 ref; the largest error of
    |got - ref| / scale where scale is given (ref's shape: a gradient's sum of |terms|, a row's
    largest |value|, broadcast); (inf, inf) where got has a NaN or another shape"""
    import torch
    if got.shape != ref.shape or not bool(torch.isfinite(got).all()):
        return float("inf"), float("inf")
    err = (got.double() - ref).abs()
    rel = (err.norm() / ref.norm().clamp_min(1e-300)).item()
    if scale is not None:
        err = err / scale.clamp_min(1e-300)
    return rel, (err.max().item() if err.numel() else 0.0)


def tf32_within(ours, peer, floor):
    """ours within TF32_FACTOR times peer's errors (each tf32_errors's) plus floor, both"""
    return all(o <= TF32_FACTOR * p + f for o, p, f in zip(ours, peer, floor))


def tf32_close(what, got, ref, peer, peer_ref, scale=None, floor=TF32_FLOOR):
    """got (ours, TF32) against the float64 ref, within twice the error of peer (PyTorch's
    result in TF32 on the same tensors) against peer_ref (ref, or the float64 derivative on the
    branch peer's run took), plus floor (relative L2, largest error scaled as tf32_errors);
    returns (ours, peer's), each (rel_l2, largest)"""
    ours, theirs = tf32_errors(got, ref, scale), tf32_errors(peer, peer_ref, scale)
    check(tf32_within(ours, theirs, floor),
          "%s: rel_l2 %.1e, largest error %.1e%s; PyTorch's TF32 %.1e, %.1e (at most %g x that "
          "+ %.0e, %.0e)" % (what, ours[0], ours[1], "" if scale is None else " (scaled)",
                             theirs[0], theirs[1], TF32_FACTOR, floor[0], floor[1]))
    return ours, theirs


def tf32_finds_planted(tag, what, got, ref, theirs, k, scale=None, floor=TF32_FLOOR):
    """the TF32 check can fail: got with its element k (flat) moved by twice the largest error
    the check allows there (theirs: PyTorch's errors, as tf32_close returned them) must fail it;
    what names the error (e.g. "y with one output")"""
    allowed = TF32_FACTOR * theirs[1] + floor[1]
    step = 2 * allowed * (1.0 if scale is None else scale.reshape(-1)[k].item())
    bad = got.clone()
    bad.view(-1)[k] += step
    ours = tf32_errors(bad, ref, scale)
    check(not tf32_within(ours, theirs, floor), "%s: the TF32 check finds %s off by %.1e "
          "(largest error %.1e, at most %.1e)" % (tag, what, step, ours[1], allowed))


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


def compile_same(new, x, grad_tol=0.0):
    """torch.compile(new): its forward the same bits as eager's, and each parameter's gradient
    (of the output's sum of squares) the same bits (grad_tol 0) or within grad_tol relative
    (a library conv whose engine is not deterministic)"""
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
        if grad_tol == 0:
            same_bwd = all(torch.equal(a, b) for a, b in zip(*grads))
            check(same_fwd and same_bwd, "torch.compile(ModelNew): forward and gradients the "
                  "same bits as eager")
            return
        rel = max(((a - b).norm() / a.norm().clamp_min(1e-30)).item() for a, b in zip(*grads))
        check(same_fwd and rel <= grad_tol, "torch.compile(ModelNew): forward the same bits as "
              "eager, gradients within %.1e (at most %.0e)" % (rel, grad_tol))
    except Exception as e:  # noqa: BLE001
        check(False, "torch.compile(ModelNew): raised %s: %s" % (type(e).__name__, e))


def sgd_compare(ref, new, data, lr, moved_min=1e-3, norm_floor=0.0, fixed=(), loss_fn=None):
    """SGD on loss_fn(y, target) (the mean squared error when None), one step per (x, target) of
    data, for
    Model (ref) and ModelNew (new) from the same parameters: the losses within 1e-4 relative,
    each parameter moved by more than moved_min of its norm at the start (of norm_floor where
    that is larger: a parameter that starts at zero), and ModelNew's within 1e-3 of that move of
    Model's. The parameters named in fixed have a gradient that is zero up to rounding (the
    model removes them): they stay within 1e-5 of their norm, in both."""
    import torch
    p0 = [p.detach().clone() for p in ref.parameters()]
    losses = {}
    for name, m in (("Model", ref), ("ModelNew", new)):
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        losses[name] = []
        for x, t in data:
            opt.zero_grad()
            loss = (m(x) - t).square().mean() if loss_fn is None else loss_fn(m(x), t)
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    worst = max(abs(a - b) / abs(a) for a, b in zip(losses["Model"], losses["ModelNew"]))
    check(worst <= 1e-4, "SGD, %d steps, lr %g: losses %.6f -> %.6f (Model), ModelNew's within "
          "%.1e relative" % (len(data), lr, losses["Model"][0], losses["Model"][-1], worst))
    for (name, p), q, s in zip(ref.named_parameters(), new.parameters(), p0):
        moved, norm = (p - s).norm().item(), s.norm().item()
        off = (q - p).norm().item()
        if name in fixed:
            check(moved <= 1e-5 * norm and off <= 1e-5 * norm, "SGD: %s stays put (its gradient "
                  "is zero up to rounding): moved %.1e, ModelNew's differs by %.1e"
                  % (name, moved, off))
            continue
        check(moved > moved_min * max(norm, norm_floor) and off <= 1e-3 * moved,
              "SGD: %s moved %.2e (norm at the start %.2e); ModelNew's differs from Model's by "
              "%.1e of that move" % (name, moved, norm, off / max(moved, 1e-300)))


def bad_inputs(new, ok_x, channels_x, channels_word, short_x, short_word):
    """The inputs every chapter rejects, with autograd and under no_grad: float64, on the CPU,
    non-contiguous (its last two dimensions swapped), the wrong channel count (channels_x), one
    dimension too few (5-D ok_x) or too many (4-D), and short_x (an extent the kernels do not
    take; None: none); and float64 parameters (a copy of new's)."""
    import copy
    import torch
    expect_error("float64 parameters", lambda: copy.deepcopy(new).double()(ok_x), TypeError,
                 "float32")
    for grad in (True, False):
        mode = "with autograd" if grad else "under no_grad"
        with torch.set_grad_enabled(grad):
            expect_error("float64 x, " + mode, lambda: new(ok_x.double()), TypeError, "float32")
            expect_error("x on the CPU, " + mode, lambda: new(ok_x.cpu()), ValueError, "CUDA")
            expect_error("non-contiguous x, " + mode, lambda: new(ok_x.transpose(-2, -1)),
                         ValueError, "contiguous")
            expect_error("x with %d channels, %s" % (channels_x.shape[1], mode),
                         lambda: new(channels_x), ValueError, channels_word)
            wrong = ok_x[0] if ok_x.dim() == 5 else ok_x[None]
            expect_error("%d-D x, %s" % (wrong.dim(), mode), lambda: new(wrong), ValueError,
                         "%d-D" % ok_x.dim())
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


def each_shape(case, shapes, seed=100):
    """case(shape, seed + i) for the i-th of shapes, an exception a FAIL naming the shape"""
    for i, shape in enumerate(shapes):
        guarded(str(shape), case, shape, seed + i)


def same_seed(Model, ModelNew, args, seed):
    """Model and ModelNew on the GPU, each built after torch.manual_seed(seed)"""
    import torch
    torch.manual_seed(seed)
    ref = Model(*args).cuda()
    torch.manual_seed(seed)
    return ref, ModelNew(*args).cuda()


def sgd_data(x_shape, y_shape, steps, seed=11, low=-1.0, high=1.0):
    """steps pairs (x ~ U[0, 1), target ~ U[low, high)) from their own generator"""
    import torch
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    return [(torch.rand(x_shape, device="cuda", generator=gen),
             (high - low) * torch.rand(y_shape, device="cuda", generator=gen) + low)
            for _ in range(steps)]


def float64_model(Model, args, new, shape):
    """Model on the GPU in float64 with new's parameters (built after new: it draws its own from
    the generator first, as before), then x ~ U[0, 1) of shape: (ref, x, x64), x64 being x in
    float64 and wanting its gradient"""
    import torch
    ref = Model(*args).cuda().double()
    ref.load_state_dict(new.state_dict())
    x = torch.rand(shape, device="cuda")
    return ref, x, x.double().requires_grad_()


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


def same_on_side_stream(new, x, g, grads):
    """step_on_two_streams: y of both forwards and the parameters' gradients (grads names them,
    e.g. "dw, dbias") the same bits on a side stream as on the default stream; dx, through the
    library conv (cuDNN's chosen engine may not be deterministic), within 1e-6 relative"""
    import torch
    runs = step_on_two_streams(new, x, g)
    same = all(torch.equal(a, b) for i, (a, b) in enumerate(zip(*runs)) if i != 1)
    dx_rel = ((runs[0][1] - runs[1][1]).norm() / runs[0][1].norm()).item()
    check(same and dx_rel <= 1e-6, "a side stream: y (both forwards), %s the same bits as on "
          "the default stream, dx within %.1e" % (grads, dx_rel))


def still_runs(new, ok_x, shape):
    """after the errors, a valid input runs"""
    import torch
    with torch.no_grad():
        y = new(ok_x)
    check(y.shape == shape and bool(torch.isfinite(y).all()),
          "after the errors, a valid input runs: y of shape %s" % (tuple(y.shape),))


def problem_model(chapter):
    """KernelBench's Model for the chapter's problem, as data/kernelbench.py writes it from the
    problem (its constructor, parameters in their order, its forward op by op); needs PyTorch"""
    sys.path.insert(0, os.path.join(_lib.REPO, "data"))
    import kernelbench
    return kernelbench.model_classes()["%02d" % chapter]


def readme_example(chapter, label="example", readme="python/README.md"):
    """readme's (a path from the repository's root) one Python block that imports
    handfused.chNN, run as written from the repository's root"""
    import re
    import subprocess
    text = open(os.path.join(_lib.REPO, readme), encoding="utf-8").read()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
              if "handfused.ch%02d" % chapter in b]
    if check(len(blocks) == 1, "%s holds one chapter-%d Python example" % (readme, chapter)):
        run = subprocess.run([sys.executable, "-c", blocks[0]], cwd=_lib.REPO,
                             capture_output=True, text=True)
        check(run.returncode == 0, "%s's %s runs as written (exit %d)%s"
              % (readme, label, run.returncode,
                 ": " + run.stderr.strip()[-300:] if run.returncode else ""))
