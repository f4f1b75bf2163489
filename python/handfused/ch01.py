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
try:
    import torch
    import torch.nn as nn
except ImportError as e:  # the package imports without PyTorch; this module needs it
    raise ImportError("handfused.ch01 needs PyTorch (import torch failed: %s)" % e) from e

from . import _lib

CHAPTER = 1
IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE, STRIDE, PADDING = 3, 16, 3, 2, 1


def _library():
    return _lib.load(CHAPTER)


def _call(name, *args):
    _lib.call(_library(), CHAPTER, name, *args)


def _ptr(t):
    return None if t is None else t.data_ptr()


def _check_tensor(name, t, device=None):
    """float32, CUDA, contiguous: what the kernels read. TypeError or ValueError otherwise."""
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, not %s" % (name, type(t).__name__))
    if t.dtype != torch.float32:
        raise TypeError("%s must be float32, not %s: the chapter's kernels are fp32 (call "
                        ".float())" % (name, t.dtype))
    if t.device.type != "cuda":
        raise ValueError("%s must be on a CUDA device, not %s" % (name, t.device))
    if device is not None and t.device != device:
        raise ValueError("%s is on %s, the input x on %s" % (name, t.device, device))
    if not t.is_contiguous():
        raise ValueError("%s must be contiguous (call .contiguous()); its strides are %s"
                         % (name, tuple(t.stride())))


def _aligned(t):
    """t, or a copy of it when its data does not start 16-byte aligned (a view into the middle
    of a storage): the kernels load float4s."""
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _check_inputs(x, weight, conv_bias, bias):
    """The checks of every call; returns (n, d, h, w)."""
    _check_tensor("x", x)
    if x.dim() != 5:
        raise ValueError("x must be 5-D (N x 3 x D x H x W), not of shape %s" % (tuple(x.shape),))
    lib = _library()
    code = lib.ch01_check_shape(*x.shape)
    if code:
        raise ValueError("x of shape %s: %s" % (tuple(x.shape),
                                                 lib.ch01_last_error().decode("utf-8", "replace")))
    for name, t, shape in (("conv_transpose.weight", weight, (3, 16, 3, 3, 3)),
                           ("conv_transpose.bias", conv_bias, (16,)), ("bias", bias, None)):
        _check_tensor(name, t, x.device)
        if (shape is not None and tuple(t.shape) != shape) or (shape is None and t.numel() != 1):
            raise ValueError("%s has shape %s, not %s" % (name, tuple(t.shape),
                                                          shape or "one element"))
    n, _, d, h, w = x.shape
    return n, d, h, w


def _out_shape(n, d, h, w):
    return (n, 1, 2 * d - 1, 2 * h - 1, 2 * w - 1)


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream


def forward_inference(x, weight, conv_bias, bias):
    """y without autograd: the chapter's fastest forward (v8)."""
    n, d, h, w = _check_inputs(x, weight, conv_bias, bias)
    x = _aligned(x)
    y = torch.empty(_out_shape(n, d, h, w), device=x.device, dtype=torch.float32)
    with torch.cuda.device(x.device):
        _call("ch01_forward", _ptr(x), _ptr(weight), _ptr(conv_bias), _ptr(bias), _ptr(y),
              n, d, h, w, _stream(x.device))
    return y


class Ch01Function(torch.autograd.Function):
    """The training step's forward (c saved) and its backward, as one autograd node."""

    @staticmethod
    def forward(ctx, x, weight, conv_bias, bias):
        n, d, h, w = _check_inputs(x, weight, conv_bias, bias)
        x = _aligned(x)
        od, oh, ow = 2 * d - 1, 2 * h - 1, 2 * w - 1
        c = torch.empty((n, OUT_CHANNELS, od, oh, ow), device=x.device, dtype=torch.float32)
        y = torch.empty(_out_shape(n, d, h, w), device=x.device, dtype=torch.float32)
        with torch.cuda.device(x.device):
            _call("ch01_train_forward", _ptr(x), _ptr(weight), _ptr(conv_bias), _ptr(bias),
                  _ptr(c), _ptr(y), n, d, h, w, _stream(x.device))
        ctx.save_for_backward(x, weight, bias, c)
        ctx.shape = (n, d, h, w)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, weight, bias, c = ctx.saved_tensors
        n, d, h, w = ctx.shape
        g = _aligned(g.to(torch.float32).contiguous())  # autograd may hand an expanded g
        dev = x.device
        dc = torch.empty_like(c)
        dx = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        dw = torch.empty_like(weight)
        dbias = torch.empty(OUT_CHANNELS, device=dev, dtype=torch.float32)
        db = torch.empty_like(bias)
        lib = _library()
        ws = torch.empty(lib.ch01_workspace_floats(n, d, h, w), device=dev, dtype=torch.float32)
        args = (_ptr(x), _ptr(weight), _ptr(bias), _ptr(c), _ptr(g), _ptr(dc), _ptr(dx), _ptr(dw),
                _ptr(dbias), _ptr(db), _ptr(ws), n, d, h, w)
        with torch.cuda.device(dev):
            try:
                _call("ch01_backward", *args, _stream(dev))
            except MemoryError:
                # the conv's one-time setup for dx found too little free memory: PyTorch's
                # cache may hold it
                torch.cuda.empty_cache()
                _call("ch01_backward", *args, _stream(dev))
        return dx, dw, dbias, db


@torch.compiler.disable
def model_forward(x, weight, conv_bias, bias):
    """The model's forward on explicit tensors: with autograd when a gradient is wanted."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, weight, conv_bias, bias)):
        return Ch01Function.apply(x, weight, conv_bias, bias)
    return forward_inference(x, weight, conv_bias, bias)


def _triple(v, name):
    t = tuple(v) if isinstance(v, (tuple, list)) else (v, v, v)
    if len(t) != 3:
        raise ValueError("%s must be an int or three ints, not %r" % (name, v))
    return t


class ModelNew(nn.Module):
    """KernelBench level 2 #58's Model, its forward and backward in chapter 1's kernels.

    Constructor: KernelBench's, Model(in_channels, out_channels, kernel_size, stride, padding,
    bias_shape); the kernels are written for its geometry (3 -> 16 channels, kernel 3,
    stride 2, padding 1, a one-element bias), and other values raise ValueError. Input x:
    float32, CUDA, contiguous, N x 3 x D x H x W (limits: ch01_check_shape in api.h)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias_shape):
        super().__init__()
        got = (in_channels, out_channels, _triple(kernel_size, "kernel_size"),
               _triple(stride, "stride"), _triple(padding, "padding"))
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
        return model_forward(x, self.conv_transpose.weight, self.conv_transpose.bias, self.bias)
