#!/usr/bin/env python3
"""KernelBench's protocol on each chapter's ModelNew (python/handfused): correctness and timing
against the problem's Model, eager and torch.compile, into data/<gpu>/kernelbench.csv.

  kernelbench.py [--chapter N] [--scopes S,...] [--precisions P,...] [--seed S] [--csv PATH]
                 [--export]
  kernelbench.py --self-test     the parts that need no PyTorch (arguments, statistics, CSV rows,
                                 each ModelNew's precision keyword)

Every chapter (or --chapter N's alone) whose handfused.chNN imports and whose library is built
(make lib CH=N) is run; any other is reported as skipped in one line. For each:
  models     Model (the problem's, defined below as KernelBench level 2 states it) and ModelNew,
             each built on the CPU right after torch.manual_seed(seed) with get_init_inputs(),
             then moved to the GPU: ModelNew must create Model's parameters in Model's order.
  precisions fp32 (cudnn and matmul TF32 off) and default (PyTorch's flags as shipped: cuDNN may
             run a conv in TF32; the benchmark's setting). ModelNew's kernels ignore the flags;
             it is checked and timed under each, beside Model in the same precision, built for
             it where its chapter has TF32 kernels (modelnew_kwargs): chapters 2 and 5's as
             ModelNew(..., precision="tf32") in default on a GPU of compute capability 9.0
             (their TF32 kernels are wgmma's, sm_90a: H100, H200; fp32's elsewhere, said in
             the output), precision="fp32" in fp32; every other chapter's, fp32 kernels, as
             ModelNew(*get_init_inputs()) in both. Chapter 5's TF32 is its inference forward:
             its forward and train_step scopes (autograd) run fp32 kernels in both precisions.
  correct    5 trials, each with a fresh seed (drawn from seed), inputs torch.rand at the
             problem's shape (get_inputs(), on the CPU, then to the GPU): torch.allclose(out,
             Model's, atol=1e-4, rtol=1e-4) and the same shape; "5/5" counts the trials passed.
             The benchmark checks under torch.no_grad(); here also with autograd recording, the
             path the forward and train_step scopes time.
  timing     CUDA events around each call: 3 warm-up calls (each waited for), then 1 + trials
             timed calls, the first discarded; before each, the device is waited for and L2 is
             flushed by writing a 256 MB buffer. mean, median, min, max and std of the kept
             trials, in ms. cuDNN autotuning (cudnn.benchmark) stays off, PyTorch's default.
  scopes     forward          y = model(x), autograd recording (parameters require grad, x does
                              not): how the benchmark times a model
             forward_no_grad  the same under torch.no_grad(): inference
             train_step       model(x).backward(g), g a fixed upstream gradient (seeded randn),
                              x requiring grad (the layer inside a network: dx is computed);
                              gradients set to None before each call, outside the timed region
  models     eager (Model), compile (torch.compile(Model), inductor's default mode; compiled
             afresh in each precision, caches off: see pytorch_peer.compiled), ModelNew
  speedup    Model's mean over ModelNew's, against eager and against compile, same scope and
             precision.
  --export   also the chapter's export in the benchmark's submission format
             (build/kernelbench/NN_<problem>.py, make kernelbench-export CH=N): its source run
             in a namespace of its own, as the benchmark loads a submission (load_inline
             compiles it then: its time is printed), its ModelNew checked and timed as the
             model "export", beside the package's ModelNew. It is built as the benchmark
             builds a submission, ModelNew(*get_init_inputs()): fp32 kernels (precision's
             default) in both precisions.
Rows replace those of the same gpu, chapter, scope, model and precision (pytorch_peer's CsvFile),
in data/<gpu>/kernelbench.csv, or data/<gpu>-mine/ where data/<gpu>/ holds the recorded runs and
RECORD is not set (common/datadir.sh's rule). The first call of each compiled model includes its
compile; its time is printed, as is each chapter's.
Exit 2: usage error, no PyTorch, no CUDA, or no chapter to run; 1: a ModelNew failed a check or
raised (its rows are still written); 0 otherwise.
"""
import argparse
import ast
import contextlib
import csv
import datetime
import importlib
import io
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))  # the repository's data/ folder
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import pytorch_peer as peer  # noqa: E402 (imports without numpy or PyTorch)

torch = peer.torch

