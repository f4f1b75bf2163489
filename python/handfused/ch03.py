"""Chapter 3's model inside PyTorch: KernelBench level 2, problem #79.

    y = max over channels of ( m * clamp( InstanceNorm3d( m * Conv3d(x) ), -1, 1 ) )

ModelNew takes the constructor of KernelBench's Model for this problem and creates the same
parameters in the same order (conv.weight, conv.bias, then multiplier), so that after the same
torch.manual_seed both hold the same values. Its forward and backward run the chapter's kernels
(chapters/03-conv3d-instnorm-max/api.h) through build/libch03.so (`make lib CH=3`) on PyTorch's
current stream:
  - without autograd (torch.no_grad(), or no input needing a gradient): the fastest whole-model
    forward this GPU and build run, the conv computed inside, c never written: v18 on Hopper
    (H100, H200) with sm_90a code, v15 on other GPUs with clusters, else v12 (versions());
  - with autograd: the same forward, x kept; the backward first recomputes what b5's training
    forward saves (the library conv (cuDNN) writing c, then v10 keeping each position's winning
    channel and the statistics), then runs b5's backward (dc and dm from the winners), our dw and
    dbias, and dx through the library conv only when x needs a gradient. Where a sample is too
    large for a cluster, or clusters do not run, b2's (v9, then its two recomputing kernels).
    Recomputing is chapter 4's v8 lesson again: the fused forward costs the step less than c's
    write and the saved statistics cost the forward (KernelBench-protocol rows: data/h100/
    kernelbench.csv, forward against train_step).
Everything is float32 (v14 to v18's conv on tensor cores in 3xTF32, as accurate as fp32). Under
torch.compile the call into the library is a graph break (torch.compiler.disable): the compiled
graph runs around it, eagerly inside.
"""
from . import _lib
from ._torch import aligned, call_on, check_inputs, model_forward, ptr, triple

import torch  # noqa: E402 (after _torch, which says what is missing without PyTorch)
import torch.nn as nn  # noqa: E402

CHAPTER = 3
IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE, CLAMP_MIN, CLAMP_MAX = 3, 16, 3, -1.0, 1.0


def _library():
    return _lib.load(CHAPTER)


def _check_inputs(x, weight, bias, m):
    """The checks of every call; returns (n, d, h, w)."""
    return check_inputs(_library(), CHAPTER, x, IN_CHANNELS,
                        (("conv.weight", weight, (OUT_CHANNELS, IN_CHANNELS) + (KERNEL_SIZE,) * 3),
                         ("conv.bias", bias, (OUT_CHANNELS,)),
                         ("multiplier", m, (OUT_CHANNELS, 1, 1, 1))))


def _empty(shape, device, dtype=torch.float32):
    return torch.empty(shape, device=device, dtype=dtype)


def _workspace(n, d, h, w, device):
    """the library's scratch for this shape (PyTorch's allocator: 512-byte aligned blocks)"""
    return _empty(_library().ch03_workspace_bytes(n, d, h, w), device, torch.uint8)


def versions():
    """The versions the library runs on the current device, e.g. 'forward v18, training step
    b5'."""
    lib = _library()
    v = lib.ch03_versions()
    if v is None:
        raise RuntimeError("ch03_versions: %s" % lib.ch03_last_error().decode("utf-8", "replace"))
    return v.decode()


def forward_inference(x, weight, bias, m):
    """y without autograd: the chapter's fastest whole-model forward."""
    n, d, h, w = _check_inputs(x, weight, bias, m)
    x, dev = aligned(x), x.device
    y = _empty((n, d - 2, h - 2, w - 2), dev)
    call_on(dev, _library(), CHAPTER, "ch03_forward", ptr(x), ptr(weight), ptr(bias), ptr(m),
            ptr(y), ptr(_workspace(n, d, h, w, dev)), n, d, h, w)
    return y


