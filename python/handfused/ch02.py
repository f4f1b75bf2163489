"""Chapter 2's model inside PyTorch: KernelBench level 2, problem #43.

    y = relu(logsumexp over channels of MaxPool3d_2(Conv3d(x)))

ModelNew takes the constructor of KernelBench's Model for this problem and creates the same
parameters in the same order (conv.weight, conv.bias; the pooling has none), so that after the
same torch.manual_seed both hold the same values; a keyword-only precision, "fp32" (the default)
or "tf32", picks the kernels. Its forward and backward run the chapter's kernels
(chapters/02-conv3d-maxpool-lse/api.h) through build/libch02.so (`make lib CH=2`) on PyTorch's
current stream.
precision="fp32": every conv is the chapter's 3xTF32 conv, tensor cores at fp32's accuracy:
  - without autograd (torch.no_grad(), or no input needing a gradient): v9, the conv with the
    pooling and the logsumexp in its epilogue, the conv's output never written;
  - with autograd: v8's conv writing c (kept for the backward), v5's epilogue; backward: b3's,
    b2's epilogue backward (dc), then dw and the conv bias's gradient, and dx only when x needs
    a gradient.
precision="tf32": every conv in TF32 on Hopper's warpgroup MMA (sm_90a code: H100, H200; on
another GPU, or a library built without sm_90a code, the call raises RuntimeError saying so):
each product's operands rounded to a 10-bit mantissa (2^-11 of themselves), the sums in fp32:
an error about that of PyTorch's TF32 convs (torch.backends.cudnn.allow_tf32, PyTorch's
default), far above fp32's:
  - without autograd: v10, v9's fusion on wgmma;
  - with autograd: v10's conv writing c, v5's epilogue; backward: b4's, b2's epilogue backward
    (dc), then dx (only when x needs it) and dw on wgmma, and the conv bias's gradient.
Neither depends on PyTorch's TF32 flags. Under torch.compile the call into the library is a
graph break (torch.compiler.disable): the compiled graph runs around it, eagerly inside.
"""
from . import _lib
from ._torch import (aligned, call_on, check_inputs, check_precision, model_forward, ptr,
                     triple)

import torch  # noqa: E402 (after _torch, which says what is missing without PyTorch)
import torch.nn as nn  # noqa: E402

CHAPTER = 2
OUT_CHANNELS = 64
# the geometry the kernels are written for (KernelBench's get_init_inputs())
GEOMETRY = {"in_channels": 32, "out_channels": OUT_CHANNELS, "kernel_size": (3, 3, 3),
            "stride": (1, 1, 1), "padding": (1, 1, 1)}


def _call(device, name, *args):
    """build/libch02.so's name(*args, the current stream) on device (loaded once;
    FileNotFoundError naming make lib CH=2), a nonzero return raised with the library's
    message"""
    call_on(device, _lib.load(CHAPTER), CHAPTER, name, *args)


def _check_inputs(x, weight, bias):
    """The checks of every call; returns (n, d, h, w)."""
    return check_inputs(_lib.load(CHAPTER), CHAPTER, x, GEOMETRY["in_channels"],
                        (("conv.weight", weight, (64, 32, 3, 3, 3)), ("conv.bias", bias, (64,))))