SCOPES = ("forward", "forward_no_grad", "train_step")
MODELS = ("eager", "compile", "ModelNew")
EXPORT_DIR = os.path.join(REPO, "build", "kernelbench")
TRIALS, CHECK_TRIALS, SEED, ATOL, RTOL = 100, 5, 42, 1e-4, 1e-4  # the benchmark's values
COLUMNS = ("gpu,chapter,problem,shape,scope,model,precision,correct,mean_ms,median_ms,min_ms,"
           "max_ms,std_ms,trials,speedup_eager,speedup_compile,date,torch_version").split(",")

# KernelBench level 2's problems, by chapter: the file's name, get_init_inputs(), and the shape
# get_inputs() draws x at (torch.rand)
PROBLEMS = {
    "01": dict(problem="58_ConvTranspose3d_LogSumExp_HardSwish_Subtract_Clamp",
               init=(3, 16, 3, 2, 1, (1, 1, 1, 1)), shape=(128, 3, 16, 32, 32)),
    "02": dict(problem="43_Conv3d_Max_LogSumExp_ReLU",
               init=(32, 64, 3, 1, 1), shape=(4, 32, 32, 128, 128)),
    "03": dict(problem="79_Conv3d_Multiply_InstanceNorm_Clamp_Multiply_Max",
               init=(3, 16, 3, (16, 1, 1, 1), -1.0, 1.0), shape=(128, 3, 16, 32, 32)),
    "04": dict(problem="92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp",
               init=(8, 64, 3, 16), shape=(128, 8, 128, 128)),
    "05": dict(problem="38_ConvTranspose3d_AvgPool_Clamp_Softmax_Multiply",
               init=(32, 64, 3, 2, 1, 1, 2, 0.0, 1.0), shape=(32, 32, 32, 64, 64)),
}


# the chapters whose ModelNew takes precision="tf32" (handfused.ch02, ch05): TF32 kernels on
# Hopper's wgmma, sm_90a code
TF32_CHAPTERS = ("02", "05")


def modelnew_kwargs(key, prec, sm90a):
    """ModelNew's keyword arguments for chapter key checked and timed in precision prec
    ("fp32" or "default"), sm90a: whether the GPU is compute capability 9.0. PyTorch's default
    runs its convs in TF32, so ModelNew does where it has TF32 kernels and they run here
    (precision="tf32"); in fp32 its fp32 kernels (precision="fp32"); a chapter without TF32
    kernels takes no keyword: {} (ModelNew(*get_init_inputs()), as the benchmark builds it)."""
    if key not in TF32_CHAPTERS:
        return {}
    return {"precision": "tf32" if prec == "default" and sm90a else "fp32"}


def die(msg, code=2):
    print("kernelbench: " + msg, file=sys.stderr)
    sys.exit(code)


def model_classes():
    """The problems' Model classes (they need PyTorch): the modules in the order the problem
    creates them, the forward op by op as it states it."""
    nn = torch.nn

    class Model58(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias_shape):
            super().__init__()
            self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size,
                                                     stride=stride, padding=padding)
            self.bias = nn.Parameter(torch.randn(1, 1, 1, 1))  # the problem ignores bias_shape

        def forward(self, x):
            x = torch.logsumexp(self.conv_transpose(x), dim=1, keepdim=True)
            x = x * torch.sigmoid(x + 3) / 6
            return torch.clamp(x - self.bias, min=-1, max=1)

    class Model43(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, stride, padding):
            super().__init__()
            self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, stride=stride,
                                  padding=padding)
            self.max_pool = nn.MaxPool3d(kernel_size=2, stride=2)

        def forward(self, x):
            x = self.max_pool(self.conv(x))
            return torch.relu(torch.logsumexp(x, dim=1, keepdim=True))

    class Model79(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, multiplier_shape, clamp_min,
                     clamp_max):
            super().__init__()
            self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
            self.multiplier = nn.Parameter(torch.randn(multiplier_shape))
            self.instance_norm = nn.InstanceNorm3d(out_channels)
            self.clamp_min, self.clamp_max = clamp_min, clamp_max

        def forward(self, x):
            x = self.instance_norm(self.conv(x) * self.multiplier)
            x = torch.clamp(x, self.clamp_min, self.clamp_max) * self.multiplier
            return torch.max(x, dim=1)[0]

    class Model92(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, groups, eps=1e-5):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
            self.group_norm = nn.GroupNorm(groups, out_channels, eps=eps)
            self.tanh = nn.Tanh()
            self.hard_swish = nn.Hardswish()

        def forward(self, x):
            c = self.conv(x)
            r = c + self.hard_swish(self.tanh(self.group_norm(c)))  # the residual adds c
            return torch.logsumexp(r, dim=1, keepdim=True)

    class Model38(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, stride, padding,
                     output_padding, pool_kernel_size, clamp_min, clamp_max):
            super().__init__()
            self.avg_pool = nn.AvgPool3d(pool_kernel_size)
            self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size,
                                                     stride=stride, padding=padding,
                                                     output_padding=output_padding)
            self.clamp_min, self.clamp_max = clamp_min, clamp_max
            self.scale = nn.Parameter(torch.ones(1, out_channels, 1, 1, 1))

        def forward(self, x):
            x = torch.clamp(self.conv_transpose(self.avg_pool(x)), self.clamp_min,
                            self.clamp_max)
            b, c, d, h, w = x.shape
            x = torch.softmax(x.view(b, c, -1), dim=2)  # over each channel's positions
            return x.view(b, c, d, h, w) * self.scale

    return {"01": Model58, "02": Model43, "03": Model79, "04": Model92, "05": Model38}


