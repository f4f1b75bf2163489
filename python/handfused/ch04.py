"""Chapter 4's model inside PyTorch: KernelBench level 2, problem #92.

    y = logsumexp over channels of (c + hardswish(tanh(group_norm(c)))),  c = Conv2d(x)

ModelNew takes the constructor of KernelBench's Model for this problem and creates the same
parameters in the same order (conv.weight, conv.bias, group_norm.weight, group_norm.bias), so
that after the same torch.manual_seed both hold the same values. Its forward and backward run the
chapter's kernels (chapters/04-conv2d-groupnorm-lse/api.h) through build/libch04.so
(`make lib CH=4`) on PyTorch's current stream:
  - forward, with or without autograd: v9, our conv with the GroupNorm statistics in its
    epilogue, c stored once, then v4's apply; with autograd c and the statistics are kept;
  - backward (b4's training step): b3's epilogue backward in teams (dc, dgamma, dbeta), b4's
    dw and dbias, and dx through the library conv (cuDNN) only when x needs a gradient.
Everything is float32 (fp32 arithmetic: no TF32). Under torch.compile the call into the library
is a graph break (torch.compiler.disable): the compiled graph runs around it, eagerly inside.
"""
from . import _lib
from ._torch import aligned, call_on, check_inputs, model_forward, ptr

import torch  # noqa: E402 (after _torch, which says what is missing without PyTorch)
import torch.nn as nn  # noqa: E402

CHAPTER = 4
IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE, GROUPS, EPS = 8, 64, 3, 16, 1e-5


def _library():
    return _lib.load(CHAPTER)


PARAM_SHAPES = (("conv.weight", (OUT_CHANNELS, IN_CHANNELS, KERNEL_SIZE, KERNEL_SIZE)),
                ("conv.bias", (OUT_CHANNELS,)), ("group_norm.weight", (OUT_CHANNELS,)),
                ("group_norm.bias", (OUT_CHANNELS,)))


def _check_inputs(x, params):
    """The checks of every call; returns (n, h, w)."""
    return check_inputs(_library(), CHAPTER, x, IN_CHANNELS,
                        [(name, t, shape) for (name, shape), t in zip(PARAM_SHAPES, params)],
                        "H x W")


def _empty(shape, device):
    return torch.empty(shape, device=device, dtype=torch.float32)


def _workspace(n, h, w, device):
    """the library's scratch for this shape on the current device"""
    lib = _library()
    floats = lib.ch04_workspace_floats(n, h, w)
    if not floats:
        raise RuntimeError("ch04_workspace_floats: %s"
                           % lib.ch04_last_error().decode("utf-8", "replace"))
    return _empty(floats, device)


def forward_inference(x, weight, bias, gamma, beta):
    """y without autograd: the chapter's fastest forward (v9); c is scratch."""
    n, h, w = _check_inputs(x, (weight, bias, gamma, beta))
    x, dev = aligned(x), x.device
    c = _empty((n, OUT_CHANNELS, h - 2, w - 2), dev)
    y = _empty((n, 1, h - 2, w - 2), dev)
    with torch.cuda.device(dev):
        ws = _workspace(n, h, w, dev)
    call_on(dev, _library(), CHAPTER, "ch04_forward", ptr(x), ptr(weight), ptr(bias), ptr(gamma),
            ptr(beta), ptr(c), ptr(y), ptr(ws), n, h, w)
    return y


class Ch04Function(torch.autograd.Function):
    """The training step's forward (c and the statistics saved) and its backward, one node."""

    @staticmethod
    def forward(ctx, x, weight, bias, gamma, beta):
        n, h, w = _check_inputs(x, (weight, bias, gamma, beta))
        x, dev = aligned(x), x.device
        c = _empty((n, OUT_CHANNELS, h - 2, w - 2), dev)
        stats = _empty((2, n, GROUPS), dev)
        y = _empty((n, 1, h - 2, w - 2), dev)
        with torch.cuda.device(dev):
            ws = _workspace(n, h, w, dev)
        call_on(dev, _library(), CHAPTER, "ch04_train_forward", ptr(x), ptr(weight), ptr(bias),
                ptr(gamma), ptr(beta), ptr(c), ptr(stats), ptr(y), ptr(ws), n, h, w)
        ctx.save_for_backward(x, weight, gamma, beta, c, y, stats)
        ctx.shape = (n, h, w)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, weight, gamma, beta, c, y, stats = ctx.saved_tensors
        n, h, w = ctx.shape
        g = aligned(g.to(torch.float32).contiguous())  # autograd may hand an expanded g
        dev = x.device
        dc = torch.empty_like(c)
        dx = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        dw = torch.empty_like(weight)
        dbias, dgamma, dbeta = (_empty(OUT_CHANNELS, dev) for _ in range(3))
        with torch.cuda.device(dev):
            ws = _workspace(n, h, w, dev)
        # the conv's one-time setup for dx short of memory: call_on frees PyTorch's cache, once
        call_on(dev, _library(), CHAPTER, "ch04_backward", ptr(x), ptr(weight), ptr(gamma),
                ptr(beta), ptr(c), ptr(y), ptr(stats), ptr(g), ptr(dc), ptr(dx), ptr(dw),
                ptr(dbias), ptr(dgamma), ptr(dbeta), ptr(ws), n, h, w)
        return dx, dw, dbias, dgamma, dbeta


def _pair(v, name):
    t = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    if len(t) != 2:
        raise ValueError("%s must be an int or two ints, not %r" % (name, v))
    return t


class ModelNew(nn.Module):
    """KernelBench level 2 #92's Model, its forward and backward in chapter 4's kernels.

    Constructor: KernelBench's, Model(in_channels, out_channels, kernel_size, groups,
    eps=1e-5); the kernels are written for its geometry (8 -> 64 channels, kernel 3, 16
    groups, eps 1e-5), and other values raise ValueError. Input x: float32, CUDA, contiguous,
    N x 8 x H x W (limits: ch04_check_shape in api.h)."""

    def __init__(self, in_channels, out_channels, kernel_size, groups, eps=1e-5):
        super().__init__()
        got = (in_channels, out_channels, _pair(kernel_size, "kernel_size"), groups, eps)
        want = (IN_CHANNELS, OUT_CHANNELS, (KERNEL_SIZE,) * 2, GROUPS, EPS)
        if got != want:
            raise ValueError("chapter 4's kernels take in_channels=8, out_channels=64, "
                             "kernel_size=3, groups=16, eps=1e-5; got %s, %s, %s, %s, %s" % got)
        # Model's parameters, in its order: the conv's weight and bias (PyTorch's
        # initialisation), then GroupNorm's weight (ones) and bias (zeros)
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(groups, out_channels, eps=eps)

    def forward(self, x):
        return model_forward(Ch04Function, forward_inference, x, self.conv.weight,
                             self.conv.bias, self.group_norm.weight, self.group_norm.bias)
