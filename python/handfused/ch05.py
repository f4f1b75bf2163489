"""Chapter 5's model inside PyTorch: KernelBench level 2, problem #38.

    y = scale_c softmax over each (n, channel)'s positions of
        clamp(ConvTranspose3d(AvgPool3d(x)), clamp_min, clamp_max)

ModelNew takes the constructor of KernelBench's Model for this problem and creates the same
parameters in the same order (conv_transpose.weight and conv_transpose.bias, then scale, ones),
so that after the same torch.manual_seed both hold the same values; a keyword-only precision,
"fp32" (the default) or "tf32", picks the inference forward. Its forward and backward run the
chapter's kernels (chapters/05-convtranspose-softmax/api.h) through build/libch05.so
(`make lib CH=5`) on PyTorch's current stream:
  - without autograd (torch.no_grad(), or no input needing a gradient): precision="fp32": v7,
    the pool in the loads of the chapter's own transposed conv, the row sums in its epilogue;
    precision="tf32": v8, the pool, then the transposed conv in TF32 on Hopper's warpgroup MMA
    (sm_90a code: H100, H200; on another GPU, or a library built without sm_90a code, the call
    raises RuntimeError saying so), run twice (the row sums, then y), c never written. TF32
    rounds each product's operands to a 10-bit mantissa (2^-11 of themselves), the sums in
    fp32: an error about that of PyTorch's TF32 conv (torch.backends.cudnn.allow_tf32, PyTorch's
    default), far above fp32's;
  - with autograd: the pool writing xp (the conv's input, which dw needs), then v7 as fp32's
    inference forward runs it, which writes c and each row's lse on its way to y (xp, c and lse kept for the
    backward); backward: b3's (b2's) dc and the scale's gradient, then the conv's gradients
    by the library conv, and dx (the library conv and the pool's backward) only when x needs a
    gradient. This path is fp32 in both precisions: the chapter has no TF32 backward, so
    precision="tf32" changes nothing with autograd (its forward there is v7's, not v8's).
Apart from v8, everything is float32 arithmetic (no TF32), whatever PyTorch's TF32 flags.
Under torch.compile the call into the library is a graph break (torch.compiler.disable): the
compiled graph runs around it, eagerly inside.
"""
from . import _lib
from ._torch import (aligned, call_on, check_inputs, check_precision, model_forward, ptr,
                     triple)

import torch  # noqa: E402 (after _torch, which says what is missing without PyTorch)
import torch.nn as nn  # noqa: E402

CHAPTER = 5
IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE, STRIDE, PADDING, OUTPUT_PADDING = 32, 64, 3, 2, 1, 1
POOL, CLAMP_MIN, CLAMP_MAX = 2, 0.0, 1.0


def _library():
    return _lib.load(CHAPTER)


def _check_inputs(x, weight, conv_bias, scale):
    """The checks of every call; returns (n, d, h, w)."""
    return check_inputs(_library(), CHAPTER, x, IN_CHANNELS,
                        (("conv_transpose.weight", weight, (32, 64, 3, 3, 3)),
                         ("conv_transpose.bias", conv_bias, (64,)),
                         ("scale", scale, (1, 64, 1, 1, 1))))