def _out_shape(n, d, h, w):
    return (n, 1, d // 2, h // 2, w // 2)


def _workspace(device, backward):
    """The scratch the library asks for on this device, from PyTorch's allocator."""
    floats = _lib.load(CHAPTER).ch02_workspace_floats(backward)
    if floats == 0:
        raise RuntimeError("ch02_workspace_floats: %s"
                           % _lib.load(CHAPTER).ch02_last_error().decode("utf-8", "replace"))
    return torch.empty(floats, device=device, dtype=torch.float32)


def _train_forward(ctx, name, x, weight, bias):
    """The training forward, the library's name (ch02_train_forward or its _tf32): y, c saved."""
    n, d, h, w = _check_inputs(x, weight, bias)
    x, weight, bias = aligned(x), aligned(weight), aligned(bias)
    c = torch.empty((n, OUT_CHANNELS, d, h, w), device=x.device, dtype=torch.float32)
    y = torch.empty(_out_shape(n, d, h, w), device=x.device, dtype=torch.float32)
    ctx.save_for_backward(x, weight, c)
    ctx.shape = (n, d, h, w)
    with torch.cuda.device(x.device):
        ws = _workspace(x.device, 0)
    _call(x.device, name, ptr(x), ptr(weight), ptr(bias), ptr(c), ptr(y), ptr(ws), ws.numel(),
          n, d, h, w)
    return y


def _backward(ctx, name, g):
    """The backward, the library's name (ch02_backward or its _tf32): dx, dw, dbias."""
    x, weight, c = ctx.saved_tensors
    dev = x.device
    # dc: scratch, every element written; dx only when x wants it
    dc, dw = torch.empty_like(c), torch.empty_like(weight)
    dx = torch.empty_like(x) if ctx.needs_input_grad[0] else None
    dbias = torch.empty(OUT_CHANNELS, device=dev, dtype=torch.float32)
    g = aligned(g.to(torch.float32).contiguous())  # autograd may hand an expanded g
    n, d, h, w = ctx.shape
    with torch.cuda.device(dev):
        ws = _workspace(dev, 1)
    _call(dev, name, ptr(x), ptr(weight), ptr(c), ptr(g), ptr(dc), ptr(dx), ptr(dw),
          ptr(dbias), ptr(ws), ws.numel(), n, d, h, w)
    return dx, dw, dbias


def _autograd_function(name, suffix, doc):
    """The training step's forward (c saved) and its backward as one autograd node, on the
    library's functions of one precision (suffix "" or "_tf32")"""
    def forward(ctx, x, weight, bias):
        return _train_forward(ctx, "ch02_train_forward" + suffix, x, weight, bias)

    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        return _backward(ctx, "ch02_backward" + suffix, g)

    return type(name, (torch.autograd.Function,), {
        "__doc__": doc, "forward": staticmethod(forward), "backward": staticmethod(backward)})


Ch02Function = _autograd_function("Ch02Function", "", "fp32: v8's conv (3xTF32), b3's backward")
Ch02Tf32Function = _autograd_function("Ch02Tf32Function", "_tf32",
                                      "TF32 on wgmma: v10's conv, b4's backward (sm_90a)")


def _inference(name, x, weight, bias):
    n, d, h, w = _check_inputs(x, weight, bias)
    x, weight, bias = aligned(x), aligned(weight), aligned(bias)
    y = torch.empty(_out_shape(n, d, h, w), device=x.device, dtype=torch.float32)
    with torch.cuda.device(x.device):
        ws = _workspace(x.device, 0)
    _call(x.device, name, ptr(x), ptr(weight), ptr(bias), ptr(y), ptr(ws), ws.numel(), n, d, h,
          w)
    return y


def forward_inference(x, weight, bias):
    """y without autograd: the chapter's fastest fp32-accurate forward (v9)."""
    return _inference("ch02_forward", x, weight, bias)


def forward_inference_tf32(x, weight, bias):
    """y without autograd in TF32: v10 (sm_90a)."""
    return _inference("ch02_forward_tf32", x, weight, bias)


class ModelNew(nn.Module):
    """KernelBench level 2 #43's Model, its forward and backward in chapter 2's kernels.

    Constructor: KernelBench's, Model(in_channels, out_channels, kernel_size, stride, padding);
    the kernels are written for its geometry (32 -> 64 channels, kernel 3, stride 1,
    padding 1; pooling kernel 2, stride 2), and other values raise ValueError. Keyword-only
    precision: "fp32" (3xTF32, fp32's accuracy; the default, and what KernelBench's
    ModelNew(*get_init_inputs()) gets) or "tf32" (TF32 on wgmma, an H100 or H200; the module's
    docstring says what each runs); another value raises ValueError. Input x: float32, CUDA,
    contiguous, N x 32 x D x H x W (limits: ch02_check_shape in api.h)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, *,
                 precision="fp32"):
        super().__init__()
        self.precision = check_precision(precision)
        got = {"in_channels": in_channels, "out_channels": out_channels,
               "kernel_size": triple(kernel_size, "kernel_size"),
               "stride": triple(stride, "stride"), "padding": triple(padding, "padding")}
        bad = ["%s=%r" % (k, v) for k, v in got.items() if v != GEOMETRY[k]]
        if bad:
            raise ValueError("chapter 2's kernels take in_channels=32, out_channels=64, "
                             "kernel_size=3, stride=1, padding=1; got %s" % ", ".join(bad))
        # Model's parameters, in its order: the conv's weight and bias (PyTorch's
        # initialisation); its MaxPool3d(2, 2) has none
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding)

    def forward(self, x):
        if self.precision == "tf32":
            return model_forward(Ch02Tf32Function, forward_inference_tf32, x, self.conv.weight,
                                 self.conv.bias)
        return model_forward(Ch02Function, forward_inference, x, self.conv.weight,
                             self.conv.bias)

    def extra_repr(self):
        return "precision=%r" % self.precision
