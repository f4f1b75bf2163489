"""Loads a chapter's C library (build/libchNN.so) with ctypes; no PyTorch needed.

The library's functions return 0 or an error code and keep a message (chNN_last_error);
call() turns a nonzero code into a Python exception carrying that message:
    1 (a shape or pointer the kernels do not take)   ValueError
    2 (not enough free device memory)                MemoryError
    3 (a CUDA error)                                 RuntimeError
The directory searched is $HANDFUSED_LIB_DIR if set, else the repository's build/.
"""
import ctypes
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_p, _i, _ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
# each chapter's functions (api.h in its folder): name -> (restype, argtypes); pointers and
# cudaStream_t as void *
SIGNATURES = {
    1: {
        "ch01_last_error": (ctypes.c_char_p, []),
        "ch01_check_shape": (_i, [_ll] * 5),
        "ch01_workspace_floats": (ctypes.c_size_t, [_i] * 4),
        "ch01_forward": (_i, [_p] * 5 + [_i] * 4 + [_p]),
        "ch01_train_forward": (_i, [_p] * 6 + [_i] * 4 + [_p]),
        "ch01_backward": (_i, [_p] * 11 + [_i] * 4 + [_p]),
        "ch01_release": (None, []),
    },
    2: {
        "ch02_last_error": (ctypes.c_char_p, []),
        "ch02_check_shape": (_i, [_ll] * 5),
        "ch02_workspace_floats": (ctypes.c_size_t, [_i]),
        "ch02_forward": (_i, [_p] * 5 + [ctypes.c_size_t] + [_i] * 4 + [_p]),
        "ch02_train_forward": (_i, [_p] * 6 + [ctypes.c_size_t] + [_i] * 4 + [_p]),
        "ch02_backward": (_i, [_p] * 9 + [ctypes.c_size_t] + [_i] * 4 + [_p]),
    },
    4: {
        "ch04_last_error": (ctypes.c_char_p, []),
        "ch04_check_shape": (_i, [_ll] * 4),
        "ch04_workspace_floats": (ctypes.c_size_t, [_i] * 3),
        "ch04_forward": (_i, [_p] * 8 + [_i] * 3 + [_p]),
        "ch04_train_forward": (_i, [_p] * 9 + [_i] * 3 + [_p]),
        "ch04_backward": (_i, [_p] * 15 + [_i] * 3 + [_p]),
        "ch04_release": (None, []),
    },
    5: {
        "ch05_last_error": (ctypes.c_char_p, []),
        "ch05_check_shape": (_i, [_ll] * 5),
        "ch05_workspace_floats": (ctypes.c_size_t, [_i] * 4),
        "ch05_clusters": (_i, []),
        "ch05_forward": (_i, [_p] * 7 + [_i] * 4 + [_p]),
        "ch05_train_forward": (_i, [_p] * 9 + [_i] * 4 + [_p]),
        "ch05_backward": (_i, [_p] * 12 + [_i] * 4 + [_p]),
        "ch05_release": (None, []),
    },
}

EINVAL, ENOMEM, ECUDA = 1, 2, 3
_loaded = {}


def lib_dir():
    return os.environ.get("HANDFUSED_LIB_DIR") or os.path.join(REPO, "build")


def load(chapter, directory=None):
    """The chapter's library, loaded once per path, its functions typed. FileNotFoundError
    (with the make command that builds it) when it is not there."""
    path = os.path.join(directory or lib_dir(), "libch%02d.so" % chapter)
    if path in _loaded:
        return _loaded[path]
    if not os.path.isfile(path):
        raise FileNotFoundError(
            "%s is not built: run `make lib CH=%d` in %s (or set HANDFUSED_LIB_DIR to the "
            "folder that holds it)" % (path, chapter, REPO))
    lib = ctypes.CDLL(path)
    for name, (restype, argtypes) in SIGNATURES[chapter].items():
        f = getattr(lib, name)
        f.restype, f.argtypes = restype, argtypes
    _loaded[path] = lib
    return lib


def call(lib, chapter, name, *args):
    """lib.name(*args); a nonzero return raised with the library's message."""
    code = getattr(lib, name)(*args)
    if code == 0:
        return
    msg = getattr(lib, "ch%02d_last_error" % chapter)().decode("utf-8", "replace")
    msg = "%s: %s" % (name, msg)
    if code == EINVAL:
        raise ValueError(msg)
    if code == ENOMEM:
        raise MemoryError(msg)
    raise RuntimeError(msg)
