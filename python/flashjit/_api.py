"""compile(), Kernel, BlockMask, attention() and attention_backward()."""

import ctypes
import math
import re
import itertools
import struct
import threading
import weakref

from . import _capi
from . import _dlpack
from ._errors import UserError

# dtype name (DLPack view) -> (flashjit_dtype, spec dtype name)
_FLOAT = {"float16": (_capi.FP16, "fp16"), "bfloat16": (_capi.BF16, "bf16"),
          "float32": (_capi.FP32, "fp32"),
          "float8_e4m3fn": (_capi.E4M3, "e4m3"),
          "float8_e5m2": (_capi.E5M2, "e5m2")}
_SPEC_DTYPE = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32",
               "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
_BUFFER_KIND = {"float32": _capi.ARG_BUFFER_F32, "int32": _capi.ARG_BUFFER_I32,
                "int64": _capi.ARG_BUFFER_I64}
_TAIL = re.compile(
    r", head_dim_qk=(?P<dqk>\d+), head_dim_v=(?P<dv>\d+), "
    r"dtype_q=(?P<tq>\w+), dtype_k=(?P<tk>\w+), dtype_v=(?P<tv>\w+), "
    r"dtype_o=(?P<to>\w+), heads_q=(?P<hq>\d+), heads_kv=(?P<hkv>\d+), "
    r"causal=(?P<causal>\w+), scale=(?P<scale>[^,]+), lse=(?P<lse>\w+)"
    r"(?:, sink=(?P<sink>\w+))?\)$")
# The reserved name of the attention sink in the C API's args and grads
# (FLASHJIT_SINK); ``grads=(flashjit.SINK,)`` asks backward for d sink.
SINK = "@sink"
# The reserved names of the fp8 descales in the C API's args
# (FLASHJIT_Q_DESCALE etc.), by the Python keyword that fills them
# (FlashAttention-3's flash_attn_func names).
DESCALES = {"q_descale": "@q_descale", "k_descale": "@k_descale",
            "v_descale": "@v_descale"}
_CAUSAL = {None: None, False: "none", "none": "none", True: "top_left",
           "top_left": "top_left", "bottom_right": "bottom_right"}


def _lib():
    return _capi.default_library()


def version():
    """The C library's version (the CMake project's), e.g. "0.1.0"."""
    return _lib().fn("flashjit_version")().decode()


def canonical_expr(text):
    """The canonical text of a mask or score expression in the text DSL
    (fully parenthesised, e.g. ``"(kv_idx <= q_idx)"``); UserError with the
    column for a parse error."""
    if not isinstance(text, str):
        raise UserError(f"an expression must be a str, got "
                        f"{type(text).__name__}")
    lib = _lib()
    out = ctypes.c_char_p()
    lib.check(lib.fn("flashjit_canonical_expr")(text.encode(),
                                                ctypes.byref(out)))
    return out.value.decode()


def canonical_spec(text):
    """The canonical text of a spec (``"attention(...)"``, README "DSL")."""
    if not isinstance(text, str):
        raise UserError(f"a spec must be a str, got {type(text).__name__}")
    lib = _lib()
    canonicalize = lib.fn("flashjit_spec_canonicalize")
    raw = text.encode()
    needed = ctypes.c_size_t()
    lib.check(canonicalize(raw, None, 0, ctypes.byref(needed)))
    out = ctypes.create_string_buffer(needed.value)
    lib.check(canonicalize(raw, out, needed.value, ctypes.byref(needed)))
    return out.value.decode()


def _int_arg(name, value):
    """``value`` as a Python int: an int or an integer scalar (numpy,
    torch: ``operator.index``); bools (``True`` would be 1) and the rest
    are a UserError naming ``name``."""
    import operator
    if isinstance(value, bool) or type(value).__name__ in ("bool_", "bool"):
        raise UserError(f"{name} = {value!r} is a bool, not an int")
    if isinstance(value, int):
        return int(value)
    try:
        return operator.index(value)
    except TypeError:
        raise UserError(f"{name} = {value!r} is not an int") from None


def _f32_text(name, value):
    """``value`` as f32 text that parses back to the same f32."""
    if isinstance(value, bool) or getattr(
            getattr(value, "dtype", None), "kind", None) == "b":
        # float(True) is 1.0: a bool is no scale (as head_dim=True is no
        # head dim).
        raise UserError(f"{name} = {value!r} is a bool, not a number")
    if not isinstance(value, (int, float)):
        try:
            value = float(value)  # numpy scalars
        except (TypeError, ValueError):
            raise UserError(f"{name} must be a number, got "
                            f"{type(value).__name__}") from None
    value = float(value)
    if not math.isfinite(value):
        raise UserError(f"{name} = {value} is not finite")
    try:
        f = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        f = math.inf
    if math.isinf(f):
        # struct packs a finite double past f32's range as inf (Python
        # 3.11) or raises OverflowError (older versions).
        raise UserError(f"{name} = {value!r} overflows f32 (largest finite "
                        f"magnitude 3.4028234663852886e+38)")
    text = repr(f)
    return text if ("." in text or "e" in text) else text + ".0"


def spec_text(*, mask=None, score=None, head_dim=None, head_dim_qk=None,
              head_dim_v=None, dtype=None, dtype_q=None, dtype_k=None,
              dtype_v=None, dtype_o=None, heads_q=None, heads_kv=None,
              causal=None, scale=None, return_lse=None, name=None,
              sink=None):
    """Spec text from keywords. ``mask`` and ``score`` are expressions in
    the text DSL, checked and canonicalised on their own (so no expression
    can set another field); ``causal``: None/False/"none", True/"top_left"
    or "bottom_right"; dtypes "fp16"/"bf16"/"fp32" (or "float16",
    "bfloat16", "float32"); ``scale`` None for 1/sqrt(head_dim_qk);
    ``sink`` True for a spec with an attention sink (README "Attention
    sinks": a per-query-head fp32 logit in the softmax denominator, given
    per call)."""
    fields = []
    if name is not None:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*",
                                                         name):
            raise UserError(f"name = {name!r} is not an identifier")
        fields.append(f"name={name}")
    if mask is not None:
        fields.append(f"mask={canonical_expr(mask)}")
    if score is not None:
        fields.append(f"score={canonical_expr(score)}")

    def integer(key, value):
        if value is not None:
            fields.append(f"{key}={_int_arg(key, value)}")

    if head_dim is not None and (head_dim_qk is not None
                                 or head_dim_v is not None):
        raise UserError("head_dim sets head_dim_qk and head_dim_v: give "
                        "either head_dim or those two")
    integer("head_dim", head_dim)
    integer("head_dim_qk", head_dim_qk)
    integer("head_dim_v", head_dim_v)

    def dt(key, value):
        if value is None:
            return
        names = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32",
                 "float16": "fp16", "bfloat16": "bf16", "float32": "fp32",
                 "half": "fp16", "e4m3": "e4m3", "e5m2": "e5m2",
                 "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
        text = str(value).replace("torch.", "")
        if text not in names:
            raise UserError(f"{key} = {value!r} is not fp16, bf16, fp32, "
                            "e4m3 or e5m2")
        fields.append(f"{key}={names[text]}")

    if dtype is not None and any(x is not None for x in
                                 (dtype_q, dtype_k, dtype_v, dtype_o)):
        raise UserError("dtype sets every dtype_*: give either dtype or "
                        "dtype_q/dtype_k/dtype_v/dtype_o")
    dt("dtype", dtype)
    dt("dtype_q", dtype_q)
    dt("dtype_k", dtype_k)
    dt("dtype_v", dtype_v)
    dt("dtype_o", dtype_o)
    integer("heads_q", heads_q)
    integer("heads_kv", heads_kv)
    if causal is not None:
        if not isinstance(causal, (bool, str)) or causal not in _CAUSAL:
            raise UserError(f"causal = {causal!r} is not None, False, True, "
                            f"'none', 'top_left' or 'bottom_right'")
        fields.append(f"causal={_CAUSAL[causal]}")
    if scale is not None:
        fields.append(f"scale={_f32_text('scale', scale)}")
    if return_lse is not None:
        fields.append(f"lse={'true' if return_lse else 'false'}")
    if sink is not None:
        if not isinstance(sink, bool):
            raise UserError(f"sink = {sink!r} is not a bool (spec_text's "
                            f"sink says whether the spec has one)")
        fields.append(f"sink={'true' if sink else 'false'}")
    return "attention(" + ", ".join(fields) + ")"


def _tensor(view, name, ranks, dtypes=_FLOAT):
    if view.dtype not in dtypes:
        raise UserError(f"{name}: dtype {view.dtype} is not "
                        + ", ".join(dtypes))
    if len(view.shape) not in ranks:
        raise UserError(f"{name}: rank {len(view.shape)} (shape "
                        f"{list(view.shape)}), expected "
                        + " or ".join(str(r) for r in ranks))
    t = _capi.Tensor()
    t.data = view.data
    t.dtype = _FLOAT[view.dtype][0]
    t.rank = len(view.shape)
    for i in range(4):
        t.shape[i] = view.shape[i] if i < t.rank else 1
        t.strides[i] = view.strides[i] if i < t.rank else 1
    return t


def _check_int(name, value, bits):
    low, high = -2**(bits - 1), 2**(bits - 1) - 1
    if not low <= value <= high:
        hint = (" (pass (value, \"i64\") for an i64 parameter)"
                if bits == 32 and -2**63 <= value < 2**63 else "")
        # Messages quote at most 200 bytes of the input (and str() of an
        # int past 4300 digits raises ValueError).
        text = (str(value) if value.bit_length() <= 600 else
                f"({'-' if value < 0 else ''}an int of {value.bit_length()} "
                f"bits)")
        raise UserError(f"parameter '{name}': i{bits} value {text} is "
                        f"outside [{low}, {high}]{hint}")


