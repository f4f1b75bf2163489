"""Loads a chapter's C library (build/libchNN.so) with ctypes; no PyTorch needed.

The library's functions return 0 or an error code and keep a message (chNN_last_error);
call() turns a nonzero code into a Python exception carrying that message:
    1 (a shape or pointer the kernels do not take)   ValueError
    2 (not enough free device memory)                MemoryError
    3 (a CUDA error)                                 RuntimeError
    4 (this GPU or build cannot run the kernels:     RuntimeError
       the TF32 functions' wgmma needs sm_90a)
The directory searched is $HANDFUSED_LIB_DIR if set, else the repository's build/.
"""
import ctypes
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# argument and return types by letter: p a pointer (cudaStream_t too), i int, z size_t,
# q long long, s char *; "p5 i4 p" is five pointers, four ints, a pointer
_TYPES = {"p": ctypes.c_void_p, "i": ctypes.c_int, "z": ctypes.c_size_t, "q": ctypes.c_longlong,
          "s": ctypes.c_char_p}


def _types(spec):
    return [_TYPES[t[0]] for t in spec.split() for _ in range(int(t[1:] or 1))]


def _api(chapter, functions, release=True):
    """chNN's functions (api.h in its folder) as name -> (restype, argtypes): chNN_last_error,
    then each of functions, suffix -> argument types (an int return) or (return type, argument
    types), then chNN_release where the library keeps setups to free."""
    prefix = "ch%02d_" % chapter
    sigs = {prefix + "last_error": (ctypes.c_char_p, [])}
    for name, spec in functions.items():
        ret, args = spec if isinstance(spec, tuple) else ("i", spec)
        sigs[prefix + name] = (_TYPES[ret], _types(args))
    if release:
        sigs[prefix + "release"] = (None, [])
    return sigs


SIGNATURES = {
    1: _api(1, {"check_shape": "q5", "workspace_floats": ("z", "i4"), "forward": "p5 i4 p",
                "train_forward": "p6 i4 p", "backward": "p11 i4 p"}),
    2: _api(2, {"check_shape": "q5", "workspace_floats": ("z", "i"), "forward": "p5 z i4 p",
                "train_forward": "p6 z i4 p", "backward": "p9 z i4 p",
                "forward_tf32": "p5 z i4 p", "train_forward_tf32": "p6 z i4 p",
                "backward_tf32": "p9 z i4 p"}, release=False),
    3: _api(3, {"check_shape": "q5", "workspace_bytes": ("z", "i4"), "versions": ("s", ""),
                "forward": "p6 i4 p", "train_forward": "p10 i4 p", "backward": "p15 i4 p"}),
    4: _api(4, {"check_shape": "q4", "workspace_floats": ("z", "i3"), "forward": "p8 i3 p",
                "train_forward": "p9 i3 p", "backward": "p15 i3 p"}),
    5: _api(5, {"check_shape": "q5", "workspace_floats": ("z", "i4"), "clusters": "",
                "forward": "p7 i4 p", "forward_tf32": "p6 i4 p", "train_forward": "p9 i4 p",
                "backward": "p12 i4 p"}),
}

EINVAL, ENOMEM, ECUDA, ENOTSUP = 1, 2, 3, 4
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
    check(lib, chapter, name, getattr(lib, name)(*args))


def check(lib, chapter, name, code):
    """Nothing for code 0; else the exception of lib.name's code, with the library's message."""
    if code == 0:
        return
    msg = getattr(lib, "ch%02d_last_error" % chapter)().decode("utf-8", "replace")
    msg = "%s: %s" % (name, msg)
    if code == EINVAL:
        raise ValueError(msg)
    if code == ENOMEM:
        raise MemoryError(msg)
    raise RuntimeError(msg)