def train_forward(x, weight, bias, m):
    """b5's training forward (b2's without clusters): (c, y, mean, rstd, win), what
    ch03_backward needs."""
    n, d, h, w = _check_inputs(x, weight, bias, m)
    x, dev = aligned(x), x.device
    c = _empty((n, OUT_CHANNELS, d - 2, h - 2, w - 2), dev)
    y = _empty((n, d - 2, h - 2, w - 2), dev)
    mean, rstd = _empty((n, OUT_CHANNELS), dev), _empty((n, OUT_CHANNELS), dev)
    win = _empty(y.shape, dev, torch.uint8)
    # a MemoryError from the conv's one-time setup frees PyTorch's cache, once
    call_on(dev, _library(), CHAPTER, "ch03_train_forward", ptr(x), ptr(weight), ptr(bias),
            ptr(m), ptr(c), ptr(y), ptr(mean), ptr(rstd), ptr(win),
            ptr(_workspace(n, d, h, w, dev)), n, d, h, w)
    return c, y, mean, rstd, win


class Ch03Function(torch.autograd.Function):
    """The fused forward (x kept), and a backward that recomputes the training forward's c,
    statistics and winners before its own kernels, as one autograd node."""

    @staticmethod
    def forward(ctx, x, weight, bias, m):
        y = forward_inference(x, weight, bias, m)
        ctx.save_for_backward(aligned(x), weight, bias, m)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, weight, bias, m = ctx.saved_tensors
        c, y, mean, rstd, win = train_forward(x, weight, bias, m)
        n, d, h, w = x.shape[0], x.shape[2], x.shape[3], x.shape[4]
        dev = x.device
        g = aligned(g.to(torch.float32).contiguous())  # autograd may hand an expanded g
        dc, dw, dm = (torch.empty_like(t) for t in (c, weight, m))
        dbias = _empty(OUT_CHANNELS, dev)
        dx = torch.empty_like(x) if ctx.needs_input_grad[0] else None  # only when wanted
        call_on(dev, _library(), CHAPTER, "ch03_backward", ptr(x), ptr(weight), ptr(m), ptr(c),
                ptr(y), ptr(mean), ptr(rstd), ptr(win), ptr(g), ptr(dc), ptr(dx), ptr(dw),
                ptr(dbias), ptr(dm), ptr(_workspace(n, d, h, w, dev)), n, d, h, w)
        return dx, dw, dbias, dm


class ModelNew(nn.Module):
    """KernelBench level 2 #79's Model, its forward and backward in chapter 3's kernels.

    Constructor: KernelBench's, Model(in_channels, out_channels, kernel_size, multiplier_shape,
    clamp_min, clamp_max); the kernels are written for its geometry (3 -> 16 channels, kernel 3,
    no padding, a multiplier of one factor a channel, the clamp to [-1, 1]), and other values
    raise ValueError. InstanceNorm3d(out_channels) has no parameters (PyTorch's defaults: no
    affine, no running statistics), as in Model. Input x: float32, CUDA, contiguous,
    N x 3 x D x H x W (limits: ch03_check_shape in api.h)."""

    def __init__(self, in_channels, out_channels, kernel_size, multiplier_shape, clamp_min,
                 clamp_max):
        super().__init__()
        got = (in_channels, out_channels, triple(kernel_size, "kernel_size"), float(clamp_min),
               float(clamp_max))
        want = (IN_CHANNELS, OUT_CHANNELS, (KERNEL_SIZE,) * 3, CLAMP_MIN, CLAMP_MAX)
        if got != want:
            raise ValueError("chapter 3's kernels take in_channels=3, out_channels=16, "
                             "kernel_size=3, clamp_min=-1.0, clamp_max=1.0 (a clamp to [-1, 1]); "
                             "got %s, %s, %s, %s, %s" % got)
        # (16, 1, 1, 1) lines up with c's channels (N x 16 x D x H x W); another shape of 16
        # elements would scale along another dimension in Model
        if tuple(multiplier_shape) != (OUT_CHANNELS, 1, 1, 1):
            raise ValueError("multiplier_shape must hold one factor a channel, (16, 1, 1, 1), "
                             "not %r" % (multiplier_shape,))
        # Model's modules, in its order: the conv's weight and bias (PyTorch's initialisation),
        # the multiplier ~ N(0, 1), then InstanceNorm3d (no parameters)
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.multiplier = nn.Parameter(torch.randn(multiplier_shape))
        self.instance_norm = nn.InstanceNorm3d(out_channels)
        self.clamp_min, self.clamp_max = clamp_min, clamp_max

    def forward(self, x):
        return model_forward(Ch03Function, forward_inference, x, self.conv.weight,
                             self.conv.bias, self.multiplier)