def _scalar_arg(a, name, value):
    """Fills ``a`` for a parameter: float -> f32, int -> i32, (int, "i64")
    -> i64; numpy scalars by their dtype."""
    kind = None
    dtype = getattr(value, "dtype", None)
    if dtype is not None and getattr(value, "shape", None) == ():
        kind = {"float32": "f32", "float64": "f32", "int32": "i32",
                "int64": "i64", "float16": "f32"}.get(str(dtype))
        if kind is None:
            raise UserError(f"parameter '{name}': a {dtype} scalar is not "
                            f"f32, i32 or i64")
        value = value.item()
    elif isinstance(value, tuple) and len(value) == 2 and value[1] in (
            "i64", "i32", "f32"):
        kind, value = value[1], value[0]
    elif isinstance(value, bool):
        raise UserError(f"parameter '{name}' is a bool (give an int or a "
                        f"float)")
    elif isinstance(value, int):
        kind = "i32"
    elif isinstance(value, float):
        kind = "f32"
    else:
        raise UserError(f"parameter '{name}' has type {type(value).__name__}"
                        f" (give a float, an int or (int, \"i64\"))")
    if kind == "f32":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"parameter '{name}': an f32 value must be a "
                            f"number, got {type(value).__name__}")
        a.kind, a.scalar = _capi.ARG_F32, float(value)
    else:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"parameter '{name}': an {kind} value must be an "
                            f"int, got {type(value).__name__}")
        _check_int(name, value, 32 if kind == "i32" else 64)
        a.kind = _capi.ARG_I32 if kind == "i32" else _capi.ARG_I64
        a.integer = value


class _Args:
    """flashjit_arg array of params and buffers (keeps them alive)."""

    def __init__(self, params, buffers, device, stream, sink=None,
                 descales=()):
        self.keep = []
        self.views = {}
        items = []
        seen = set()
        # (reserved name, checked view) pairs from _v_descaleiews.
        for reserved, v in descales:
            a = _capi.Arg()
            a.name = reserved.encode()
            a.kind, a.data, a.size = (_capi.ARG_BUFFER_F32, v.data,
                                      _prod(v.shape))
            self.keep.append(v)
            items.append(a)
        if sink is not None:
            a = _capi.Arg()
            a.name = SINK.encode()
            v = _dlpack.view(sink, "sink", stream)
            if v.dtype != "float32" or len(v.shape) != 1:
                raise UserError(f"sink must be a 1-D float32 array of "
                                f"heads_q logits, got {v.dtype} of shape "
                                f"{list(v.shape)}")
            if v.shape[0] > 1 and v.strides[0] != 1:
                raise UserError(f"sink must be contiguous (stride "
                                f"{v.strides[0]})")
            _same_device(v, device)
            a.kind, a.data, a.size = _capi.ARG_BUFFER_F32, v.data, v.shape[0]
            self.keep.append(v)
            items.append(a)
        for name, value in (params or {}).items():
            a = _capi.Arg()
            a.name = self._name(name, seen)
            _scalar_arg(a, name, value)
            items.append(a)
        for name, value in (buffers or {}).items():
            a = _capi.Arg()
            a.name = self._name(name, seen)
            v = _dlpack.view(value, f"buffer '{name}'", stream)
            if v.dtype not in _BUFFER_KIND or len(v.shape) != 1:
                raise UserError(f"buffer '{name}' must be a 1-D float32, "
                                f"int32 or int64 array, got {v.dtype} of "
                                f"shape {list(v.shape)}")
            if v.shape[0] > 1 and v.strides[0] != 1:
                raise UserError(f"buffer '{name}' must be contiguous "
                                f"(stride {v.strides[0]})")
            _same_device(v, device)
            a.kind, a.data, a.size = _BUFFER_KIND[v.dtype], v.data, v.shape[0]
            self.keep.append(v)
            self.views[name] = v
            items.append(a)
        self.n = len(items)
        self.array = (_capi.Arg * max(1, len(items)))(*items)

    def _name(self, name, seen):
        if not isinstance(name, str):
            raise UserError(f"argument name {name!r} is not a str")
        for key, reserved in DESCALES.items():
            if name == reserved:
                raise UserError(f"argument name {name!r} is reserved for "
                                f"the fp8 descale {key}; pass {key}=")
        if name in seen:
            raise UserError(f"argument '{name}' is given both as a parameter"
                            f" and as a buffer")
        seen.add(name)
        b = name.encode()
        self.keep.append(b)
        return b


def _prod(shape):
    n = 1
    for x in shape:
        n *= x
    return n


def _v_descaleiews(kernel, descales, batch, heads_kv, device, stream):
    """[(reserved name, view)] of ``run``'s q_descale/k/v (``descales``:
    keyword -> value or None) after the checks the C library cannot make
    (it sees a pointer and a size): each given one must belong to an fp8
    tensor of the spec and be a contiguous float32 array of shape [1] (per
    tensor) or [batch, heads_kv] (per block, FA3's shape) on the kernel's
    device. The C library checks the values (finite, on the CPU)."""
    out = []
    for key, value in descales.items():
        if value is None:
            continue
        name = key[0]  # "q", "k", "v"
        spec_dtype = kernel._fields["t" + name]
        if spec_dtype not in ("e4m3", "e5m2"):
            raise UserError(f"{key} was given, but the kernel's dtype_{name} "
                            f"is {spec_dtype}: descales belong to fp8 "
                            f"tensors (e4m3, e5m2)")
        v = _dlpack.view(value, key, stream)
        if v.dtype != "float32":
            raise UserError(f"{key}: dtype {v.dtype}, expected float32 "
                            f"(descale = amax / fp8 max: "
                            f"flashjit.torch.quantize_fp8)")
        shape = list(v.shape)
        if shape != [1] and shape != [batch, heads_kv]:
            raise UserError(f"{key}: shape {shape}, expected [1] (per "
                            f"tensor) or [batch, heads_kv] = [{batch}, "
                            f"{heads_kv}] (per block)")
        if len(shape) == 2 and not ((heads_kv == 1 or v.strides[1] == 1)
                                    and (batch == 1
                                         or v.strides[0] == heads_kv)):
            raise UserError(f"{key} must be contiguous: strides "
                            f"{list(v.strides)} for shape {shape}, expected "
                            f"[{heads_kv}, 1]")
        _same_device(v, device)
        out.append((DESCALES[key], v))
    return out


def _same_device(view, device):
    """UserError unless ``view`` is on ``device`` ("cpu" or "cuda:N")."""
    where = ("cpu" if view.device_type == _dlpack.KDL_CPU else
             f"cuda:{view.device_id}" if view.device_type in (
                 _dlpack.KDL_CUDA, _dlpack.KDL_CUDA_MANAGED) else view.device)
    if where != device:
        raise UserError(f"{view.name} is on {where}, but the kernel runs on "
                        f"{device}")


def _module(obj):
    return type(obj).__module__.split(".")[0]


def _streams(obj, device_type, device_id, stream):
    """(stream for __dlpack__, CUstream for the launch) of a call whose
    first tensor is ``obj``: the caller's ``stream``, else torch's or
    CuPy's current stream, else the legacy default stream."""
    if device_type not in (_dlpack.KDL_CUDA, _dlpack.KDL_CUDA_MANAGED):
        return None, 0
    if stream is None:
        mod = _module(obj)
        if mod == "torch":
            import torch
            stream = torch.cuda.current_stream(device_id).cuda_stream
        elif mod == "cupy":
            import cupy
            stream = cupy.cuda.get_current_stream().ptr
        else:
            stream = 0
    stream = _int_arg("stream", stream)
    return (stream if stream != 0 else 1), stream


def _empty(like, shape, dtype, device_type, device_id):
    """An uninitialised array of ``shape`` and ``dtype`` (numpy-style name)
    from the library of ``like``: numpy, torch or CuPy; other producers get
    numpy arrays on the CPU and need ``out=`` on a GPU."""
    mod = _module(like)
    on_cpu = device_type == _dlpack.KDL_CPU
    if mod == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, dtype),
                           device=like.device)
    if mod == "cupy" and not on_cpu:
        import cupy
        with cupy.cuda.Device(device_id):
            return cupy.empty(shape, dtype=dtype)
    if on_cpu:
        import numpy
        if dtype == "bfloat16":
            try:
                import ml_dtypes
                return numpy.empty(shape, dtype=ml_dtypes.bfloat16)
            except ImportError:
                raise UserError("bf16 outputs in numpy need ml_dtypes "
                                "(pip install ml_dtypes), or pass out=")
        return numpy.empty(shape, dtype=dtype)
    raise UserError(f"cannot allocate outputs for {mod} tensors on the GPU: "
                    f"pass out= (and lse=) made by torch or CuPy")


def _target_for(view):
    """The compile target of a tensor's device: "cpu", or the GPU's
    architecture ("sm_90a" for compute capability 9.0, "sm_80" for other
    8.x and later ones)."""
    if view.device_type == _dlpack.KDL_CPU:
        return "cpu"
    if view.device_type not in (_dlpack.KDL_CUDA, _dlpack.KDL_CUDA_MANAGED):
        raise UserError(f"{view.name} is on {view.device}: flashjit runs on "
                        f"the CPU and on CUDA GPUs")
    if view.device_id != 0:
        raise UserError(f"{view.name} is on cuda:{view.device_id}: the C "
                        f"API runs GPU kernels on cuda:0")
    cc = None
    mod = _module(view.obj)
    try:
        if mod == "cupy":
            import cupy
            cc = cupy.cuda.Device(view.device_id).compute_capability
            cc = (int(cc[:-1]), int(cc[-1]))
        else:
            import torch
            cc = torch.cuda.get_device_capability(view.device_id)
    except ImportError:
        raise UserError("cannot tell the GPU's architecture without torch or "
                        "CuPy: pass target='sm_80' or 'sm_90a'") from None
    if cc == (9, 0):
        return "sm_90a"
    if cc >= (8, 0):
        return "sm_80"
    raise UserError(f"compute capability {cc[0]}.{cc[1]} of cuda:"
                    f"{view.device_id} is below 8.0 (sm_80)")


