"""Deprecated: use the ``flashjit`` package (``import flashjit``; README
"Python"), which takes any DLPack tensor (numpy, torch, CuPy, ...), has
typed exceptions, varlen, block masks and autograd.

This shim keeps the old interface working on top of it: ``Library(path)``
over ``libflashjit_c.so`` or ``libflashjit_c_runtime.so`` with
``compile(spec_text, target)`` and ``load(bundle_dir, spec_text, target)``
returning a ``Kernel`` whose ``run(q, k, v, o, lse=None, args=None,
stream=None)`` takes objects with ``data_ptr()``, ``dtype``, ``shape`` and
``stride()`` (torch tensors). Errors are ``flashjit.Error`` subclasses
(``FlashjitError`` is ``flashjit.Error``; ``status`` is the status name).
"""

import ctypes
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashjit import _capi  # noqa: E402
from flashjit._api import _scalar_arg  # noqa: E402
from flashjit._errors import Error as FlashjitError  # noqa: E402,F401 (API)
from flashjit._errors import UserError  # noqa: E402

warnings.warn("flashjit_ctypes is deprecated: use the flashjit package",
              DeprecationWarning, stacklevel=2)

FP16, BF16, FP32 = _capi.FP16, _capi.BF16, _capi.FP32
ARG_F32, ARG_I32, ARG_I64 = _capi.ARG_F32, _capi.ARG_I32, _capi.ARG_I64
ARG_BUFFER_F32, ARG_BUFFER_I32, ARG_BUFFER_I64 = (
    _capi.ARG_BUFFER_F32, _capi.ARG_BUFFER_I32, _capi.ARG_BUFFER_I64)
_DTYPES = {"float16": FP16, "bfloat16": BF16, "float32": FP32}
_BUFFERS = {"float32": ARG_BUFFER_F32, "int32": ARG_BUFFER_I32,
            "int64": ARG_BUFFER_I64}


def _tensor(t, what, optional=False):
    if t is None:
        if optional:
            return None
        raise UserError(f"{what} is None")
    rank = len(t.shape)
    if rank not in (3, 4):
        raise UserError(f"{what} has rank {rank}, expected 3 or 4")
    dt = str(t.dtype).replace("torch.", "")
    if dt not in _DTYPES:
        raise UserError(f"dtype {t.dtype} is not float16, bfloat16 or "
                        "float32")
    out = _capi.Tensor()
    out.data, out.dtype, out.rank = t.data_ptr(), _DTYPES[dt], rank
    for i in range(4):
        out.shape[i] = t.shape[i] if i < rank else 1
        out.strides[i] = t.stride()[i] if i < rank else 1
    return out


def _args(args):
    """dict name -> float | int | (int, "i64") | tensor (a buffer)."""
    items, keep = [], []
    for name, value in (args or {}).items():
        a = _capi.Arg()
        a.name = name.encode()
        keep.append(a.name)
        if hasattr(value, "data_ptr"):
            dt = str(value.dtype).replace("torch.", "")
            if dt not in _BUFFERS or len(value.shape) != 1:
                raise UserError(f"buffer '{name}' must be a 1-D float32, "
                                f"int32 or int64 tensor, got {value.dtype} "
                                f"of shape {tuple(value.shape)}")
            if value.stride()[0] != 1:
                raise UserError(f"buffer '{name}' must be contiguous")
            a.kind, a.data, a.size = (_BUFFERS[dt], value.data_ptr(),
                                      value.numel())
        else:
            _scalar_arg(a, name, value)
        items.append(a)
    return (_capi.Arg * max(1, len(items)))(*items), len(items), keep


class Kernel:
    """A compiled or loaded kernel (owns the flashjit_kernel handle)."""

    def __init__(self, lib, handle):
        self._lib, self._handle = lib, handle

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib._c.fn("flashjit_kernel_destroy")(self._handle)
            self._handle = None

    @property
    def ptx(self):
        """The kernel's PTX text (GPU targets) or None."""
        p = self._lib._c.fn("flashjit_kernel_ptx")(self._handle)
        return p.decode() if p else None

    def run(self, q, k, v, o, lse=None, args=None, stream=None):
        """O (and LSE) from Q, K, V; ``stream`` is a CUstream as an int."""
        tq, tk, tv, to = (_tensor(q, "q"), _tensor(k, "k"), _tensor(v, "v"),
                          _tensor(o, "o"))
        tl = _tensor(lse, "lse", optional=True)
        array, n, _keep = _args(args)
        self._lib._c.check(self._lib._c.fn("flashjit_run")(
            self._handle, ctypes.byref(tq), ctypes.byref(tk),
            ctypes.byref(tv), ctypes.byref(to),
            ctypes.byref(tl) if tl is not None else None, array, n,
            ctypes.c_void_p(stream or 0)))


class Library:
    """libflashjit_c.so or libflashjit_c_runtime.so at ``path``."""

    def __init__(self, path):
        self._c = _capi.Library(path)

    def compile(self, spec_text, target):
        """Compiles canonical spec text for "cpu", "sm_80" or "sm_90a"."""
        h = ctypes.c_void_p()
        self._c.check(self._c.fn("flashjit_compile")(
            spec_text.encode(), target.encode(), ctypes.byref(h)))
        return Kernel(self, h)

    def load(self, bundle_dir, spec_text, target):
        """Loads the bundled kernel of ``spec_text`` for ``target``."""
        h = ctypes.c_void_p()
        self._c.check(self._c.fn("flashjit_load")(
            str(bundle_dir).encode(), spec_text.encode(), target.encode(),
            ctypes.byref(h)))
        return Kernel(self, h)
