"""Chapter 2's model inside PyTorch: KernelBench level 2, problem #43.

    y = relu(logsumexp over channels of MaxPool3d_2(Conv3d(x)))

ModelNew takes the constructor of KernelBench's Model for this problem and creates the same
parameters in the same order (conv.weight, conv.bias; the pooling has none), so that after the
same torch.manual_seed both hold the same values. Its forward and backward run the chapter's
kernels (chapters/02-conv3d-maxpool-lse/api.h) through build/libch02.so (`make lib CH=2`) on
PyTorch's current stream:
  - without autograd (torch.no_grad(), or no input needing a gradient): v9, the conv with the
    pooling and the logsumexp in its epilogue, the conv's output never written;
  - with autograd: v8's conv writing c (kept for the backward), v5's epilogue; backward: b3's,
    b2's epilogue backward (dc), then dw and the conv bias's gradient, and dx only when x needs
    a gradient.
Every conv is the chapter's 3xTF32 conv: tensor cores at fp32's accuracy, whatever PyTorch's
TF32 settings. Under torch.compile the call into the library is a graph break
(torch.compiler.disable): the compiled graph runs around it, eagerly inside.
"""
from . import _lib

try:  # the package imports without PyTorch; this module needs it
    import torch
    import torch.nn as nn
    # the checks and conversions of every chapter's module, written once (chapter 1's)
    from ._torch import aligned as _aligned, check_tensor as _check_tensor, ptr as _ptr, stream as _stream, triple as _triple
except ImportError as e:
    raise ImportError("handfused.ch02 needs PyTorch (%s)" % e) from e

CHAPTER = 2
OUT_CHANNELS = 64
# the geometry the kernels are written for (KernelBench's get_init_inputs())
GEOMETRY = {"in_channels": 32, "out_channels": OUT_CHANNELS, "kernel_size": (3, 3, 3),
            "stride": (1, 1, 1), "padding": (1, 1, 1)}


def _call(name, *args):
    """build/libch02.so's name(*args) (loaded once; FileNotFoundError naming make lib CH=2), a
    nonzero return raised with the library's message"""
    _lib.call(_lib.load(CHAPTER), CHAPTER, name, *args)


def _check_inputs(x, weight, bias):
    """The checks of every call; returns (n, d, h, w)."""
    _check_tensor("x", x)
    if x.dim() != 5:
        raise ValueError("x must be 5-D (N x 32 x D x H x W), not of shape %s"
                         % (tuple(x.shape),))
    lib = _lib.load(CHAPTER)
    if lib.ch02_check_shape(*x.shape):
        raise ValueError("x of shape %s: %s" % (tuple(x.shape),
                                                 lib.ch02_last_error().decode("utf-8", "replace")))
    for name, t, shape in (("conv.weight", weight, (64, 32, 3, 3, 3)), ("conv.bias", bias, (64,))):
        _check_tensor(name, t, x.device)
        if tuple(t.shape) != shape:
            raise ValueError("%s has shape %s, not %s" % (name, tuple(t.shape), shape))
    n, _, d, h, w = x.shape
    return n, d, h, w


def _out_shape(n, d, h, w):
    return (n, 1, d // 2, h // 2, w // 2)


def _workspace(device, backward):
    """The scratch the library asks for on this device, from PyTorch's allocator."""
    floats = _lib.load(CHAPTER).ch02_workspace_floats(backward)
    if floats == 0:
        raise RuntimeError("ch02_workspace_floats: %s"
                           % _lib.load(CHAPTER).ch02_last_error().decode("utf-8", "replace"))
    return torch.empty(floats, device=device, dtype=torch.float32)


class Ch02Function(torch.autograd.Function):
    """The training step's forward (c saved) and its backward, as one autograd node."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        n, d, h, w = _check_inputs(x, weight, bias)
        x, weight, bias = _aligned(x), _aligned(weight), _aligned(bias)
        c = torch.empty((n, OUT_CHANNELS, d, h, w), device=x.device, dtype=torch.float32)
        y = torch.empty(_out_shape(n, d, h, w), device=x.device, dtype=torch.float32)
        ctx.save_for_backward(x, weight, c)
        ctx.shape = (n, d, h, w)
        with torch.cuda.device(x.device):
            ws = _workspace(x.device, 0)
            _call("ch02_train_forward", _ptr(x), _ptr(weight), _ptr(bias), _ptr(c), _ptr(y),
                  _ptr(ws), ws.numel(), n, d, h, w, _stream(x.device))
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, weight, c = ctx.saved_tensors
        dev = x.device
        # dc: scratch, every element written; dx only when x wants it
        dc, dw = torch.empty_like(c), torch.empty_like(weight)
        dx = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        dbias = torch.empty(OUT_CHANNELS, device=dev, dtype=torch.float32)
        g = _aligned(g.to(torch.float32).contiguous())  # autograd may hand an expanded g
        n, d, h, w = ctx.shape
        with torch.cuda.device(dev):
            ws = _workspace(dev, 1)
            _call("ch02_backward", _ptr(x), _ptr(weight), _ptr(c), _ptr(g), _ptr(dc), _ptr(dx),
                  _ptr(dw), _ptr(dbias), _ptr(ws), ws.numel(), n, d, h, w, _stream(dev))
        return dx, dw, dbias


def forward_inference(x, weight, bias):
    """y without autograd: the chapter's fastest fp32-accurate forward (v9)."""
    n, d, h, w = _check_inputs(x, weight, bias)
    x, weight, bias = _aligned(x), _aligned(weight), _aligned(bias)
    y = torch.empty(_out_shape(n, d, h, w), device=x.device, dtype=torch.float32)
    with torch.cuda.device(x.device):
        ws = _workspace(x.device, 0)
        _call("ch02_forward", _ptr(x), _ptr(weight), _ptr(bias), _ptr(y), _ptr(ws), ws.numel(),
              n, d, h, w, _stream(x.device))
    return y


@torch.compiler.disable
def model_forward(x, weight, bias):
    """The model's forward on explicit tensors: with autograd when a gradient is wanted."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, weight, bias)):
        return Ch02Function.apply(x, weight, bias)
    return forward_inference(x, weight, bias)


class ModelNew(nn.Module):
    """KernelBench level 2 #43's Model, its forward and backward in chapter 2's kernels.

    Constructor: KernelBench's, Model(in_channels, out_channels, kernel_size, stride, padding);
    the kernels are written for its geometry (32 -> 64 channels, kernel 3, stride 1,
    padding 1; pooling kernel 2, stride 2), and other values raise ValueError. Input x:
    float32, CUDA, contiguous, N x 32 x D x H x W (limits: ch02_check_shape in api.h)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding):
        super().__init__()
        got = {"in_channels": in_channels, "out_channels": out_channels,
               "kernel_size": _triple(kernel_size, "kernel_size"),
               "stride": _triple(stride, "stride"), "padding": _triple(padding, "padding")}
        bad = ["%s=%r" % (k, v) for k, v in got.items() if v != GEOMETRY[k]]
        if bad:
            raise ValueError("chapter 2's kernels take in_channels=32, out_channels=64, "
                             "kernel_size=3, stride=1, padding=1; got %s" % ", ".join(bad))
        # Model's parameters, in its order: the conv's weight and bias (PyTorch's
        # initialisation); its MaxPool3d(2, 2) has none
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding)

    def forward(self, x):
        return model_forward(x, self.conv.weight, self.conv.bias)
