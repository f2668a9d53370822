"""ctypes declarations of the C API (api/include/flashjit-c/flashjit.h) and
the loading of its library.

The library is, in this order: the path in ``FLASHJIT_LIBRARY`` (a
``libflashjit_c.so`` or ``libflashjit_c_runtime.so``, e.g. of a build
tree), or the ``libflashjit_c.so`` installed inside this package by ``pip
install`` (``flashjit/lib/``), else its ``libflashjit_c_runtime.so``.
"""

import ctypes
import os
import threading

from ._errors import BY_STATUS, InternalError, UserError

FP16, BF16, FP32, E4M3, E5M2 = 0, 1, 2, 3, 4
ARG_F32, ARG_I32, ARG_I64 = 0, 1, 2
ARG_BUFFER_F32, ARG_BUFFER_I32, ARG_BUFFER_I64 = 3, 4, 5
COMPILE_VARLEN, COMPILE_BLOCK_SPARSE = 1, 2
STATUS_NAMES = {
    0: "FLASHJIT_OK",
    1: "FLASHJIT_USER_ERROR",
    2: "FLASHJIT_COMPILE_ERROR",
    3: "FLASHJIT_DRIVER_ERROR",
    4: "FLASHJIT_INTERNAL_ERROR",
}


class Tensor(ctypes.Structure):
    """flashjit_tensor: data, dtype, rank, shape[4], strides[4] (elements)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("shape", ctypes.c_int64 * 4),
        ("strides", ctypes.c_int64 * 4),
    ]


class Arg(ctypes.Structure):
    """flashjit_arg: one parameter or buffer by name."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_int),
        ("scalar", ctypes.c_double),
        ("integer", ctypes.c_int64),
        ("data", ctypes.c_void_p),
        ("size", ctypes.c_int64),
    ]


