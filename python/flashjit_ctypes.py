"""flashjit from Python through the C API (api/include/flashjit-c/flashjit.h).

A thin ctypes binding: no build step, no compiled extension. Load either
library:

- ``libflashjit_c.so``: compiles specs (``Library.compile``) and loads
  bundles;
- ``libflashjit_c_runtime.so``: links no compiler; loads kernels precompiled
  with ``flashjit bundle`` (``Library.load``).

Tensors are anything with ``data_ptr()``, ``dtype``, ``shape`` and
``stride()`` (torch tensors): Q ``[batch, heads_q, seqlen_q, head_dim_qk]``,
K/V ``[batch, heads_kv, seqlen_k, head_dim]``, O ``[batch, heads_q,
seqlen_q, head_dim_v]``, LSE ``[batch, heads_q, seqlen_q]`` fp32; strides in
elements, device memory for GPU kernels. Errors raise ``FlashjitError`` with
the status name and flashjit's message.
"""

import ctypes

FP16, BF16, FP32 = 0, 1, 2
_STATUS = {
    0: "FLASHJIT_OK",
    1: "FLASHJIT_USER_ERROR",
    2: "FLASHJIT_COMPILE_ERROR",
    3: "FLASHJIT_DRIVER_ERROR",
    4: "FLASHJIT_INTERNAL_ERROR",
}
ARG_F32, ARG_I32, ARG_I64 = 0, 1, 2
ARG_BUFFER_F32, ARG_BUFFER_I32, ARG_BUFFER_I64 = 3, 4, 5


class FlashjitError(RuntimeError):
    """A flashjit call failed; ``status`` is the flashjit_status name."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("shape", ctypes.c_int64 * 4),
        ("strides", ctypes.c_int64 * 4),
    ]


class _Arg(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_int),
        ("scalar", ctypes.c_double),
        ("integer", ctypes.c_int64),
        ("data", ctypes.c_void_p),
        ("size", ctypes.c_int64),
    ]


def _dtype_code(dtype):
    name = str(dtype).replace("torch.", "")
    codes = {"float16": FP16, "bfloat16": BF16, "float32": FP32}
    if name not in codes:
        raise FlashjitError("FLASHJIT_USER_ERROR",
                            f"dtype {dtype} is not float16, bfloat16 or "
                            "float32")
    return codes[name]


def _tensor(t, what, optional=False):
    if t is None:
        if optional:
            return None
        raise FlashjitError("FLASHJIT_USER_ERROR", f"{what} is None")
    rank = len(t.shape)
    if rank not in (3, 4):
        raise FlashjitError("FLASHJIT_USER_ERROR",
                            f"{what} has rank {rank}, expected 3 or 4")
    out = _Tensor()
    out.data = t.data_ptr()
    out.dtype = _dtype_code(t.dtype)
    out.rank = rank
    for i in range(4):
        out.shape[i] = t.shape[i] if i < rank else 1
        out.strides[i] = t.stride()[i] if i < rank else 1
    return out


def _check_int_range(name, value, bits):
    """Refuses an integer that would wrap: a plain int is an i32 parameter,
    (int, "i64") an i64 one."""
    low, high = -2**(bits - 1), 2**(bits - 1) - 1
    if not low <= value <= high:
        hint = (" (pass (value, \"i64\") for an i64 parameter)"
                if bits == 32 and -2**63 <= value < 2**63 else "")
        raise FlashjitError("FLASHJIT_USER_ERROR",
                            f"parameter '{name}': i{bits} value {value} is "
                            f"outside [{low}, {high}]{hint}")


def _args(args):
    """dict name -> float | int | (int, "i64") | tensor (a buffer). A plain
    int is an i32 parameter and must fit in i32; a float that overflows f32
    is refused by the C API."""
    items = []
    keep = []
    for name, value in (args or {}).items():
        a = _Arg()
        a.name = name.encode()
        keep.append(a.name)
        if hasattr(value, "data_ptr"):
            kinds = {"float32": ARG_BUFFER_F32, "int32": ARG_BUFFER_I32,
                     "int64": ARG_BUFFER_I64}
            dt = str(value.dtype).replace("torch.", "")
            if dt not in kinds or len(value.shape) != 1:
                raise FlashjitError(
                    "FLASHJIT_USER_ERROR",
                    f"buffer '{name}' must be a 1-D float32, int32 or int64 "
                    f"tensor, got {value.dtype} of shape {tuple(value.shape)}")
            if value.stride()[0] != 1:
                raise FlashjitError("FLASHJIT_USER_ERROR",
                                    f"buffer '{name}' must be contiguous")
            a.kind, a.data, a.size = kinds[dt], value.data_ptr(), value.numel()
        elif isinstance(value, tuple) and len(value) == 2 and value[1] == "i64":
            if isinstance(value[0], bool) or not isinstance(value[0], int):
                raise FlashjitError("FLASHJIT_USER_ERROR",
                                    f"parameter '{name}': an i64 value must "
                                    f"be an int, got "
                                    f"{type(value[0]).__name__}")
            _check_int_range(name, value[0], 64)
            a.kind, a.integer = ARG_I64, value[0]
        elif isinstance(value, bool):
            raise FlashjitError("FLASHJIT_USER_ERROR",
                                f"parameter '{name}' is a bool")
        elif isinstance(value, int):
            # ctypes would silently wrap what does not fit in 64 bits.
            _check_int_range(name, value, 32)
            a.kind, a.integer = ARG_I32, value
        elif isinstance(value, float):
            a.kind, a.scalar = ARG_F32, value
        else:
            raise FlashjitError("FLASHJIT_USER_ERROR",
                                f"argument '{name}' has type "
                                f"{type(value).__name__}")
        items.append(a)
    array = (_Arg * max(1, len(items)))(*items)
    return array, len(items), keep


class Kernel:
    """A compiled or loaded kernel (owns the flashjit_kernel handle)."""

    def __init__(self, lib, handle):
        self._lib = lib
        self._handle = handle

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib._c.flashjit_kernel_destroy(self._handle)
            self._handle = None

    @property
    def ptx(self):
        """The kernel's PTX text (GPU targets) or None."""
        p = self._lib._c.flashjit_kernel_ptx(self._handle)
        return p.decode() if p else None

    def run(self, q, k, v, o, lse=None, args=None, stream=None):
        """O (and LSE) from Q, K, V; ``stream`` is a CUstream as an int
        (torch: ``torch.cuda.current_stream().cuda_stream``) or None."""
        tq, tk, tv, to = (_tensor(q, "q"), _tensor(k, "k"), _tensor(v, "v"),
                          _tensor(o, "o"))
        tl = _tensor(lse, "lse", optional=True)
        array, n, _keep = _args(args)
        self._lib._check(self._lib._c.flashjit_run(
            self._handle, ctypes.byref(tq), ctypes.byref(tk),
            ctypes.byref(tv), ctypes.byref(to),
            ctypes.byref(tl) if tl is not None else None, array, n,
            ctypes.c_void_p(stream or 0)))