def _out_shape(n, d, h, w):
    return (n, OUT_CHANNELS, 2 * (d // 2), 2 * (h // 2), 2 * (w // 2))


def _empty(shape, like):
    return torch.empty(shape, device=like.device, dtype=torch.float32)


def _workspace(n, d, h, w, like):
    return _empty((_library().ch05_workspace_floats(n, d, h, w),), like)


def forward_inference(x, weight, conv_bias, scale):
    """y without autograd: the chapter's fastest forward (v7)."""
    n, d, h, w = _check_inputs(x, weight, conv_bias, scale)
    x = aligned(x)
    c, y = _empty(_out_shape(n, d, h, w), x), _empty(_out_shape(n, d, h, w), x)
    call_on(x.device, _library(), CHAPTER, "ch05_forward", ptr(x), ptr(weight), ptr(conv_bias),
            ptr(scale), ptr(c), ptr(y), ptr(_workspace(n, d, h, w, x)), n, d, h, w)
    return y


def forward_inference_tf32(x, weight, conv_bias, scale):
    """y without autograd in TF32: v8 (sm_90a)."""
    n, d, h, w = _check_inputs(x, weight, conv_bias, scale)
    x = aligned(x)
    y = _empty(_out_shape(n, d, h, w), x)
    call_on(x.device, _library(), CHAPTER, "ch05_forward_tf32", ptr(x), ptr(weight),
            ptr(conv_bias), ptr(scale), ptr(y), ptr(_workspace(n, d, h, w, x)), n, d, h, w)
    return y


class Ch05Function(torch.autograd.Function):
    """The training step's forward (xp, c, lse saved) and its backward, as one autograd node."""

    @staticmethod
    def forward(ctx, x, weight, conv_bias, scale):
        n, d, h, w = _check_inputs(x, weight, conv_bias, scale)
        x = aligned(x)
        xp = _empty((n, IN_CHANNELS, d // 2, h // 2, w // 2), x)
        c, y = _empty(_out_shape(n, d, h, w), x), _empty(_out_shape(n, d, h, w), x)
        lse = _empty((n, OUT_CHANNELS), x)
        call_on(x.device, _library(), CHAPTER, "ch05_train_forward", ptr(x), ptr(weight),
                ptr(conv_bias), ptr(scale), ptr(xp), ptr(c), ptr(lse), ptr(y),
                ptr(_workspace(n, d, h, w, x)), n, d, h, w)
        ctx.save_for_backward(weight, scale, xp, c, lse)
        ctx.shape = (n, d, h, w)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        weight, scale, xp, c, lse = ctx.saved_tensors
        n, d, h, w = ctx.shape
        g = aligned(g.to(torch.float32).contiguous())  # autograd may hand an expanded g
        dc = torch.empty_like(c)
        dx = _empty((n, IN_CHANNELS, d, h, w), c) if ctx.needs_input_grad[0] else None
        dw = torch.empty_like(weight)
        dbias = _empty((OUT_CHANNELS,), c)
        dscale = torch.empty_like(scale)
        call_on(c.device, _library(), CHAPTER, "ch05_backward", ptr(weight), ptr(scale), ptr(xp),
                ptr(c), ptr(lse), ptr(g), ptr(dc), ptr(dx), ptr(dw), ptr(dbias), ptr(dscale),
                ptr(_workspace(n, d, h, w, c)), n, d, h, w)
        return dx, dw, dbias, dscale


class ModelNew(nn.Module):
    """KernelBench level 2 #38's Model, its forward and backward in chapter 5's kernels.

    Constructor: KernelBench's, Model(in_channels, out_channels, kernel_size, stride, padding,
    output_padding, pool_kernel_size, clamp_min, clamp_max); the kernels are written for its
    geometry (32 -> 64 channels, kernel 3, stride 2, padding 1, output padding 1, a pool of 2,
    the clamp to [0, 1]), and other values raise ValueError. Keyword-only precision: "fp32" (the
    default, and what KernelBench's ModelNew(*get_init_inputs()) gets) or "tf32" (the inference
    forward in TF32 on wgmma, an H100 or H200; with autograd both are fp32: the module's
    docstring says what each runs); another value raises ValueError. Input x: float32, CUDA,
    contiguous, N x 32 x D x H x W (limits: ch05_check_shape in api.h)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding,
                 pool_kernel_size, clamp_min, clamp_max, *, precision="fp32"):
        super().__init__()
        self.precision = check_precision(precision)
        got = (in_channels, out_channels, triple(kernel_size, "kernel_size"),
               triple(stride, "stride"), triple(padding, "padding"),
               triple(output_padding, "output_padding"),
               triple(pool_kernel_size, "pool_kernel_size"), float(clamp_min), float(clamp_max))
        want = (IN_CHANNELS, OUT_CHANNELS, (KERNEL_SIZE,) * 3, (STRIDE,) * 3, (PADDING,) * 3,
                (OUTPUT_PADDING,) * 3, (POOL,) * 3, CLAMP_MIN, CLAMP_MAX)
        if got != want:
            raise ValueError("chapter 5's kernels take in_channels=32, out_channels=64, "
                             "kernel_size=3, stride=2, padding=1, output_padding=1, "
                             "pool_kernel_size=2, clamp_min=0, clamp_max=1; got %s, %s, %s, %s, "
                             "%s, %s, %s, %s, %s" % got)
        # Model's parameters, in its order: the pool has none; the transposed conv's weight and
        # bias (PyTorch's initialisation), then the scale, ones
        self.avg_pool = nn.AvgPool3d(pool_kernel_size)
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size,
                                                 stride=stride, padding=padding,
                                                 output_padding=output_padding)
        self.clamp_min, self.clamp_max = clamp_min, clamp_max
        self.scale = nn.Parameter(torch.ones(1, out_channels, 1, 1, 1))

    def forward(self, x):
        # with autograd, fp32 in both precisions: the chapter has no TF32 backward
        inference = forward_inference_tf32 if self.precision == "tf32" else forward_inference
        return model_forward(Ch05Function, inference, x, self.conv_transpose.weight,
                             self.conv_transpose.bias, self.scale)

    def extra_repr(self):
        return "precision=%r" % self.precision
