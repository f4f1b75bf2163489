"""Chapter 1's model inside PyTorch: KernelBench level 2, problem #58.

    y = clamp(z sigmoid(z + 3) / 6 - bias, -1, 1),  z = logsumexp over channels of
        ConvTranspose3d(x)

ModelNew takes the constructor of KernelBench's Model for this problem and creates the same
parameters in the same order (conv_transpose.weight, conv_transpose.bias, then bias), so that
after the same torch.manual_seed both hold the same values. Its forward and backward run the
chapter's kernels (chapters/01-convtranspose-lse/api.h) through build/libch01.so
(`make lib CH=1`) on PyTorch's current stream:
  - without autograd (torch.no_grad(), or no input needing a gradient): v8, the transposed conv
    fused with its epilogue, the conv's output never written;
  - with autograd: the training step of b4: b3's conv writing c (kept for the backward), v7's
    epilogue; backward: b4's (dc and the bias's gradient), b3's dw and dbias, and dx through
    the library conv (cuDNN) only when x needs a gradient.
Everything is float32 (fp32 arithmetic: no TF32). Under torch.compile the call into the library
is a graph break (torch.compiler.disable): the compiled graph runs around it, eagerly inside.
"""
from . import _lib
from ._torch import aligned, call_on, check_inputs, model_forward, ptr, triple

import torch  # noqa: E402 (after _torch, which says what is missing without PyTorch)
import torch.nn as nn  # noqa: E402

CHAPTER = 1
IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE, STRIDE, PADDING = 3, 16, 3, 2, 1


def _library():
    return _lib.load(CHAPTER)


def _check_inputs(x, weight, conv_bias, bias):
    """The checks of every call; returns (n, d, h, w)."""
    return check_inputs(_library(), CHAPTER, x, IN_CHANNELS,
                        (("conv_transpose.weight", weight, (3, 16, 3, 3, 3)),
                         ("conv_transpose.bias", conv_bias, (16,)), ("bias", bias, 1)))


def _out_shape(n, d, h, w):
    return (n, 1, 2 * d - 1, 2 * h - 1, 2 * w - 1)


def forward_inference(x, weight, conv_bias, bias):
    """y without autograd: the chapter's fastest forward (v8)."""
    n, d, h, w = _check_inputs(x, weight, conv_bias, bias)
    x = aligned(x)
    y = torch.empty(_out_shape(n, d, h, w), device=x.device, dtype=torch.float32)
    call_on(x.device, _library(), CHAPTER, "ch01_forward", ptr(x), ptr(weight), ptr(conv_bias),
            ptr(bias), ptr(y), n, d, h, w)
    return y


class Ch01Function(torch.autograd.Function):
    """The training step's forward (c saved) and its backward, as one autograd node."""

    @staticmethod
    def forward(ctx, x, weight, conv_bias, bias):
        n, d, h, w = _check_inputs(x, weight, conv_bias, bias)
        x = aligned(x)
        od, oh, ow = 2 * d - 1, 2 * h - 1, 2 * w - 1
        c = torch.empty((n, OUT_CHANNELS, od, oh, ow), device=x.device, dtype=torch.float32)
        y = torch.empty(_out_shape(n, d, h, w), device=x.device, dtype=torch.float32)
        call_on(x.device, _library(), CHAPTER, "ch01_train_forward", ptr(x), ptr(weight),
                ptr(conv_bias), ptr(bias), ptr(c), ptr(y), n, d, h, w)
        ctx.save_for_backward(x, weight, bias, c)
        ctx.shape = (n, d, h, w)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, weight, bias, c = ctx.saved_tensors
        n, d, h, w = ctx.shape
        g = aligned(g.to(torch.float32).contiguous())  # autograd may hand an expanded g
        dev = x.device
        dc = torch.empty_like(c)
        dx = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        dw = torch.empty_like(weight)
        dbias = torch.empty(OUT_CHANNELS, device=dev, dtype=torch.float32)
        db = torch.empty_like(bias)
        lib = _library()
        ws = torch.empty(lib.ch01_workspace_floats(n, d, h, w), device=dev, dtype=torch.float32)
        # the conv's one-time setup for dx short of memory: call_on frees PyTorch's cache, once
        call_on(dev, lib, CHAPTER, "ch01_backward", ptr(x), ptr(weight), ptr(bias), ptr(c), ptr(g),
                ptr(dc), ptr(dx), ptr(dw), ptr(dbias), ptr(db), ptr(ws), n, d, h, w)
        return dx, dw, dbias, db


class ModelNew(nn.Module):
    """KernelBench level 2 #58's Model, its forward and backward in chapter 1's kernels.

    Constructor: KernelBench's, Model(in_channels, out_channels, kernel_size, stride, padding,
    bias_shape); the kernels are written for its geometry (3 -> 16 channels, kernel 3,
    stride 2, padding 1, a one-element bias), and other values raise ValueError. Input x:
    float32, CUDA, contiguous, N x 3 x D x H x W (limits: ch01_check_shape in api.h)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias_shape):
        super().__init__()
        got = (in_channels, out_channels, triple(kernel_size, "kernel_size"),
               triple(stride, "stride"), triple(padding, "padding"))
        want = (IN_CHANNELS, OUT_CHANNELS, (KERNEL_SIZE,) * 3, (STRIDE,) * 3, (PADDING,) * 3)
        if got != want:
            raise ValueError("chapter 1's kernels take in_channels=3, out_channels=16, "
                             "kernel_size=3, stride=2, padding=1; got %s, %s, %s, %s, %s" % got)
        numel = 1
        for s in bias_shape:
            numel *= s
        if numel != 1:
            raise ValueError("bias_shape must hold one element (the model subtracts a scalar), "
                             "not %r" % (bias_shape,))
        # Model's parameters, in its order: the transposed conv's weight and bias (PyTorch's
        # initialisation), then the subtracted bias ~ N(0, 1)
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size,
                                                 stride=stride, padding=padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return model_forward(Ch01Function, forward_inference, x, self.conv_transpose.weight,
                             self.conv_transpose.bias, self.bias)