class Library:
    """libflashjit_c.so or libflashjit_c_runtime.so at ``path``."""

    def __init__(self, path):
        c = ctypes.CDLL(path)
        c.flashjit_last_error.restype = ctypes.c_char_p
        c.flashjit_compile.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                       ctypes.POINTER(ctypes.c_void_p)]
        c.flashjit_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                    ctypes.c_char_p,
                                    ctypes.POINTER(ctypes.c_void_p)]
        c.flashjit_run.argtypes = [ctypes.c_void_p] + [
            ctypes.POINTER(_Tensor)] * 5 + [ctypes.POINTER(_Arg),
                                            ctypes.c_int, ctypes.c_void_p]
        c.flashjit_kernel_ptx.argtypes = [ctypes.c_void_p]
        c.flashjit_kernel_ptx.restype = ctypes.c_char_p
        c.flashjit_kernel_destroy.argtypes = [ctypes.c_void_p]
        self._c = c

    def _check(self, status):
        if status != 0:
            raise FlashjitError(
                _STATUS.get(status, str(status)),
                self._c.flashjit_last_error().decode(errors="replace"))

    def compile(self, spec_text, target):
        """Compiles canonical spec text for "cpu", "sm_80" or "sm_90a"."""
        h = ctypes.c_void_p()
        self._check(self._c.flashjit_compile(spec_text.encode(),
                                             target.encode(),
                                             ctypes.byref(h)))
        return Kernel(self, h)

    def load(self, bundle_dir, spec_text, target):
        """Loads the bundled kernel of ``spec_text`` for ``target``."""
        h = ctypes.c_void_p()
        self._check(self._c.flashjit_load(str(bundle_dir).encode(),
                                          spec_text.encode(), target.encode(),
                                          ctypes.byref(h)))
        return Kernel(self, h)