class Grad(ctypes.Structure):
    """flashjit_grad: an fp32 gradient output of a buffer or parameter."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("data", ctypes.c_void_p),
        ("size", ctypes.c_int64),
    ]


class BlockMaskInfo(ctypes.Structure):
    """flashjit_block_mask_info."""

    _fields_ = [(n, ctypes.c_int64) for n in (
        "block_m", "block_n", "seqlen_q", "seqlen_k", "batch", "heads",
        "num_q_tiles", "num_kv_tiles")] + [("varlen", ctypes.c_int)]


class PageTable(ctypes.Structure):
    """flashjit_page_table: a CSR (layout 0) or block-table (layout 1)
    page table in host memory."""

    _fields_ = [
        ("layout", ctypes.c_int),
        ("batch", ctypes.c_int64),
        ("kv_indptr", ctypes.POINTER(ctypes.c_int32)),
        ("kv_indices", ctypes.POINTER(ctypes.c_int32)),
        ("num_indices", ctypes.c_int64),
        ("kv_last_page_len", ctypes.POINTER(ctypes.c_int32)),
        ("block_table", ctypes.POINTER(ctypes.c_int32)),
        ("max_pages", ctypes.c_int64),
        ("seq_lens", ctypes.POINTER(ctypes.c_int32)),
    ]


_P = ctypes.c_void_p
_T = ctypes.POINTER(Tensor)
_A = ctypes.POINTER(Arg)
_I32P = ctypes.POINTER(ctypes.c_int32)
_I64 = ctypes.c_int64
_STATUS = ctypes.c_int

# name -> (restype, argtypes); functions a library lacks are left out (an
# older or newer library), and the callers say so.
_PROTOTYPES = {
    "flashjit_last_error": (ctypes.c_char_p, []),
    "flashjit_compile": (_STATUS, [ctypes.c_char_p, ctypes.c_char_p,
                                   ctypes.POINTER(_P)]),
    "flashjit_compile_ex": (_STATUS, [ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_uint, ctypes.POINTER(_P)]),
    "flashjit_load": (_STATUS, [ctypes.c_char_p, ctypes.c_char_p,
                                ctypes.c_char_p, ctypes.POINTER(_P)]),
    "flashjit_run": (_STATUS, [_P, _T, _T, _T, _T, _T, _A, ctypes.c_int,
                               _P]),
    "flashjit_kernel_ptx": (ctypes.c_char_p, [_P]),
    "flashjit_kernel_spec": (ctypes.c_char_p, [_P]),
    "flashjit_kernel_flags": (ctypes.c_uint, [_P]),
    "flashjit_kernel_tiles": (_STATUS, [_P, ctypes.POINTER(_I64),
                                        ctypes.POINTER(_I64)]),
    "flashjit_kernel_destroy": (None, [_P]),
    "flashjit_version": (ctypes.c_char_p, []),
    "flashjit_canonical_expr": (_STATUS, [ctypes.c_char_p,
                                          ctypes.POINTER(ctypes.c_char_p)]),
    "flashjit_spec_canonicalize": (_STATUS, [ctypes.c_char_p,
                                             ctypes.c_char_p, ctypes.c_size_t,
                                             ctypes.POINTER(ctypes.c_size_t)]),
    "flashjit_build_block_mask": (_STATUS, [_P, _I64, _I64, _I64, _A,
                                            ctypes.c_int, _P,
                                            ctypes.POINTER(_P)]),
    "flashjit_build_varlen_block_mask": (_STATUS, [_P, _I32P, _I32P, _I64,
                                                   _A, ctypes.c_int, _P,
                                                   ctypes.POINTER(_P)]),
    "flashjit_block_mask_from_bsr": (_STATUS, [_P, _I64, _I64, _I64, _I32P,
                                               _I32P, _I64,
                                               ctypes.POINTER(_P)]),
    "flashjit_block_mask_get_info": (_STATUS, [
        _P, ctypes.POINTER(BlockMaskInfo)]),
    "flashjit_block_mask_copy": (_STATUS, [_P, _I32P, _I32P, _I32P, _I32P]),
    "flashjit_block_mask_destroy": (None, [_P]),
    "flashjit_run_block_sparse": (_STATUS, [_P, _T, _T, _T, _T, _T, _P, _A,
                                            ctypes.c_int, _P]),
    "flashjit_run_varlen": (_STATUS, [_P, _T, _T, _T, _T, _T, _I32P, _I32P,
                                      _I64, _P, _A, ctypes.c_int, _P]),
    "flashjit_merge_states": (_STATUS, [_T, _T, ctypes.c_int, _T, _T,
                                        ctypes.POINTER(ctypes.c_float), _I64,
                                        ctypes.c_int, _P]),
    "flashjit_paged_append": (_STATUS, [_T, _T, _T, _T,
                                        ctypes.POINTER(PageTable),
                                        ctypes.c_int, _P]),
    "flashjit_run_paged": (_STATUS, [_P, _T, _T, _T,
                                     ctypes.POINTER(PageTable), _T, _T, _A,
                                     ctypes.c_int]),
    "flashjit_run_paged_ex": (_STATUS, [_P, _T, _T, _T,
                                        ctypes.POINTER(PageTable), _T, _T, _A,
                                        ctypes.c_int, ctypes.c_int, _P]),
    "flashjit_run_backward": (_STATUS, [_P, _T, _T, _T, _T, _T, _T, _T, _T,
                                        _T, _A, ctypes.c_int,
                                        ctypes.POINTER(Grad), ctypes.c_int,
                                        _P]),
    "flashjit_run_backward_ex": (_STATUS, [_P, _T, _T, _T, _T, _T, _T, _T,
                                           _T, _T, _I32P, _I32P, _I64, _P,
                                           _A, ctypes.c_int,
                                           ctypes.POINTER(Grad),
                                           ctypes.c_int, _P]),
}


class Library:
    """One loaded C API library (libflashjit_c.so or
    libflashjit_c_runtime.so) with its functions declared."""

    def __init__(self, path):
        self.path = str(path)
        try:
            self.c = ctypes.CDLL(self.path)
        except OSError as e:
            raise UserError(f"cannot load the flashjit C library "
                            f"'{self.path}': {e}") from None
        self.missing = set()
        for name, (restype, argtypes) in _PROTOTYPES.items():
            f = getattr(self.c, name, None)
            if f is None:
                self.missing.add(name)
                continue
            f.restype = restype
            f.argtypes = argtypes

    def has(self, name):
        """Whether the library exports the C function ``name``."""
        return name not in self.missing

    def fn(self, name):
        """The C function ``name``; InternalError if this library lacks it."""
        if name in self.missing:
            raise InternalError(f"the flashjit C library '{self.path}' has no "
                                f"{name} (built from older sources?)")
        return getattr(self.c, name)

    def check(self, status):
        """Raises the exception of a failing flashjit_status."""
        if status != 0:
            cls = BY_STATUS.get(status, InternalError)
            message = self.c.flashjit_last_error().decode(errors="replace")
            raise cls(message, STATUS_NAMES.get(status, str(status)))


_lock = threading.Lock()
_default = None


def library_candidates():
    """Where ``default_library`` looks, in order."""
    env = os.environ.get("FLASHJIT_LIBRARY")
    if env:
        return [env]
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
    return [os.path.join(here, "libflashjit_c.so"),
            os.path.join(here, "libflashjit_c_runtime.so")]


def default_library():
    """The process-wide Library (loaded on first use)."""
    global _default
    with _lock:
        if _default is None:
            candidates = library_candidates()
            for path in candidates:
                if os.path.exists(path):
                    _default = Library(path)
                    break
            else:
                raise UserError(
                    "no flashjit C library found (looked at "
                    + ", ".join(candidates)
                    + "); pip install the package, or set FLASHJIT_LIBRARY "
                    "to a built libflashjit_c.so")
        return _default