_MASK_KEYS = itertools.count(1)
_MASKS = weakref.WeakValueDictionary()


def _block_mask_by_key(key):
    """The live BlockMask of ``key`` (BlockMask._key; 0: None)."""
    if not key:
        return None
    mask = _MASKS.get(key)
    if mask is None:
        raise UserError(f"block mask #{key} was freed before its use (the "
                        f"torch ops carry a key, not the mask: keep a "
                        f"reference to the BlockMask until backward())")
    return mask


def _mask_spec_key(spec):
    """A canonical spec without its lse and sink fields, which do not
    change the mask."""
    return re.sub(r", (lse|sink)=\w+", "", spec)


def _check_mask_spec(block_mask, kernel):
    """UserError when ``block_mask`` was built from another spec's mask
    than ``kernel``'s (BSR masks fit any spec)."""
    if block_mask.spec is not None and _mask_spec_key(
            block_mask.spec) != _mask_spec_key(kernel.spec):
        raise UserError(f"block_mask was built for spec {block_mask.spec!r}"
                        f", but this call's spec is {kernel.spec!r}: build "
                        f"it with create_block_mask for this call's mask, "
                        f"shapes and dtypes")


class BlockMask:
    """A block mask (FlexAttention's BlockMask form; README "Semantics" 12)
    owned by flashjit, made by ``Kernel.build_block_mask`` or
    ``Kernel.block_mask_from_bsr``; pass it to ``Kernel.run`` or
    ``attention(block_mask=...)`` of a kernel with the same tiles and
    target (``create_block_mask`` builds one for an ``attention`` call's
    spec; training: the backward visits the same tiles). Attributes:
    ``block_size`` (block_m, block_n), ``seqlen_q``, ``seqlen_k``,
    ``batch`` and ``heads`` (1: shared), ``num_q_tiles``,
    ``num_kv_tiles``, ``varlen``, ``target``, ``spec`` (the canonical
    spec whose mask it holds; None for a BSR layout)."""

    def __init__(self, lib, handle, target, spec=None):
        self._lib, self._handle, self.target = lib, handle, target
        # The canonical spec whose mask it holds (None for a BSR layout,
        # which fits any spec with these tiles); attention() checks it.
        self.spec = spec
        # The handle the torch ops carry (an int: the ops take no Python
        # objects); _block_mask_by_key finds the mask while it lives.
        self._key = next(_MASK_KEYS)
        _MASKS[self._key] = self
        info = _capi.BlockMaskInfo()
        lib.check(lib.fn("flashjit_block_mask_get_info")(
            handle, ctypes.byref(info)))
        self.block_size = (info.block_m, info.block_n)
        self.seqlen_q, self.seqlen_k = info.seqlen_q, info.seqlen_k
        self.batch, self.heads = info.batch, info.heads
        self.num_q_tiles, self.num_kv_tiles = info.num_q_tiles, \
            info.num_kv_tiles
        self.varlen = bool(info.varlen)

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.fn("flashjit_block_mask_destroy")(self._handle)
            self._handle = None

    def to_numpy(self):
        """The four lists as numpy int32 arrays: ``kv_num_blocks`` and
        ``full_kv_num_blocks`` [batch, heads, num_q_tiles], ``kv_indices``
        and ``full_kv_indices`` [batch, heads, num_q_tiles, num_kv_tiles]
        (entries past a row's count unspecified)."""
        import numpy as np
        rows = (self.batch, self.heads, self.num_q_tiles)
        out = {"kv_num_blocks": np.zeros(rows, np.int32),
               "kv_indices": np.zeros(rows + (self.num_kv_tiles,), np.int32),
               "full_kv_num_blocks": np.zeros(rows, np.int32),
               "full_kv_indices": np.zeros(rows + (self.num_kv_tiles,),
                                           np.int32)}
        p = {k: v.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
             for k, v in out.items()}
        self._lib.check(self._lib.fn("flashjit_block_mask_copy")(
            self._handle, p["kv_num_blocks"], p["kv_indices"],
            p["full_kv_num_blocks"], p["full_kv_indices"]))
        return out

    def __repr__(self):
        return (f"BlockMask(block_size={self.block_size}, seqlen_q="
                f"{self.seqlen_q}, seqlen_k={self.seqlen_k}, batch="
                f"{self.batch}, heads={self.heads}, varlen={self.varlen}, "
                f"target={self.target!r})")


def _host_int32(values, name):
    """A contiguous host int32 copy of ``values`` (any DLPack array, list,
    tuple) as a ctypes array, and its length."""
    if isinstance(values, (list, tuple)):
        items = list(values)
    else:
        v = _dlpack.view(values, name)
        if v.dtype not in ("int32", "int64") or len(v.shape) != 1:
            raise UserError(f"{name} must be a 1-D int32 array, got "
                            f"{v.dtype} of shape {list(v.shape)}")
        if v.device_type != _dlpack.KDL_CPU:
            # A device array: copy through its library (torch or CuPy).
            mod = _module(values)
            if mod == "torch":
                items = values.cpu().tolist()
            elif mod == "cupy":
                items = values.get().tolist()
            else:
                raise UserError(f"{name} is on {v.device}: give it in host "
                                f"memory")
        else:
            ctype = ctypes.c_int32 if v.dtype == "int32" else ctypes.c_int64
            items = [ctype.from_address(v.data + i * v.strides[0] *
                                        v.itemsize).value
                     for i in range(v.shape[0])]
    for i, x in enumerate(items):
        if isinstance(x, bool) or not isinstance(x, int) or not \
                -2**31 <= x < 2**31:
            raise UserError(f"{name}[{i}] = {x!r} is not an int32")
    return (ctypes.c_int32 * max(1, len(items)))(*items), len(items)