# ---- pure Python: arguments, statistics, rows (the self-test's subjects) ----
def chapter_key(text):
    key = "%02d" % int(text) if text.strip().isdigit() else text
    if key not in PROBLEMS:
        raise argparse.ArgumentTypeError("unknown chapter %r (1 to 5)" % text)
    return key


def scope_list(text):
    want = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in want if s not in SCOPES]
    if bad or not want:
        raise argparse.ArgumentTypeError("wants a comma-separated list of %s, got %r"
                                         % (", ".join(SCOPES), text))
    return [s for s in SCOPES if s in want]


def positive(text):
    if not text.isdigit() or int(text) < 2:
        raise argparse.ArgumentTypeError("wants an integer of at least 2, got %r" % text)
    return int(text)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="kernelbench", description=__doc__.split("\n")[0])
    ap.add_argument("--chapter", type=chapter_key,
                    help="chapter number, 1 to 5 (default: every chapter with a ModelNew)")
    ap.add_argument("--scopes", type=scope_list, default=list(SCOPES),
                    help="comma-separated, of %s (default: all)" % ", ".join(SCOPES))
    ap.add_argument("--precisions", default=",".join(peer.PRECISIONS),
                    help="comma-separated: fp32 (TF32 off; every ModelNew's fp32 kernels), "
                    "default (PyTorch's flags as shipped, its convs in TF32; chapters %s's "
                    "ModelNew(..., precision=\"tf32\") on compute capability 9.0); default: "
                    "both" % " and ".join(str(int(k)) for k in TF32_CHAPTERS))
    ap.add_argument("--seed", type=int, default=SEED,
                    help="the models' seed and the correctness trials' source (default %d, "
                    "the benchmark's)" % SEED)
    ap.add_argument("--trials", type=positive, default=TRIALS,
                    help="timed trials kept (default %d)" % TRIALS)
    ap.add_argument("--csv", help="replaces rows of the same gpu, chapter, scope, model and "
                    "precision, keeps the others (default: data/<gpu>/kernelbench.csv)")
    ap.add_argument("--export", action="store_true",
                    help="also check and time build/kernelbench/NN_<problem>.py's ModelNew "
                    "(make kernelbench-export CH=N) as the model \"export\"")
    ap.add_argument("--self-test", action="store_true",
                    help="check the argument parsing, statistics and CSV rows; needs no PyTorch")
    args = ap.parse_args(argv)
    args.chapters = [args.chapter] if args.chapter else sorted(PROBLEMS)
    args.precisions = peer.precision_list(args.precisions)  # exit 2 on a bad list
    return args


def summarize(ms):
    """The statistics of the kept trials (ms)."""
    return dict(mean=statistics.fmean(ms), median=statistics.median(ms), min=min(ms),
                max=max(ms), std=statistics.pstdev(ms), trials=len(ms))


def speedup(model_mean, new_mean):
    """Model's mean over ModelNew's (how many times faster ModelNew is)."""
    return model_mean / new_mean if new_mean > 0 else float("nan")


