"""What every chapter module needs to hand PyTorch tensors to its library: the checks of dtype,
device and layout (clear TypeError / ValueError), pointers, streams, and a call that frees
PyTorch's cache once when the library conv's one-time setup finds too little free memory."""
try:
    import torch
except ImportError as e:  # the package imports without PyTorch; the chapter modules need it
    raise ImportError("handfused's chapter modules need PyTorch (import torch failed: %s)"
                      % e) from e

from . import _lib


def ptr(t):
    return None if t is None else t.data_ptr()


def check_tensor(name, t, device=None):
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


def aligned(t):
    """t, or a copy of it when its data does not start 16-byte aligned (a view into the middle
    of a storage): the kernels load float4s."""
    return t if t.data_ptr() % 16 == 0 else t.clone()


def check_shape(lib, chapter, x, channels, spatial="D x H x W"):
    """x N x channels x spatial (its extents named, "D x H x W" or "H x W") and a shape the
    kernels take (the library's chNN_check_shape): ValueError."""
    dims = 2 + len(spatial.split(" x "))
    if x.dim() != dims:
        raise ValueError("x must be %d-D (N x %d x %s), not of shape %s"
                         % (dims, channels, spatial, tuple(x.shape)))
    prefix = "ch%02d_" % chapter
    if getattr(lib, prefix + "check_shape")(*x.shape):
        msg = getattr(lib, prefix + "last_error")().decode("utf-8", "replace")
        raise ValueError("x of shape %s: %s" % (tuple(x.shape), msg))


def check_inputs(lib, chapter, x, channels, params, spatial="D x H x W"):
    """The checks of every call: x (check_tensor, check_shape), then each (name, tensor, want)
    of params on x's device and of the shape want (a tuple), or of want elements in any shape
    (an int): TypeError or ValueError. Returns x's batch and spatial extents, (n, d, h, w) or
    (n, h, w)."""
    check_tensor("x", x)
    check_shape(lib, chapter, x, channels, spatial)
    for name, t, want in params:
        check_tensor(name, t, x.device)
        if isinstance(want, int) and t.numel() != want:
            raise ValueError("%s has shape %s, not %s" % (name, tuple(t.shape), "one element"
                                                          if want == 1 else "%d elements" % want))
        if not isinstance(want, int) and tuple(t.shape) != want:
            raise ValueError("%s has shape %s, not %s" % (name, tuple(t.shape), want))
    return (x.shape[0],) + tuple(x.shape[2:])


def stream(device):
    return torch.cuda.current_stream(device).cuda_stream


def call_on(device, lib, chapter, name, *args):
    """lib.name(*args, PyTorch's current stream) on device; after ENOMEM (the library conv's
    one-time setup found too little free memory: PyTorch's cache may hold it) the cache is
    emptied and the call made once more; a code still nonzero is raised (_lib.check)."""
    with torch.cuda.device(device):
        code = getattr(lib, name)(*args, stream(device))
        if code == _lib.ENOMEM:
            torch.cuda.empty_cache()
            code = getattr(lib, name)(*args, stream(device))
        _lib.check(lib, chapter, name, code)


@torch.compiler.disable
def model_forward(function, inference, *tensors):
    """A model's forward on explicit tensors: function (a torch.autograd.Function, the training
    step's forward and backward) when a gradient is wanted, else inference(*tensors). Under
    torch.compile, a graph break: the library call runs eagerly inside the compiled graph."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return function.apply(*tensors)
    return inference(*tensors)


PRECISIONS = ("fp32", "tf32")


def check_precision(precision, choices=PRECISIONS):
    """precision when it is one of choices (ModelNew's precision keyword), else ValueError
    naming them"""
    if not isinstance(precision, str) or precision not in choices:
        raise ValueError("precision must be one of %s, not %r"
                         % (", ".join(repr(c) for c in choices), precision))
    return precision


def triple(v, name):
    t = tuple(v) if isinstance(v, (tuple, list)) else (v, v, v)
    if len(t) != 3:
        raise ValueError("%s must be an int or three ints, not %r" % (name, v))
    return t