class Kernel:
    """A compiled attention kernel (``flashjit.compile``): ``spec``
    (canonical text), ``target``, ``ptx`` (GPU targets), ``varlen``,
    ``block_sparse``, ``block_size`` (queries, keys per tile). Reuse it:
    ``run`` never compiles."""

    def __init__(self, lib, handle, target):
        self._lib, self._handle, self.target = lib, handle, target
        self.spec = lib.fn("flashjit_kernel_spec")(handle).decode()
        flags = lib.fn("flashjit_kernel_flags")(handle)
        self.varlen = bool(flags & _capi.COMPILE_VARLEN)
        self.block_sparse = bool(flags & _capi.COMPILE_BLOCK_SPARSE)
        bm, bn = ctypes.c_int64(), ctypes.c_int64()
        lib.check(lib.fn("flashjit_kernel_tiles")(handle, ctypes.byref(bm),
                                                  ctypes.byref(bn)))
        self.block_size = (bm.value, bn.value)
        m = _TAIL.search(self.spec)
        if not m:
            raise UserError(f"unexpected canonical spec text {self.spec!r}")
        self._fields = m.groupdict()
        self.return_lse = self._fields["lse"] == "true"
        self.sink = self._fields["sink"] == "true"
        self.heads_q = int(self._fields["hq"])
        self.heads_kv = int(self._fields["hkv"])
        self.head_dim_qk = int(self._fields["dqk"])
        self.head_dim_v = int(self._fields["dv"])
        self.dtype_o = _SPEC_DTYPE[self._fields["to"]]

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.fn("flashjit_kernel_destroy")(self._handle)
            self._handle = None

    def __repr__(self):
        return f"Kernel({self.spec!r}, target={self.target!r})"

    @property
    def ptx(self):
        """The kernel's PTX text (GPU targets) or None (CPU)."""
        p = self._lib.fn("flashjit_kernel_ptx")(self._handle)
        return p.decode() if p else None

    def _device(self):
        # The C API loads GPU kernels on device 0.
        return "cpu" if self.target == "cpu" else "cuda:0"

    def run(self, q, k, v, *, out=None, lse=None, params=None, buffers=None,
            cu_seqlens_q=None, cu_seqlens_k=None, block_mask=None,
            stream=None, sink=None, q_descale=None, k_descale=None,
            v_descale=None):
        """O (and LSE when the spec returns it: then ``(O, LSE)``) from Q,
        K, V, any DLPack tensors on the kernel's device (numpy on the CPU,
        torch, CuPy, ...). Dense: q [B, Hq, Sq, Dqk], k [B, Hkv, Sk, Dqk],
        v [B, Hkv, Sk, Dv]; O [B, Hq, Sq, Dv], LSE [B, Hq, Sq] fp32. Varlen
        kernels: q [total_q, Hq, Dqk], k/v [total_k, Hkv, D], O [total_q,
        Hq, Dv], LSE [Hq, total_q], with ``cu_seqlens_q``/``cu_seqlens_k``
        (int32, batch + 1 entries; copied to the host). Block-sparse
        kernels need ``block_mask`` (a BlockMask). ``out``/``lse`` are
        written when given, else allocated with the library of ``q``.
        ``params``: name -> float (f32) | int (i32) | (int, "i64");
        ``buffers``: name -> 1-D float32/int32/int64 array on the kernel's
        device. ``stream``: a CUstream as an int (default: torch's or
        CuPy's current stream). ``sink``: the attention sink, a 1-D float32
        array of heads_q logits on the kernel's device (required by, and
        only accepted by, a spec with sink=true). ``q_descale``,
        ``k_descale``, ``v_descale`` (fp8 q, k, v only; FlashAttention-3's
        names): float32 arrays on the kernel's device, shape [1] (per
        tensor) or [batch, heads_kv] (per block, contiguous; query head h
        takes block h // (heads_q / heads_kv)); the real value of an fp8
        element is its value times its descale; None means 1
        (``flashjit.torch.quantize_fp8`` makes both). Raises UserError (bad
        tensors, arguments, masks), DriverError (no GPU, launch
        failure)."""
        lib = self._lib
        dev_type, dev_id = _dlpack.device_of(q, "q")
        dl_stream, launch = _streams(q, dev_type, dev_id, stream)
        qv = _dlpack.view(q, "q", dl_stream)
        kv = _dlpack.view(k, "k", dl_stream)
        vv = _dlpack.view(v, "v", dl_stream)
        device = self._device()
        for x in (qv, kv, vv):
            _same_device(x, device)
        rank = 3 if self.varlen else 4
        tq, tk, tv = (_tensor(qv, "q", (rank,)), _tensor(kv, "k", (rank,)),
                      _tensor(vv, "v", (rank,)))
        if self.varlen:
            if cu_seqlens_q is None or cu_seqlens_k is None:
                raise UserError("a varlen kernel needs cu_seqlens_q and "
                                "cu_seqlens_k")
            o_shape = (qv.shape[0], qv.shape[1], vv.shape[2])
            lse_shape = (qv.shape[1], qv.shape[0])
        else:
            if cu_seqlens_q is not None or cu_seqlens_k is not None:
                raise UserError("cu_seqlens_q/cu_seqlens_k are for varlen "
                                "kernels (compile(..., varlen=True))")
            o_shape = (qv.shape[0], qv.shape[1], qv.shape[2], vv.shape[3])
            lse_shape = qv.shape[:3]
        # The spec's dtypes first: allocating a bf16 O for fp16 inputs
        # would complain about ml_dtypes instead of the mismatch.
        for x, key in ((qv, "tq"), (kv, "tk"), (vv, "tv")):
            want = _SPEC_DTYPE[self._fields[key]]
            if x.dtype != want:
                raise UserError(f"{x.name}: dtype {x.dtype}, but the "
                                f"kernel's spec says {want} (dtype_"
                                f"{x.name}={self._fields[key]})")
        if out is None:
            out = _empty(q, o_shape, self.dtype_o, qv.device_type,
                         qv.device_id)
        ov = _dlpack.view(out, "out", dl_stream)
        _same_device(ov, device)
        if ov.readonly:
            raise UserError("out is read-only")
        to = _tensor(ov, "out", (rank,))
        tl = None
        if self.return_lse:
            if lse is None:
                lse = _empty(q, lse_shape, "float32", qv.device_type,
                             qv.device_id)
            lv = _dlpack.view(lse, "lse", dl_stream)
            _same_device(lv, device)
            if lv.readonly:
                raise UserError("lse is read-only")
            tl = _tensor(lv, "lse", (rank - 1,))
        elif lse is not None:
            raise UserError("lse given, but the kernel's spec has lse=false "
                            "(compile with return_lse=True)")
        descales = {"q_descale": q_descale, "k_descale": k_descale,
                    "v_descale": v_descale}
        if any(x is not None for x in descales.values()):
            # Varlen: the run checks cu_seqlens_q's length against
            # cu_seqlens_k's below.
            batch = (_host_int32(cu_seqlens_q, "cu_seqlens_q")[1] - 1
                     if self.varlen else qv.shape[0])
            descales = _v_descaleiews(self, descales, batch, kv.shape[1],
                                      device, dl_stream)
        else:
            descales = ()
        args = _Args(params, buffers, device, dl_stream, sink, descales)
        ref = ctypes.byref
        lse_ref = ref(tl) if tl is not None else None
        mask_handle = None
        if block_mask is not None:
            if not isinstance(block_mask, BlockMask):
                raise UserError(f"block_mask must be a flashjit.BlockMask, "
                                f"got {type(block_mask).__name__}")
            if not self.block_sparse:
                raise UserError("block_mask given to a kernel compiled "
                                "without block_sparse=True")
            mask_handle = block_mask._handle
        elif self.block_sparse:
            raise UserError("a block-sparse kernel needs block_mask= (from "
                            "build_block_mask or block_mask_from_bsr)")
        if self.varlen:
            cq, nq = _host_int32(cu_seqlens_q, "cu_seqlens_q")
            ck, nk = _host_int32(cu_seqlens_k, "cu_seqlens_k")
            if nq != nk or nq < 1:
                raise UserError(f"cu_seqlens_q has {nq} entries and "
                                f"cu_seqlens_k {nk}: both need batch + 1 "
                                f">= 1")
            status = lib.fn("flashjit_run_varlen")(
                self._handle, ref(tq), ref(tk), ref(tv), ref(to), lse_ref, cq,
                ck, nq - 1, mask_handle, args.array, args.n,
                ctypes.c_void_p(launch))
        elif self.block_sparse:
            status = lib.fn("flashjit_run_block_sparse")(
                self._handle, ref(tq), ref(tk), ref(tv), ref(to), lse_ref,
                mask_handle, args.array, args.n, ctypes.c_void_p(launch))
        else:
            status = lib.fn("flashjit_run")(
                self._handle, ref(tq), ref(tk), ref(tv), ref(to), lse_ref,
                args.array, args.n, ctypes.c_void_p(launch))
        lib.check(status)
        return (out, lse) if self.return_lse else out

    def run_paged(self, q, k_cache, v_cache, *, kv_indptr=None,
                  kv_indices=None, kv_last_page_len=None, block_table=None,
                  seq_lens=None, out=None, lse=None, params=None,
                  buffers=None, sink=None, num_splits=0, stream=None):
        """Paged decoding (README "Serving"): q [B, Hq, q_len, Dqk] (the
        last q_len positions of each sequence; use causal="bottom_right")
        against k_cache [num_pages, Hkv, page_size, Dqk] and v_cache (any
        strides) through a CSR (``kv_indptr``, ``kv_indices``,
        ``kv_last_page_len``) or block-table (``block_table`` [B,
        max_pages], ``seq_lens``) page table (int32 arrays on any device,
        copied to the host and checked). Returns O [B, Hq, q_len, Dv] (and
        LSE [B, Hq, q_len] when the spec returns it). ``params``,
        ``buffers``, ``sink`` as in ``run``. CPU: a kernel compiled with
        ``varlen=True``, numpy tensors. GPU (any kernel for sm_80/sm_90a,
        CUDA tensors on device 0, head_dim contiguous, 16-byte aligned):
        the split-KV decode kernels of the spec (bundled with
        ``flashjit bundle --kernel fwd,decode``, else compiled through the
        cache on the first call), q_len 1..64, ``num_splits`` key splits
        (0: automatic; 1..1024), on ``stream`` (default: torch's or CuPy's
        current stream), which the call synchronises. Raises UserError
        naming the field, DriverError (no GPU, launch failure)."""
        if self.target == "cpu" and (not self.varlen or self.block_sparse):
            raise UserError("run_paged on the CPU needs a kernel compiled "
                            "with varlen=True (and not block_sparse)")
        if isinstance(num_splits, bool) or not isinstance(num_splits, int) \
                or not 0 <= num_splits <= 1024:
            raise UserError(f"num_splits = {num_splits!r}, expected 0 "
                            f"(automatic) or 1..1024")
        lib = self._lib
        device = self._device()
        dev_type, dev_id = _dlpack.device_of(q, "q")
        dl_stream, launch = _streams(q, dev_type, dev_id, stream)
        qv = _dlpack.view(q, "q", dl_stream)
        kv = _dlpack.view(k_cache, "k_cache", dl_stream)
        vv = _dlpack.view(v_cache, "v_cache", dl_stream)
        for x in (qv, kv, vv):
            _same_device(x, device)
        tq, tk, tv = (_tensor(qv, "q", (4,)), _tensor(kv, "k_cache", (4,)),
                      _tensor(vv, "v_cache", (4,)))
        if out is None:
            out = _empty(q, (qv.shape[0], qv.shape[1], qv.shape[2],
                             vv.shape[3]), self.dtype_o, qv.device_type,
                         qv.device_id)
        ov = _dlpack.view(out, "out", dl_stream)
        _same_device(ov, device)
        if ov.readonly:
            raise UserError("out is read-only")
        to = _tensor(ov, "out", (4,))
        tl = None
        if self.return_lse:
            if lse is None:
                lse = _empty(q, tuple(qv.shape[:3]), "float32",
                             qv.device_type, qv.device_id)
            lv = _dlpack.view(lse, "lse", dl_stream)
            _same_device(lv, device)
            if lv.readonly:
                raise UserError("lse is read-only")
            tl = _tensor(lv, "lse", (3,))
        elif lse is not None:
            raise UserError("lse given, but the kernel's spec has lse=false")
        table, keep = _page_table(kv_indptr, kv_indices, kv_last_page_len,
                                  block_table, seq_lens)
        args = _Args(params, buffers, device, dl_stream, sink)
        ref = ctypes.byref
        lib.check(lib.fn("flashjit_run_paged_ex")(
            self._handle, ref(tq), ref(tk), ref(tv), ref(table), ref(to),
            ref(tl) if tl is not None else None, args.array, args.n,
            num_splits, ctypes.c_void_p(launch)))
        del keep
        return (out, lse) if self.return_lse else out

    def build_block_mask(self, batch=None, seqlen_q=None, seqlen_k=None, *,
                         params=None, buffers=None, cu_seqlens_q=None,
                         cu_seqlens_k=None, stream=None):
        """The BlockMask of the spec's mask (block-sparse kernels): for
        ``batch`` x ``seqlen_q`` x ``seqlen_k`` calls, or, for a varlen
        kernel, the packed batch of ``cu_seqlens_q``/``cu_seqlens_k``;
        ``params``/``buffers`` as the mask will see them in ``run`` (reuse
        the mask only while they are unchanged)."""
        lib = self._lib
        handle = ctypes.c_void_p()
        launch = 0 if stream is None else _int_arg("stream", stream)
        args = _Args(params, buffers, self._device(),
                     None if self.target == "cpu" else (launch or 1))
        if self.varlen:
            if cu_seqlens_q is None or cu_seqlens_k is None:
                raise UserError("a varlen kernel's block mask needs "
                                "cu_seqlens_q and cu_seqlens_k")
            cq, nq = _host_int32(cu_seqlens_q, "cu_seqlens_q")
            ck, nk = _host_int32(cu_seqlens_k, "cu_seqlens_k")
            if nq != nk or nq < 1:
                raise UserError(f"cu_seqlens_q has {nq} entries and "
                                f"cu_seqlens_k {nk}: both need batch + 1 "
                                f">= 1")
            lib.check(lib.fn("flashjit_build_varlen_block_mask")(
                self._handle, cq, ck, nq - 1, args.array, args.n,
                ctypes.c_void_p(launch), ctypes.byref(handle)))
        else:
            for key, value in (("batch", batch), ("seqlen_q", seqlen_q),
                               ("seqlen_k", seqlen_k)):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise UserError(f"{key} = {value!r} is not an int")
            lib.check(lib.fn("flashjit_build_block_mask")(
                self._handle, batch, seqlen_q, seqlen_k, args.array, args.n,
                ctypes.c_void_p(launch), ctypes.byref(handle)))
        return BlockMask(lib, handle, self.target, self.spec)

    def block_mask_from_bsr(self, row_offsets, col_indices, seqlen_q,
                            seqlen_k, heads=1):
        """A BlockMask from a BSR layout (as scipy.sparse.bsr_matrix) over
        this kernel's tiles (``block_size``): ``heads`` (1 or heads_q) x
        ceil(seqlen_q / block_m) rows; row r lists the key tiles
        ``col_indices[row_offsets[r]:row_offsets[r + 1]]``. Every listed tile
        is partial (the spec's mask still applies)."""
        for key, value in (("seqlen_q", seqlen_q), ("seqlen_k", seqlen_k),
                           ("heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise UserError(f"{key} = {value!r} is not an int")
            if value < 0 or value >= 2**63:
                raise UserError(f"{key} = {value} is outside [0, 2^63)")
        ro, nro = _host_int32(row_offsets, "row_offsets")
        ci, nci = _host_int32(col_indices, "col_indices")
        expect = heads * -(-seqlen_q // self.block_size[0]) + 1
        if nro != expect:
            raise UserError(f"row_offsets has {nro} entries, expected heads "
                            f"* num_q_tiles + 1 = {expect}")
        handle = ctypes.c_void_p()
        self._lib.check(self._lib.fn("flashjit_block_mask_from_bsr")(
            self._handle, heads, seqlen_q, seqlen_k, ro, ci, nci,
            ctypes.byref(handle)))
        return BlockMask(self._lib, handle, self.target)

    def backward(self, q, k, v, o, lse, d_o, *, dq=None, dk=None, dv=None,
                 params=None, buffers=None, grads=(), stream=None,
                 sink=None, block_mask=None, cu_seqlens_q=None,
                 cu_seqlens_k=None):
        """dQ, dK, dV (and a dict of fp32 gradients of the buffers and
        parameters named in ``grads``, and of the sink [heads_q] when
        ``grads`` names ``flashjit.SINK``; ``sink`` as in ``run``) of this
        forward kernel's attention for upstream gradient ``d_o``, with
        ``o`` and ``lse`` of the forward (fp32 [B, Hq, Sq]; varlen
        [Hq, total_q]). Block-sparse kernels take the ``block_mask`` the
        forward ran with (the gradients are those of that forward: tiles
        the mask does not list get none); varlen kernels the forward's
        ``cu_seqlens_q``/``cu_seqlens_k`` (tensors in ``run``'s packed
        layout). On a GPU each backward query tile must lie in one mask
        tile's rows and ``block_n`` be a multiple of 8 (a backward key
        tile may span several mask tiles; true of the default tiles;
        UserError naming both otherwise). Returns ``(dq, dk, dv)`` or
        ``(dq, dk, dv, grads_dict)`` when ``grads`` is not empty. Needs
        flashjit_run_backward (and flashjit_run_backward_ex for these
        modes) in the C library: NotImplementedError otherwise."""
        lib = self._lib
        moded = self.varlen or self.block_sparse
        entry = "flashjit_run_backward_ex" if moded else \
            "flashjit_run_backward"
        if not lib.has(entry):
            raise NotImplementedError(
                f"backward needs {entry}, which this flashjit C library "
                f"({lib.path}) does not have yet")
        mask_handle = self._backward_mask(block_mask)
        dev_type, dev_id = _dlpack.device_of(q, "q")
        dl_stream, launch = _streams(q, dev_type, dev_id, stream)
        device = self._device()
        views = {}
        for name, x in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse),
                        ("d_o", d_o)):
            views[name] = _dlpack.view(x, name, dl_stream)
            _same_device(views[name], device)
        outs = {}
        for name, given, like in (("dq", dq, "q"), ("dk", dk, "k"),
                                  ("dv", dv, "v")):
            lv = views[like]
            if given is None:
                given = _empty(q, lv.shape, lv.dtype, lv.device_type,
                               lv.device_id)
            outs[name] = given
            views[name] = _dlpack.view(given, name, dl_stream)
            _same_device(views[name], device)
            if views[name].readonly:
                raise UserError(f"{name} is read-only")
        rank = 3 if self.varlen else 4
        t = {name: _tensor(views[name], name,
                           (rank - 1,) if name == "lse" else (rank,))
             for name in views}
        args = _Args(params, buffers, device, dl_stream, sink)
        garray, items, grad_arrays, keep = self._grad_array(
            grads, args, params, q, dev_type, dev_id, dl_stream)
        ref = ctypes.byref
        tensors = (ref(t["q"]), ref(t["k"]), ref(t["v"]), ref(t["o"]),
                   ref(t["lse"]), ref(t["d_o"]), ref(t["dq"]), ref(t["dk"]),
                   ref(t["dv"]))
        if moded:
            cq, ck, nseq = self._cu_seqlens(cu_seqlens_q, cu_seqlens_k)
            status = lib.fn("flashjit_run_backward_ex")(
                self._handle, *tensors, cq, ck, nseq, mask_handle,
                args.array, args.n, garray, len(items),
                ctypes.c_void_p(launch))
        else:
            if cu_seqlens_q is not None or cu_seqlens_k is not None:
                raise UserError("cu_seqlens_q/cu_seqlens_k are for varlen "
                                "kernels (compile(..., varlen=True))")
            status = lib.fn("flashjit_run_backward")(
                self._handle, *tensors, args.array, args.n, garray,
                len(items), ctypes.c_void_p(launch))
        lib.check(status)
        del keep
        result = (outs["dq"], outs["dk"], outs["dv"])
        if items:
            # A parameter's gradient is a scalar.
            for name in grad_arrays:
                if name not in args.views and name != SINK:
                    grad_arrays[name] = grad_arrays[name][0]
            return result + (grad_arrays,)
        return result

    def _backward_mask(self, block_mask):
        """The C handle of backward's ``block_mask`` (None when absent),
        or UserError when it does not go with this kernel's mode."""
        if block_mask is None:
            if self.block_sparse:
                raise UserError("a block-sparse kernel's backward needs "
                                "block_mask= (the mask its forward ran "
                                "with)")
            return None
        if not isinstance(block_mask, BlockMask):
            raise UserError(f"block_mask must be a flashjit.BlockMask, got "
                            f"{type(block_mask).__name__}")
        if not self.block_sparse:
            raise UserError("block_mask given to the backward of a kernel "
                            "compiled without block_sparse=True")
        return block_mask._handle

    def _cu_seqlens(self, cu_seqlens_q, cu_seqlens_k):
        """(cu_seqlens_q, cu_seqlens_k as host int32 arrays or None,
        num_seqs) of a backward call."""
        if not self.varlen:
            if cu_seqlens_q is not None or cu_seqlens_k is not None:
                raise UserError("cu_seqlens_q/cu_seqlens_k are for varlen "
                                "kernels (compile(..., varlen=True))")
            return None, None, 0
        if cu_seqlens_q is None or cu_seqlens_k is None:
            raise UserError("a varlen kernel's backward needs cu_seqlens_q "
                            "and cu_seqlens_k")
        cq, nq = _host_int32(cu_seqlens_q, "cu_seqlens_q")
        ck, nk = _host_int32(cu_seqlens_k, "cu_seqlens_k")
        if nq != nk or nq < 1:
            raise UserError(f"cu_seqlens_q has {nq} entries and cu_seqlens_k"
                            f" {nk}: both need batch + 1 >= 1")
        return cq, ck, nq - 1

    def _grad_array(self, grads, args, params, q, dev_type, dev_id,
                    dl_stream):
        """(flashjit_grad array, its items, name -> output array, objects to
        keep alive) of backward's ``grads``."""
        grads = _grad_names(grads)
        grad_arrays = {}
        items = []
        keep = []
        for name in grads:
            if name == SINK:
                if not self.sink:
                    raise UserError("grads names flashjit.SINK, but the "
                                    "spec has no sink")
                size = self.heads_q
            elif name in args.views:
                size = args.views[name].shape[0]
            elif name in (params or {}):
                size = 1
            else:
                raise UserError(f"grads names '{name}', which is neither a "
                                f"parameter nor a buffer of this call")
            arr = _empty(q, (size,), "float32", dev_type, dev_id)
            gv = _dlpack.view(arr, f"grad '{name}'", dl_stream)
            g = _capi.Grad()
            g.name = name.encode()
            g.data = gv.data
            g.size = size
            keep.append((g.name, gv))
            grad_arrays[name] = arr
            items.append(g)
        garray = (_capi.Grad * max(1, len(items)))(*items)
        return garray, items, grad_arrays, keep


def _grad_names(grads):
    """``grads`` as a tuple of distinct str names (UserError naming the
    entry otherwise; a bare str is refused, not read letter by letter)."""
    if isinstance(grads, (str, bytes)):
        raise UserError(f"grads = {grads!r} is a str: give a list of names, "
                        f"e.g. grads=[{grads!r}]")
    try:
        names = tuple(grads)
    except TypeError:
        raise UserError(f"grads = {grads!r} is not a list of names") from None
    seen = {}
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise UserError(f"grads[{i}] = {name!r} is not a str")
        if name in seen:
            raise UserError(f"grads[{i}] = {name!r} repeats grads"
                            f"[{seen[name]}]: give each name once")
        seen[name] = i
    return names


def _spec_keywords(keywords, where):
    """Refuses keywords that spec_text does not take (UserError naming
    them, not Python's TypeError)."""
    import inspect
    known = inspect.signature(spec_text).parameters
    unknown = sorted(k for k in keywords if k not in known)
    if unknown:
        raise UserError(f"{where}: unknown keyword{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(repr(k) for k in unknown)} (spec "
                        f"keywords: {', '.join(known)})")


_cache_lock = threading.Lock()
_cache = {}


def compile(spec=None, *, target="cpu", varlen=False, block_sparse=False,
            **keywords):
    """A Kernel for ``spec`` (canonical spec text, e.g.
    ``"attention(causal=top_left, head_dim=64, dtype=fp32)"``) or for the
    keywords of ``spec_text`` (mask=, score=, head_dim=, dtype=, heads_q=,
    heads_kv=, causal=, scale=, return_lse=, name=), on ``target`` ("cpu",
    "sm_80", "sm_90a"). ``varlen``: packed sequences with cu_seqlens;
    ``block_sparse``: runs take a BlockMask. Compiles through flashjit's
    kernel cache (FLASHJIT_CACHE_DIR); kernels are also kept per process,
    so compiling the same spec again is a dictionary look-up. Raises
    UserError (bad spec or target), CompileError."""
    if spec is not None and keywords:
        raise UserError("give either spec text or keywords, not both "
                        f"(keywords: {', '.join(sorted(keywords))})")
    _spec_keywords(keywords, "compile")
    text = spec if spec is not None else spec_text(**keywords)
    if not isinstance(text, str):
        raise UserError(f"spec must be a str, got {type(text).__name__}")
    if not isinstance(target, str):
        raise UserError(f"target must be a str, got {type(target).__name__}")
    flags = (_capi.COMPILE_VARLEN if varlen else 0) | (
        _capi.COMPILE_BLOCK_SPARSE if block_sparse else 0)
    key = (text, target, flags)
    with _cache_lock:
        kernel = _cache.get(key)
    if kernel is not None:
        return kernel
    lib = _lib()
    handle = ctypes.c_void_p()
    if flags:
        lib.check(lib.fn("flashjit_compile_ex")(text.encode(),
                                                target.encode(), flags,
                                                ctypes.byref(handle)))
    else:
        lib.check(lib.fn("flashjit_compile")(text.encode(), target.encode(),
                                             ctypes.byref(handle)))
    kernel = Kernel(lib, handle, target)
    with _cache_lock:
        kernel = _cache.setdefault(key, kernel)
    return kernel


def load(bundle_dir, spec=None, *, target="cpu", **keywords):
    """The Kernel of ``spec`` (text or the keywords of ``spec_text``) for
    ``target`` from a bundle made by ``flashjit bundle`` (compiles nothing:
    works with libflashjit_c_runtime.so, which has no compiler). Raises
    UserError when the bundle has no such kernel."""
    if spec is not None and keywords:
        raise UserError("give either spec text or keywords, not both")
    _spec_keywords(keywords, "load")
    text = spec if spec is not None else spec_text(**keywords)
    lib = _lib()
    handle = ctypes.c_void_p()
    lib.check(lib.fn("flashjit_load")(str(bundle_dir).encode(),
                                      text.encode(), str(target).encode(),
                                      ctypes.byref(handle)))
    return Kernel(lib, handle, target)


def _infer_spec(qv, kv, vv, varlen, **keywords):
    """Spec text for tensors of these shapes and dtypes plus keywords."""
    if not varlen and len(qv.shape) != 4:
        raise UserError(f"q: rank {len(qv.shape)} (shape {list(qv.shape)}),"
                        f" expected 4: [batch, heads_q, seqlen_q, head_dim]"
                        f" (3 with cu_seqlens)")
    if varlen and len(qv.shape) != 3:
        raise UserError(f"q: rank {len(qv.shape)} (shape {list(qv.shape)}),"
                        f" expected 3 with cu_seqlens: [total_q, heads_q, "
                        f"head_dim]")
    for name, x in (("k", kv), ("v", vv)):
        if len(x.shape) != len(qv.shape):
            raise UserError(f"{name}: rank {len(x.shape)} (shape "
                            f"{list(x.shape)}) differs from q's "
                            f"{len(qv.shape)}")
    for name, x in (("q", qv), ("k", kv), ("v", vv)):
        if x.dtype not in _FLOAT:
            raise UserError(f"{name}: dtype {x.dtype} is not float16, "
                            f"bfloat16, float32, float8_e4m3fn or "
                            f"float8_e5m2")
    hq, hkv = qv.shape[1], kv.shape[1]  # [B, H, S, D] and [total, H, D]
    dt = {name: _FLOAT[x.dtype][1]
          for name, x in (("q", qv), ("k", kv), ("v", vv))}
    same = dt["q"] == dt["k"] == dt["v"]
    return spec_text(head_dim_qk=qv.shape[-1], head_dim_v=vv.shape[-1],
                     heads_q=hq, heads_kv=hkv,
                     dtype=dt["q"] if same else None,
                     dtype_q=None if same else dt["q"],
                     dtype_k=None if same else dt["k"],
                     dtype_v=None if same else dt["v"],
                     dtype_o=None if same else _output_dtype(dt["q"]),
                     **keywords)


def _output_dtype(dtype_q):
    """O's spec dtype for inputs of mixed dtypes: q's, bf16 for fp8 q (as
    the spec's default for fp8 inputs; fp8 O is refused)."""
    return "bf16" if dtype_q in ("e4m3", "e5m2") else dtype_q


def _refuse_lost_autograd(tensors, route):
    """UserError when a torch tensor of ``tensors`` (name, tensor) requires
    grad while grad mode is on but the call goes through ``route`` (the
    options that left the autograd-aware dense path): its result would have
    no grad_fn, and the user would learn it only at backward()."""
    needs = [name for name, x in tensors
             if x is not None and getattr(x, "requires_grad", False) is True]
    if not needs:
        return
    import torch
    if not torch.is_grad_enabled():
        return
    raise UserError(
        f"{needs[0]} requires grad, but attention with {', '.join(route)} "
        f"has no autograd (only torch calls without cu_seqlens, out=, lse= "
        f"and stream= are differentiable, with or without block_mask=): "
        f"drop {route[0]}, or detach the inputs / use torch.no_grad() for "
        f"inference")


def _split_args(params, buffers):
    return dict(params or {}), dict(buffers or {})


def attention(q, k, v, mask=None, score=None, params=None, buffers=None,
              scale=None, return_lse=False, *, causal=None, name=None,
              cu_seqlens_q=None, cu_seqlens_k=None, block_mask=None,
              target=None, out=None, lse=None, stream=None, sink=None,
              q_descale=None, k_descale=None, v_descale=None):
    """FlexAttention-like attention of DLPack tensors (numpy on the CPU,
    torch on the CPU or a CUDA GPU, CuPy, ...):

        O = softmax(score_mod(scale * Q K^T) masked by mask) V

    q [B, Hq, Sq, Dqk], k [B, Hkv, Sk, Dqk], v [B, Hkv, Sk, Dv] (or the
    packed varlen layout [total, H, D] with ``cu_seqlens_q`` and
    ``cu_seqlens_k``), of fp16, bf16 or fp32, or fp8 (float8_e4m3fn,
    float8_e5m2; O bf16) with ``q_descale``/``k_descale``/``v_descale``
    (float32 [1] or [B, Hkv], as ``Kernel.run``; make them with
    ``flashjit.torch.quantize_fp8``); ``mask`` and ``score`` are
    expressions of the text DSL (README "The DSL"), e.g.
    ``mask="kv_idx <= q_idx"``, ``score="param<f32>(cap) * tanh(score /
    param<f32>(cap))"``; ``params`` name -> value of ``param<...>(name)``
    (float, int or (int, "i64")), ``buffers`` name -> 1-D array of
    ``buffer<...>(name)``; ``scale`` defaults to 1/sqrt(Dqk); ``causal``
    None, "top_left" or "bottom_right" (True: top-left).
    ``block_mask``: True to build the block mask of the mask for this call
    and visit only the tiles it lists, or a BlockMask from
    ``create_block_mask`` (or a block-sparse kernel's ``build_block_mask``
    / ``block_mask_from_bsr``); torch calls with one are differentiable
    (the backward visits the same tiles). ``target`` defaults to the
    tensors' device ("cpu" or the GPU's architecture). Returns O, or
    (O, LSE) with ``return_lse`` (LSE fp32 [B, Hq, Sq]; varlen [Hq,
    total_q]). ``sink``: an attention sink, a 1-D float32 tensor of Hq
    logits (one per query head) that joins the softmax denominator with no
    value (README "Attention sinks"); torch calls get its gradient through
    autograd. Torch calls without out=, lse=, stream= and cu_seqlens
    (dense or with a block mask) go through the autograd-aware custom op
    ``torch.ops.flashjit.attention`` (flashjit.torch). The kernel is
    compiled once per spec and target (see ``compile``)."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if (type(q).__module__.startswith("torch") and not varlen
            and out is None and lse is None and stream is None):
        # Torch calls without cu_seqlens: the custom op (autograd,
        # torch.compile), dense or with a block mask.
        from . import torch as _fjtorch
        return _fjtorch.attention(q, k, v, mask=mask, score=score,
                                  params=params, buffers=buffers,
                                  scale=scale, return_lse=return_lse,
                                  causal=causal, name=name, target=target,
                                  sink=sink, block_mask=block_mask,
                                  q_descale=q_descale, k_descale=k_descale,
                                  v_descale=v_descale)
    if type(q).__module__.startswith("torch"):
        route = [what for what, given in (
            ("cu_seqlens_q/cu_seqlens_k", varlen),
            ("out=", out is not None), ("lse=", lse is not None),
            ("stream=", stream is not None)) if given]
        _refuse_lost_autograd(
            [("q", q), ("k", k), ("v", v), ("sink", sink)]
            + [(f"buffers['{n}']", b) for n, b in (buffers or {}).items()],
            route)
    dev_type, dev_id = _dlpack.device_of(q, "q")
    dl_stream, _ = _streams(q, dev_type, dev_id, stream)
    qv = _dlpack.view(q, "q", dl_stream)
    kv = _dlpack.view(k, "k", dl_stream)
    vv = _dlpack.view(v, "v", dl_stream)
    if target is None:
        target = _target_for(qv)
    text = _infer_spec(qv, kv, vv, varlen, mask=mask, score=score,
                       causal=causal, scale=scale, name=name,
                       return_lse=bool(return_lse),
                       sink=True if sink is not None else None)
    sparse = block_mask is not None and block_mask is not False
    kernel = compile(text, target=target, varlen=varlen, block_sparse=sparse)
    params, buffers = _split_args(params, buffers)
    if block_mask is True:
        if varlen:
            block_mask = kernel.build_block_mask(
                params=params, buffers=buffers, cu_seqlens_q=cu_seqlens_q,
                cu_seqlens_k=cu_seqlens_k, stream=stream)
        else:
            block_mask = kernel.build_block_mask(
                qv.shape[0], qv.shape[2], kv.shape[2], params=params,
                buffers=buffers, stream=stream)
    elif block_mask is False:
        block_mask = None
    elif isinstance(block_mask, BlockMask):
        _check_mask_spec(block_mask, kernel)
    del qv, kv, vv
    result = kernel.run(q, k, v, out=out, lse=lse, params=params,
                        buffers=buffers, cu_seqlens_q=cu_seqlens_q,
                        cu_seqlens_k=cu_seqlens_k, block_mask=block_mask,
                        stream=stream, sink=sink, q_descale=q_descale,
                        k_descale=k_descale, v_descale=v_descale)
    return result


def attention_backward(q, k, v, o, lse, d_o, mask=None, score=None,
                       params=None, buffers=None, scale=None, *, causal=None,
                       name=None, grads=(), target=None, stream=None,
                       sink=None, block_mask=None, cu_seqlens_q=None,
                       cu_seqlens_k=None):
    """Gradients of ``attention``: given the forward's ``o`` and ``lse``
    (fp32 [B, Hq, Sq], from ``attention(..., return_lse=True)``; varlen
    [Hq, total_q]) and the upstream gradient ``d_o`` of O, returns ``(dq,
    dk, dv)``, plus a dict name -> fp32 gradient for the f32 buffers and
    parameters named in ``grads`` (``flashjit.SINK`` for d sink [Hq] when
    ``sink`` is given). Arguments as ``attention``: the forward's
    ``block_mask`` (a BlockMask) and ``cu_seqlens_q``/``cu_seqlens_k``
    pick the block-sparse / varlen backward (Kernel.backward).
    NotImplementedError when the C library lacks the backward."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if block_mask is not None and not isinstance(block_mask, BlockMask):
        raise UserError(f"attention_backward: block_mask must be the "
                        f"flashjit.BlockMask the forward ran with, got "
                        f"{type(block_mask).__name__}")
    dev_type, dev_id = _dlpack.device_of(q, "q")
    dl_stream, _ = _streams(q, dev_type, dev_id, stream)
    qv = _dlpack.view(q, "q", dl_stream)
    kv = _dlpack.view(k, "k", dl_stream)
    vv = _dlpack.view(v, "v", dl_stream)
    if target is None:
        target = _target_for(qv)
    text = _infer_spec(qv, kv, vv, varlen, mask=mask, score=score,
                       causal=causal, scale=scale, name=name,
                       return_lse=True,
                       sink=True if sink is not None else None)
    del qv, kv, vv
    kernel = compile(text, target=target, varlen=varlen,
                     block_sparse=block_mask is not None)
    if block_mask is not None:
        _check_mask_spec(block_mask, kernel)
    return kernel.backward(q, k, v, o, lse, d_o, params=params,
                           buffers=buffers, grads=grads, stream=stream,
                           sink=sink, block_mask=block_mask,
                           cu_seqlens_q=cu_seqlens_q,
                           cu_seqlens_k=cu_seqlens_k)


def _target_of_device(device):
    """The compile target of a device: "cpu", a torch.device, "cuda" /
    "cuda:0" (the GPU's architecture, through torch), or a target name
    ("sm_80", "sm_90a")."""
    text = str(device)
    if text in ("cpu", "sm_80", "sm_90a"):
        return text
    if text in ("cuda", "cuda:0"):
        import torch
        if not torch.cuda.is_available():
            raise UserError(f"device = {device!r}, but torch sees no CUDA "
                            f"device")
        cc = torch.cuda.get_device_capability(0)
        if cc == (9, 0):
            return "sm_90a"
        if cc >= (8, 0):
            return "sm_80"
        raise UserError(f"compute capability {cc[0]}.{cc[1]} of cuda:0 is "
                        f"below 8.0 (sm_80)")
    raise UserError(f"device = {device!r} is not 'cpu', 'cuda', 'cuda:0', "
                    f"'sm_80' or 'sm_90a' (GPU kernels run on cuda:0)")


def create_block_mask(mask=None, batch=None, seqlen_q=None, seqlen_k=None,
                      *, q=None, k=None, v=None, params=None, buffers=None,
                      cu_seqlens_q=None, cu_seqlens_k=None, device=None,
                      target=None, stream=None, **keywords):
    """The BlockMask of ``mask`` for ``attention`` calls of one spec and
    shape (FlexAttention's ``create_block_mask(mask_mod, B, H, Q_LEN,
    KV_LEN)``): tiles no allowed pair falls in are listed nowhere and never
    visited, neither by the forward nor by the backward; tiles where the
    mask holds everywhere run without mask code. Build it once per shape
    (and per content of the buffers and parameters the mask reads) and
    pass it as ``attention(..., block_mask=m)``: the call checks that the
    mask's spec, tiles, target and extents fit (UserError naming both).

    The spec is that of the call: from example tensors ``q``, ``k``, ``v``
    (their shapes and dtypes, as ``attention`` infers them; ``batch``,
    ``seqlen_q``, ``seqlen_k`` default to theirs), or from the keywords of
    ``spec_text`` (``head_dim``, ``heads_q``, ``heads_kv``, ``dtype``,
    ``causal``, ``score``, ``scale``, ``name``, ...) with ``batch``,
    ``seqlen_q`` and ``seqlen_k``; the score modifier, scale and sink do
    not change the mask but can change the kernel's tiles, so give the
    call's. ``params``/``buffers`` as the mask reads them in the call
    (buffers on the target's device). Varlen (packed [total, H, D] tensors
    with ``cu_seqlens_q``/``cu_seqlens_k``): the mask of that packed
    batch. ``device`` ("cpu", "cuda") or ``target`` ("cpu", "sm_80",
    "sm_90a"); default: the tensors' device, else the buffers', else the
    CPU."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    _spec_keywords(keywords, "create_block_mask")
    if keywords.get("return_lse") is not None:
        raise UserError("create_block_mask: return_lse does not change the "
                        "mask; leave it out")
    keywords.pop("return_lse", None)
    example = [x for x in (q, k, v) if x is not None]
    if example and len(example) != 3:
        raise UserError("create_block_mask: give all of q, k, v (example "
                        "tensors of the call) or none")
    if target is None and device is not None:
        target = _target_of_device(device)
    if example:
        qv, kv, vv = (_dlpack.view(x, n) for x, n in ((q, "q"), (k, "k"),
                                                       (v, "v")))
        if target is None:
            target = _target_for(qv)
        text = _infer_spec(qv, kv, vv, varlen, mask=mask, return_lse=True,
                           **keywords)
        if not varlen:
            batch = qv.shape[0] if batch is None else batch
            seqlen_q = qv.shape[2] if seqlen_q is None else seqlen_q
            seqlen_k = kv.shape[2] if seqlen_k is None else seqlen_k
        del qv, kv, vv
    else:
        text = spec_text(mask=mask, return_lse=True, **keywords)
        if target is None:
            target = "cpu"
            for x in (buffers or {}).values():
                target = _target_for(_dlpack.view(x, "buffer"))
                break
    if not varlen:
        for key, value in (("batch", batch), ("seqlen_q", seqlen_q),
                           ("seqlen_k", seqlen_k)):
            if value is None:
                raise UserError(f"create_block_mask: {key} is missing (give "
                                f"batch, seqlen_q and seqlen_k, or example "
                                f"tensors q, k, v)")
            _int_arg(key, value)
    kernel = compile(text, target=target, varlen=varlen, block_sparse=True)
    return kernel.build_block_mask(
        None if varlen else _int_arg("batch", batch),
        None if varlen else _int_arg("seqlen_q", seqlen_q),
        None if varlen else _int_arg("seqlen_k", seqlen_k), params=params,
        buffers=buffers, cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k, stream=stream)


# ---- Serving (issue 17, README "Serving") ----

def _device_ordinal(view):
    if view.device_type == _dlpack.KDL_CPU:
        return -1
    if view.device_type in (_dlpack.KDL_CUDA, _dlpack.KDL_CUDA_MANAGED):
        return view.device_id
    raise UserError(f"{view.name} is on {view.device}: flashjit takes host "
                    f"or CUDA memory")


def merge_states(os, lses, *, sink=None, out=None, lse=None, stream=None):
    """Merges attention states over disjoint key sets of the same query rows
    (cascade inference, split-KV, context parallelism): ``os`` a sequence of
    O tensors [batch, heads, seqlen, head_dim] (float16, bfloat16 or
    float32, any strides) and ``lses`` their LSEs [batch, heads, seqlen]
    (float32), all on one device (numpy on the CPU, torch/CuPy on a GPU).
    Returns ``(O, LSE)`` with lse = log(exp(sink[h]) + sum_i exp(lse_i))
    and O = sum_i exp(lse_i - lse) O_i; a state with LSE = -inf carries no
    weight, a row with none gets O = 0 and LSE = sink[h] (-inf without a
    sink). ``sink``: None or a 1-D float32 array of ``heads`` logits on the
    same device, entered once. ``out``/``lse``: outputs (may be one of the
    inputs), else allocated like ``os[0]``. On a GPU at most 32 states per
    call. Raises UserError naming the bad tensor and field."""
    os, lses = list(os), list(lses)
    if not os or len(os) != len(lses):
        raise UserError(f"merge_states: {len(os)} O tensors and {len(lses)} "
                        f"LSE tensors: need at least one of each, as many")
    lib = _lib()
    dev_type, dev_id = _dlpack.device_of(os[0], "os[0]")
    dl_stream, launch = _streams(os[0], dev_type, dev_id, stream)
    ovs = [_dlpack.view(x, f"os[{i}]", dl_stream) for i, x in enumerate(os)]
    lvs = [_dlpack.view(x, f"lses[{i}]", dl_stream)
           for i, x in enumerate(lses)]
    device = ordinal = None
    ordinal = _device_ordinal(ovs[0])
    device = "cpu" if ordinal < 0 else f"cuda:{ordinal}"
    for v in ovs + lvs:
        _same_device(v, device)
    ts = (_capi.Tensor * len(ovs))(*[_tensor(v, f"os[{i}]", (4,))
                                     for i, v in enumerate(ovs)])
    tl = (_capi.Tensor * len(lvs))(
        *[_tensor(v, f"lses[{i}]", (3,), {"float32": _FLOAT["float32"]})
          for i, v in enumerate(lvs)])
    shape = tuple(ovs[0].shape)
    if out is None:
        out = _empty(os[0], shape, ovs[0].dtype, dev_type, dev_id)
    if lse is None:
        lse = _empty(os[0], shape[:3], "float32", dev_type, dev_id)
    ov = _dlpack.view(out, "out", dl_stream)
    lv = _dlpack.view(lse, "lse", dl_stream)
    for v in (ov, lv):
        _same_device(v, device)
        if v.readonly:
            raise UserError(f"{v.name} is read-only")
    to = _tensor(ov, "out", (4,))
    tlo = _tensor(lv, "lse", (3,), {"float32": _FLOAT["float32"]})
    sink_ptr, sink_n, keep = None, 0, None
    if sink is not None:
        keep = _dlpack.view(sink, "sink", dl_stream)
        if keep.dtype != "float32" or len(keep.shape) != 1:
            raise UserError(f"sink must be a 1-D float32 array of heads "
                            f"logits, got {keep.dtype} of shape "
                            f"{list(keep.shape)}")
        if keep.shape[0] > 1 and keep.strides[0] != 1:
            raise UserError(f"sink must be contiguous (stride "
                            f"{keep.strides[0]})")
        _same_device(keep, device)
        sink_ptr = ctypes.cast(ctypes.c_void_p(keep.data),
                               ctypes.POINTER(ctypes.c_float))
        sink_n = keep.shape[0]
    ref = ctypes.byref
    lib.check(lib.fn("flashjit_merge_states")(
        ts, tl, len(ovs), ref(to), ref(tlo), sink_ptr, sink_n, ordinal,
        ctypes.c_void_p(launch)))
    return out, lse


def _page_table(kv_indptr, kv_indices, kv_last_page_len, block_table,
                seq_lens):
    """(flashjit_page_table, arrays to keep alive) from one layout's
    arrays (host copies are made of device arrays)."""
    t = _capi.PageTable()
    keep = []
    csr = (kv_indptr, kv_indices, kv_last_page_len)
    if block_table is not None or seq_lens is not None:
        if any(x is not None for x in csr):
            raise UserError("give one page-table layout: kv_indptr, "
                            "kv_indices, kv_last_page_len (CSR) or "
                            "block_table, seq_lens")
        if block_table is None or seq_lens is None:
            raise UserError("a block table needs block_table and seq_lens")
        lens, batch = _host_int32(seq_lens, "seq_lens")
        if hasattr(block_table, "shape") and len(block_table.shape) == 2:
            rows, cols = block_table.shape
            flat = (block_table.reshape(-1) if hasattr(block_table, "reshape")
                    else block_table)
        else:
            raise UserError("block_table must be a 2-D int32 array [batch, "
                            "max_pages]")
        if rows != batch:
            raise UserError(f"block_table has {rows} rows, seq_lens {batch} "
                            f"entries")
        if hasattr(flat, "contiguous"):
            flat = flat.contiguous()
        table, _ = _host_int32(flat, "block_table")
        t.layout, t.batch, t.max_pages = 1, batch, cols
        t.block_table, t.seq_lens = table, lens
        keep += [lens, table]
    else:
        if any(x is None for x in csr):
            raise UserError("a CSR page table needs kv_indptr, kv_indices "
                            "and kv_last_page_len (or give block_table and "
                            "seq_lens)")
        indptr, n1 = _host_int32(kv_indptr, "kv_indptr")
        indices, ni = _host_int32(kv_indices, "kv_indices")
        last, nb = _host_int32(kv_last_page_len, "kv_last_page_len")
        # The C table carries no length for kv_last_page_len: a short array
        # would be read past its end.
        if n1 < 1:
            raise UserError("kv_indptr is empty: it needs batch + 1 entries "
                            "(at least kv_indptr[0] = 0)")
        if nb != n1 - 1:
            raise UserError(f"kv_last_page_len has {nb} entries, expected "
                            f"batch = len(kv_indptr) - 1 = {n1 - 1}")
        t.layout, t.batch = 0, n1 - 1
        t.kv_indptr, t.kv_indices, t.num_indices = indptr, indices, ni
        t.kv_last_page_len = last
        keep += [indptr, indices, last]
    return t, keep


def paged_append(k_new, v_new, k_cache, v_cache, *, kv_indptr=None,
                 kv_indices=None, kv_last_page_len=None, block_table=None,
                 seq_lens=None, stream=None):
    """Writes k_new [batch, heads_kv, n_new, head_dim_qk] and v_new [batch,
    heads_kv, n_new, head_dim_v] as the last n_new tokens of every sequence
    into the paged caches k_cache [num_pages, heads_kv, page_size,
    head_dim_qk] and v_cache (any strides; a [pages, page_size, heads,
    dim] tensor permuted to that order works), through a page table that
    already counts the new tokens: CSR (``kv_indptr``, ``kv_indices``,
    ``kv_last_page_len``) or block table (``block_table`` [batch,
    max_pages], ``seq_lens``); int32, copied to the host and checked (page
    ids, lengths). All tensors on one device. Raises UserError naming the
    field and value."""
    lib = _lib()
    dev_type, dev_id = _dlpack.device_of(k_cache, "k_cache")
    dl_stream, launch = _streams(k_cache, dev_type, dev_id, stream)
    views = [_dlpack.view(x, n, dl_stream) for x, n in (
        (k_new, "k_new"), (v_new, "v_new"), (k_cache, "k_cache"),
        (v_cache, "v_cache"))]
    ordinal = _device_ordinal(views[2])
    device = "cpu" if ordinal < 0 else f"cuda:{ordinal}"
    for v in views:
        _same_device(v, device)
    for v in views[2:]:
        if v.readonly:
            raise UserError(f"{v.name} is read-only")
    ts = [_tensor(v, v.name, (4,)) for v in views]
    table, keep = _page_table(kv_indptr, kv_indices, kv_last_page_len,
                              block_table, seq_lens)
    ref = ctypes.byref
    lib.check(lib.fn("flashjit_paged_append")(
        ref(ts[0]), ref(ts[1]), ref(ts[2]), ref(ts[3]), ref(table), ordinal,
        ctypes.c_void_p(launch)))
    del keep