class KbCsv(peer.CsvFile):
    """kernelbench.csv: a row replaces the one of the same gpu, chapter, scope, model and
    precision."""
    KEY = ("gpu", "chapter", "scope", "model", "precision")


# ---- the protocol (PyTorch and CUDA) ----
def set_seed(seed):
    torch.manual_seed(seed)  # seeds the CPU and every CUDA device
    torch.cuda.manual_seed_all(seed)


def get_inputs(spec):
    return torch.rand(*spec["shape"])  # on the CPU, as the problem file draws it


class KbTimer:
    """CUDA events around each call, the benchmark's way: 3 warm-ups, each waited for; then
    1 + trials calls, each after waiting for the device and writing a 256 MB buffer (it evicts
    L2: 50 MB on an H100), the first call discarded."""
    FLUSH_BYTES, WARMUPS, DISCARD = 256 << 20, 3, 1

    def __init__(self, trials):
        self.trials = trials
        self.buf = torch.empty(self.FLUSH_BYTES // 8, dtype=torch.int64, device="cuda")
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def time(self, run, reset):
        """(the kept trials' ms, the first warm-up's wall seconds); reset() runs before each
        call, outside the timed region."""
        first = None
        for i in range(self.WARMUPS):
            reset()
            t0 = time.perf_counter()
            run()
            torch.cuda.synchronize()
            first = time.perf_counter() - t0 if i == 0 else first
        ms = []
        for i in range(self.DISCARD + self.trials):
            reset()
            torch.cuda.synchronize()
            self.buf.fill_(i)
            self.start.record()
            run()
            self.end.record()
            torch.cuda.synchronize()
            if i >= self.DISCARD:
                ms.append(self.start.elapsed_time(self.end))
        return ms, first


def load_modelnew(key):
    """(ModelNew, None), or (None, why it is skipped)."""
    if os.path.join(REPO, "python") not in sys.path:
        sys.path.insert(0, os.path.join(REPO, "python"))
    try:
        module = importlib.import_module("handfused.ch" + key)
    except ImportError as e:
        return None, "no handfused.ch%s (%s)" % (key, e)
    try:
        importlib.import_module("handfused._lib").load(int(key))
    except FileNotFoundError as e:  # the message names the make command
        return None, str(e)
    except Exception as e:  # noqa: BLE001 (a library that does not load: the reason shown)
        return None, "build/libch%s.so does not load: %s: %s" % (key, type(e).__name__, e)
    if not hasattr(module, "ModelNew"):
        return None, "handfused.ch%s has no ModelNew" % key
    return module.ModelNew, None


def load_export(key):
    """(the export's ModelNew, None), or (None, why not): its file's source run in a fresh
    namespace, as the benchmark runs a submission; load_inline compiles it there."""
    path = os.path.join(EXPORT_DIR, "%s_%s.py" % (key, PROBLEMS[key]["problem"]))
    if not os.path.isfile(path):
        return None, "%s is not there (make kernelbench-export CH=%d)" % (
            os.path.relpath(path, REPO), int(key))
    with open(path) as f:
        source = f.read()
    namespace = {"__name__": "kernelbench_export_ch" + key}
    t0 = time.perf_counter()
    try:
        exec(compile(source, path, "exec"), namespace)  # noqa: S102 (the benchmark's way)
    except Exception as e:  # noqa: BLE001 (a build that fails: its reason shown)
        return None, "%s did not load: %s: %s" % (os.path.relpath(path, REPO),
                                                   type(e).__name__, e)
    print("chapter %s: export %s loaded (load_inline) in %.1f s"
          % (key, os.path.relpath(path, REPO), time.perf_counter() - t0), flush=True)
    if "ModelNew" not in namespace:
        return None, "%s defines no ModelNew" % os.path.relpath(path, REPO)
    return namespace["ModelNew"], None


def same_parameters(model, new):
    """None when ModelNew holds Model's parameters in Model's order, shapes and values; else
    what differs."""
    a, b = list(model.named_parameters()), list(new.named_parameters())
    if len(a) != len(b):
        return "Model has %d parameters, ModelNew %d" % (len(a), len(b))
    for (na, pa), (nb, pb) in zip(a, b):
        if pa.shape != pb.shape or not torch.equal(pa.detach(), pb.detach()):
            return "Model's %s %s differs from ModelNew's %s %s" % (
                na, tuple(pa.shape), nb, tuple(pb.shape))
    return None


def check_outputs(ref, model, xs, grad):
    """(trials passed, max |difference|, the first call's seconds, an error or None): model's
    output on each x against ref's (lists of tensors on the GPU), allclose at the benchmark's
    tolerances; autograd recording when grad."""
    passed, worst, first = 0, 0.0, None
    for x, want in zip(xs, ref):
        t0 = time.perf_counter()
        try:
            with torch.set_grad_enabled(grad):
                got = model(x).detach()
        except Exception as e:  # noqa: BLE001 (reported, counted as a failure)
            return passed, worst, first, "%s: %s" % (type(e).__name__, e)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0 if first is None else first
        if got.shape != want.shape:
            return passed, worst, first, "output shape %s, Model's %s" % (
                tuple(got.shape), tuple(want.shape))
        passed += bool(torch.allclose(got, want, atol=ATOL, rtol=RTOL))
        diff = float((got - want).abs().max())
        worst = diff if diff != diff or worst != worst else max(worst, diff)  # NaN stays
        del got
    return passed, worst, first, None


def scope_run(scope, model, x, xg, g):
    """(run, reset) for one scope."""
    if scope == "forward":
        def run():
            with torch.enable_grad():
                model(x)
        return run, lambda: None
    if scope == "forward_no_grad":
        def run():
            with torch.no_grad():
                model(x)
        return run, lambda: None

    def run():
        with torch.enable_grad():
            model(xg).backward(g)

    def reset():
        model.zero_grad(set_to_none=True)
        xg.grad = None
    return run, reset


def run_chapter(key, args, ModelNew, timer, out, gpu, Export=None):
    """Checks and times one chapter (Export: the export's ModelNew, or None); returns the
    number of ModelNew (and export) failures."""
    spec, t_chapter, failures = PROBLEMS[key], time.perf_counter(), 0
    shape_s = "x".join(map(str, spec["shape"]))
    date = datetime.date.today().isoformat()
    print("chapter %s: KernelBench level 2 #%s at %s, seed %d, %s, torch %s"
          % (key, spec["problem"], shape_s, args.seed, torch.cuda.get_device_name(),
             torch.__version__), flush=True)
    set_seed(args.seed)
    model = model_classes()[key](*spec["init"]).cuda()
    sm90a = torch.cuda.get_device_capability() == (9, 0)
    news = {}  # precision -> ModelNew, built for it (modelnew_kwargs)
    for prec in args.precisions:
        kw = modelnew_kwargs(key, prec, sm90a)
        call = "ModelNew(%s%s)" % (", ".join(map(repr, spec["init"])),
                                  "".join(", %s=%r" % kv for kv in kw.items()))
        set_seed(args.seed)
        try:
            news[prec] = ModelNew(*spec["init"], **kw).cuda()
        except Exception as e:  # noqa: BLE001
            print("chapter %s: %s raised %s: %s" % (key, call, type(e).__name__, e))
            return 1
        differs = same_parameters(model, news[prec])
        print("  %-7s %s%s; parameters after the same seed: %s"
              % (prec, call, " (TF32 kernels are wgmma's, sm_90a: not on this GPU)"
                 if key in TF32_CHAPTERS and prec == "default" and not sm90a else "",
                 "Model's, in its order" if differs is None else "DIFFER: " + differs))
        failures += differs is not None
    exported = None
    if Export is not None:
        set_seed(args.seed)
        try:
            exported = Export(*spec["init"]).cuda()
        except Exception as e:  # noqa: BLE001
            print("chapter %s: the export's ModelNew(%s) raised %s: %s"
                  % (key, spec["init"], type(e).__name__, e))
            failures += 1
        if exported is not None:
            differs = same_parameters(model, exported)
            print("  export: parameters after the same seed: %s"
                  % ("Model's, in its order" if differs is None else "DIFFER: " + differs))
            failures += differs is not None
    names = MODELS + (("export",) if exported is not None else ())
    gen = torch.Generator().manual_seed(args.seed)
    seeds = [int(s) for s in torch.randint(0, 2 ** 31 - 1, (CHECK_TRIALS,), generator=gen)]
    xs = []
    for s in seeds:
        set_seed(s)
        xs.append(get_inputs(spec).cuda())
    set_seed(args.seed)
    x = get_inputs(spec).cuda()
    xg = x.clone().requires_grad_(True)
    modes = sorted({s == "forward_no_grad" for s in args.scopes})  # True: no_grad
    results, verdicts = {}, {}  # (scope, precision, model) -> summary, correct
    for prec in args.precisions:
        peer.set_precision(prec)
        torch._dynamo.reset()
        models = {"eager": model, "compile": torch.compile(model), "ModelNew": news[prec],
                  "export": exported}
        with torch.no_grad():  # the reference: Model eager in this precision
            ref = [model(t) for t in xs]
        for t in ref:
            if float(t.min()) == float(t.max()):
                print("  note: Model's output is constant (%g) for one trial's x: the check "
                      "tests little there" % float(t.min()))
                break
        verdict = {}
        for no_grad in modes:
            for name in ("compile",) + names[2:]:
                n, worst, first, err = check_outputs(ref, models[name], xs, not no_grad)
                verdict[(no_grad, name)] = "%d/%d" % (n, len(xs)) if err is None else "error"
                print("  %-7s %-8s %-9s check (%s): %d/%d trials allclose, max |diff| %.3g%s%s"
                      % (prec, name, "no_grad" if no_grad else "autograd",
                         "vs Model eager", n, len(xs), worst,
                         "" if err is None else ", " + err,
                         ", first call %.1f s (compiling)" % first
                         if name == "compile" and first is not None else ""), flush=True)
                if name in ("ModelNew", "export") and (err is not None or n < len(xs)):
                    failures += 1
        del ref
        g = None
        for scope in args.scopes:
            if scope == "train_step" and g is None:
                with torch.no_grad():
                    shape = model(x).shape
                gg = torch.Generator(device="cuda").manual_seed(args.seed + 1)
                g = torch.randn(shape, device="cuda", generator=gg)
            for name in names:
                correct = "reference" if name == "eager" else \
                    verdict[(scope == "forward_no_grad", name)]
                if correct == "error":
                    print("  %-7s %-16s %-8s not timed: it raised in the check"
                          % (prec, scope, name))
                    continue
                run, reset = scope_run(scope, models[name], x, xg, g)
                try:
                    ms, first = timer.time(run, reset)
                except Exception as e:  # noqa: BLE001 (a backward the check did not run)
                    print("  %-7s %-16s %-8s raised %s: %s" % (prec, scope, name,
                                                               type(e).__name__, e))
                    failures += name in ("ModelNew", "export")
                    reset()
                    continue
                reset()
                st = results[(scope, prec, name)] = summarize(ms)
                verdicts[(scope, prec, name)] = correct
                row = dict(gpu=gpu, chapter=key, problem=spec["problem"], shape=shape_s,
                           scope=scope, model=name, precision=prec, correct=correct,
                           mean_ms="%.6g" % st["mean"], median_ms="%.6g" % st["median"],
                           min_ms="%.6g" % st["min"], max_ms="%.6g" % st["max"],
                           std_ms="%.4g" % st["std"], trials=st["trials"], speedup_eager="",
                           speedup_compile="", date=date, torch_version=torch.__version__)
                if name in ("ModelNew", "export"):
                    for m in ("eager", "compile"):
                        if (scope, prec, m) in results:
                            row["speedup_" + m] = "%.4g" % speedup(
                                results[(scope, prec, m)]["mean"], st["mean"])
                out.put(row)
                print("  %-7s %-16s %-8s mean %9.4f ms  median %9.4f  min %9.4f  max %9.4f%s"
                      % (prec, scope, name, st["mean"], st["median"], st["min"], st["max"],
                         "  (first call %.1f s: compiling)" % first
                         if name == "compile" and first > 1 else ""), flush=True)
        del models
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    print_table(key, args, results, verdicts)
    if exported is not None:
        for scope in args.scopes:
            for prec in args.precisions:
                a, b = (results.get((scope, prec, m)) for m in ("ModelNew", "export"))
                if a and b:
                    print("export  %-16s %-8s mean %9.4f ms, ModelNew's %9.4f (%.3fx), correct %s"
                          % (scope, prec, b["mean"], a["mean"], b["mean"] / a["mean"],
                             verdicts.get((scope, prec, "export"), "-")))
        print()
    print("chapter %s: %.0f s; rows -> %s" % (key, time.perf_counter() - t_chapter, out.path))
    del model, news, exported, xs, x, xg
    torch.cuda.empty_cache()
    return failures


def print_table(key, args, results, verdicts):
    print("\nchapter %s, mean ms of %d trials; speedup = Model's mean / ModelNew's" % (
        key, args.trials))
    print("%-16s %-8s %10s %10s %10s %9s %10s  %s" % (
        "scope", "prec", "eager", "compile", "ModelNew", "vs eager", "vs compile",
        "correct (ModelNew, compile)"))
    for scope in args.scopes:
        for prec in args.precisions:
            mean = {m: results[(scope, prec, m)]["mean"] if (scope, prec, m) in results else None
                    for m in MODELS}
            cell = lambda v: "%10.4f" % v if v is not None else "%10s" % "-"  # noqa: E731
            sp = lambda m: "%.2fx" % speedup(mean[m], mean["ModelNew"]) \
                if mean[m] is not None and mean["ModelNew"] is not None else "-"  # noqa: E731
            print("%-16s %-8s %s %s %s %9s %10s  %s, %s" % (
                scope, prec, cell(mean["eager"]), cell(mean["compile"]), cell(mean["ModelNew"]),
                sp("eager"), sp("compile"), verdicts.get((scope, prec, "ModelNew"), "-"),
                verdicts.get((scope, prec, "compile"), "-")))
    print()


def main(argv=None):
    args = parse_args(argv)
    if args.self_test:
        return self_test()
    if torch is None:
        die("PyTorch is not installed (python3 -c 'import torch' failed)")
    if not torch.cuda.is_available():
        die("CUDA is not available: the protocol times on a GPU")
    peer.DEFAULT_FLAGS = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    runnable = []
    for key in args.chapters:
        cls, why = load_modelnew(key)
        if cls is None:
            print("chapter %s: skipped: %s" % (key, why))
        else:
            runnable.append((key, cls))
    if not runnable:
        die("no chapter to run: none has a ModelNew and a built library")
    peer.compile_caches_off()
    gpu = peer.gpu_tag(torch.cuda.get_device_name())
    out = KbCsv(args.csv or os.path.join(peer.data_dir(gpu), "kernelbench.csv"), COLUMNS)
    timer, t0, failures = KbTimer(args.trials), time.perf_counter(), 0
    for key, cls in runnable:
        export = None
        if args.export:
            export, why = load_export(key)
            if export is None:
                print("chapter %s: export: %s" % (key, why))
                failures += 1
        failures += run_chapter(key, args, cls, timer, out, gpu, export)
    print("kernelbench: %d chapter(s) in %.0f s, rows in %s%s" % (
        len(runnable), time.perf_counter() - t0, out.path,
        "; %d ModelNew check(s) FAILED" % failures if failures else ""))
    return 1 if failures else 0


# ---- self-test: no PyTorch, no GPU ----
def self_test():
    failed = 0

    def check(ok, msg):
        nonlocal failed
        print(("PASS  " if ok else "FAIL  ") + "kernelbench.py: " + msg)
        failed += not ok

    def exit_code(argv):
        """parse_args(argv)'s exit status, its stderr swallowed; None when it returned."""
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                parse_args(argv)
            except SystemExit as e:
                return e.code
        return None

    a = parse_args([])
    check(a.chapters == ["01", "02", "03", "04", "05"] and a.scopes == list(SCOPES)
          and a.precisions == ["fp32", "default"] and a.trials == 100 and a.seed == 42,
          "no arguments: every chapter, scope and precision, 100 trials, seed 42")
    a = parse_args(["--chapter", "3", "--scopes", "train_step,forward", "--precisions", "fp32"])
    check(a.chapters == ["03"] and a.scopes == ["forward", "train_step"]
          and a.precisions == ["fp32"], "--chapter 3 --scopes train_step,forward --precisions "
          "fp32: chapter 03, the scopes in their order, fp32 alone")
    check(parse_args(["--chapter", "05"]).chapters == ["05"], "--chapter 05 is chapter 5")
    check(not a.export and parse_args(["--export"]).export,
          "--export adds the export's ModelNew (off without it)")
    for bad in (["--chapter", "6"], ["--chapter", "x"], ["--scopes", "forward,backward"],
                ["--scopes", ","], ["--precisions", "tf32"], ["--trials", "1"], ["--bogus"]):
        check(exit_code(bad) == 2, "%s rejected with exit 2" % " ".join(bad))
    want = {("02", "default", True): {"precision": "tf32"},
            ("05", "default", True): {"precision": "tf32"},
            ("02", "fp32", True): {"precision": "fp32"}, ("05", "fp32", True): {"precision": "fp32"},
            ("02", "default", False): {"precision": "fp32"},
            ("05", "default", False): {"precision": "fp32"},
            ("01", "default", True): {}, ("03", "default", True): {}, ("04", "fp32", True): {}}
    got = {k: modelnew_kwargs(*k) for k in want}
    check(got == want, "ModelNew's precision: chapters 2 and 5 precision=\"tf32\" in default on "
          "compute capability 9.0, \"fp32\" in fp32 and on other GPUs; chapters 1, 3, 4 no "
          "keyword" + ("" if got == want else " (got %s)" % got))
    for key in sorted(PROBLEMS):  # the modules take the keyword where the choice gives it
        with open(os.path.join(REPO, "python", "handfused", "ch%s.py" % key)) as fh:
            tree = ast.parse(fh.read())
        init = [f for c in tree.body if isinstance(c, ast.ClassDef) and c.name == "ModelNew"
                for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
        kwonly = {a.arg: d.value if isinstance(d, ast.Constant) else None
                  for f in init for a, d in zip(f.args.kwonlyargs, f.args.kw_defaults)}
        ok = kwonly == ({"precision": "fp32"} if key in TF32_CHAPTERS else {})
        check(len(init) == 1 and ok, "handfused.ch%s's ModelNew takes %s" % (
            key, "a keyword-only precision, \"fp32\" by default" if key in TF32_CHAPTERS
            else "KernelBench's arguments alone (no precision keyword)"))
    st = summarize([4.0, 1.0, 2.0, 3.0])
    check((st["mean"], st["median"], st["min"], st["max"], st["trials"]) == (2.5, 2.5, 1.0, 4.0, 4)
          and abs(st["std"] - 1.25 ** 0.5) < 1e-12,
          "summarize([4, 1, 2, 3]): mean 2.5, median 2.5, min 1, max 4, std 1.118")
    check(speedup(6.0, 2.0) == 3.0 and speedup(1.0, 0.0) != speedup(1.0, 0.0),
          "speedup: Model's mean over ModelNew's; nan for a zero time")

    def row(chapter, scope, model, prec, mean):
        r = {c: "" for c in COLUMNS}
        r.update(gpu="h100", chapter=chapter, scope=scope, model=model, precision=prec,
                 mean_ms=mean)
        return r

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "sub", "kernelbench.csv")
        f = KbCsv(path, COLUMNS)
        f.put(row("01", "forward", "eager", "fp32", "9"))
        f.put(row("01", "forward", "eager", "default", "7"))
        f.put(row("02", "forward", "eager", "fp32", "5"))
        with contextlib.redirect_stdout(io.StringIO()):
            KbCsv(path, COLUMNS).put(row("01", "forward", "eager", "fp32", "8"))  # a rerun
        with open(path, newline="") as fh:
            rows = list(csv.reader(fh))
        mean = COLUMNS.index("mean_ms")
        got = sorted((r[1], r[COLUMNS.index("precision")], r[mean]) for r in rows[1:])
        check(rows[0] == COLUMNS and got == [("01", "default", "7"), ("01", "fp32", "8"),
                                             ("02", "fp32", "5")],
              "a rerun replaces the row of the same gpu, chapter, scope, model and precision, "
              "keeps the others")
        with open(path, "w") as fh:
            fh.write("gpu,chapter,other\nh100,01,x\n")
        with contextlib.redirect_stdout(io.StringIO()) as said:
            f = KbCsv(path, COLUMNS)
        check(f.rows == [] and "another header" in said.getvalue(),
              "a file with another header is started afresh, with a note")
        try:
            f.put({"gpu": "h100"})
            check(False, "a row lacking columns is refused")
        except ValueError:
            check(True, "a row lacking columns is refused")
    print("kernelbench.py self-test: %s" % ("FAILED" if failed else "passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
