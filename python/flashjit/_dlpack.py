"""A small DLPack consumer in ctypes: reads the pointer, device, dtype,
shape and strides of any object with ``__dlpack__``/``__dlpack_device__``
(numpy >= 1.22, torch, CuPy, JAX, ...), without a compiled extension.

The DLPack structs (dlpack.h, v1.x ABI) are declared below. The capsule is
only borrowed: it is not renamed to ``used_dltensor``, so the producer's
capsule destructor frees the managed tensor when the capsule goes away; a
``View`` keeps the capsule (and the object) alive while its pointer is in
use.
"""

import ctypes

from ._errors import UserError

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
_DEVICE_NAMES = {KDL_CPU: "cpu", KDL_CUDA: "cuda", KDL_CUDA_HOST: "cuda_host",
                 KDL_CUDA_MANAGED: "cuda_managed", 4: "opencl", 7: "vulkan",
                 8: "metal", 10: "rocm"}
# (code, bits) -> dtype name; codes: 0 int, 1 uint, 2 float, 4 bfloat,
# 10 float8_e4m3fn, 12 float8_e5m2 (DLPack 1.1's kDLFloat8_* codes).
_DTYPES = {(10, 8): "float8_e4m3fn", (12, 8): "float8_e5m2",
           (2, 16): "float16", (4, 16): "bfloat16", (2, 32): "float32",
           (2, 64): "float64", (0, 32): "int32", (0, 64): "int64",
           (0, 8): "int8", (0, 16): "int16", (1, 8): "uint8", (6, 8): "bool",
           (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64"}
_ITEMSIZE = {"float8_e4m3fn": 1, "float8_e5m2": 1, "float16": 2,
             "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8, "int8": 1, "int16": 2, "uint8": 1,
             "bool": 1, "uint16": 2, "uint32": 4, "uint64": 8}
_FLAG_READ_ONLY = 1


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device),
                ("ndim", ctypes.c_int32), ("dtype", _DType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    """DLManagedTensor (capsule name "dltensor")."""

    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):
    """DLManagedTensorVersioned (capsule name "dltensor_versioned")."""

    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", _DLTensor)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


class View:
    """What a kernel needs of one DLPack tensor.

    ``data`` (int, byte_offset applied), ``device`` ("cpu", "cuda", ...),
    ``device_id``, ``dtype`` (numpy-style name, "bfloat16" for bf16),
    ``shape`` and ``strides`` (tuples, strides in elements), ``readonly``;
    ``obj`` is the source object. Keeps its capsule alive.
    """

    __slots__ = ("obj", "name", "data", "device", "device_type", "device_id",
                 "dtype", "shape", "strides", "readonly", "_capsule")

    @property
    def itemsize(self):
        return _ITEMSIZE[self.dtype]

    @property
    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def is_contiguous(self):
        """Row-major without gaps (sizes of 1 may have any stride)."""
        expect = 1
        for size, stride in reversed(list(zip(self.shape, self.strides))):
            if size != 1 and stride != expect:
                return False
            expect *= size
        return True

    def __repr__(self):
        return (f"View({self.name}: {self.dtype}{list(self.shape)} strides "
                f"{list(self.strides)} on {self.device}:{self.device_id})")


def device_of(obj, name):
    """(DLPack device type, id) of ``obj`` through ``__dlpack_device__``;
    UserError if it has none."""
    fn = getattr(obj, "__dlpack_device__", None)
    if fn is None or not hasattr(obj, "__dlpack__"):
        raise UserError(f"{name}: a {type(obj).__module__}."
                        f"{type(obj).__name__} is not a DLPack tensor (no "
                        f"__dlpack__/__dlpack_device__): pass a numpy array, "
                        f"a torch tensor or another DLPack producer")
    t, i = fn()
    return int(t), int(i)


def view(obj, name, stream=None):
    """Reads ``obj`` through DLPack. ``stream``: for CUDA tensors, the
    stream the consumer will use (passed to ``__dlpack__`` so the producer
    orders its work before it; 1 is the legacy default stream); None on the
    CPU. Raises UserError for objects that are no DLPack tensors, for
    vector dtypes (lanes != 1) and for dtypes flashjit does not know."""
    device_type, _ = device_of(obj, name)
    source = obj
    if getattr(obj, "requires_grad", False):  # torch refuses to export it
        obj = obj.detach()
    kwargs = {}
    if device_type in (KDL_CUDA, KDL_CUDA_MANAGED) and stream is not None:
        kwargs["stream"] = stream
    try:
        capsule = obj.__dlpack__(max_version=(1, 0), **kwargs)
    except TypeError:  # a producer from before DLPack 1.0 (numpy 1.x)
        try:
            capsule = obj.__dlpack__(**kwargs)
        except BufferError as e:
            raise UserError(f"{name}: cannot export through DLPack: {e}") \
                from None
    except BufferError as e:
        raise UserError(f"{name}: cannot export through DLPack: {e}") from None
    v = View()
    v.obj, v.name, v._capsule = source, name, (obj, capsule)
    if _is_valid(capsule, b"dltensor_versioned"):
        managed = _ManagedVersioned.from_address(
            _get_pointer(capsule, b"dltensor_versioned"))
        v.readonly = bool(managed.flags & _FLAG_READ_ONLY)
    elif _is_valid(capsule, b"dltensor"):
        managed = _Managed.from_address(_get_pointer(capsule, b"dltensor"))
        v.readonly = False
    else:
        raise UserError(f"{name}: __dlpack__ returned no DLPack capsule")
    t = managed.dl_tensor
    dt = (t.dtype.code, t.dtype.bits)
    if t.dtype.lanes != 1 or dt not in _DTYPES:
        raise UserError(f"{name}: DLPack dtype (code {t.dtype.code}, bits "
                        f"{t.dtype.bits}, lanes {t.dtype.lanes}) is not "
                        f"supported")
    v.dtype = _DTYPES[dt]
    v.device_type = t.device.device_type
    v.device = _DEVICE_NAMES.get(v.device_type, f"dlpack{v.device_type}")
    v.device_id = t.device.device_id
    ndim = t.ndim
    v.shape = tuple(t.shape[i] for i in range(ndim))
    if t.strides:
        v.strides = tuple(t.strides[i] for i in range(ndim))
    else:  # NULL strides: compact row-major
        strides, acc = [], 1
        for s in reversed(v.shape):
            strides.append(acc)
            acc *= s
        v.strides = tuple(reversed(strides))
    v.data = (t.data or 0) + t.byte_offset
    return v
