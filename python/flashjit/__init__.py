"""flashjit from Python: JIT-compiled FlashAttention-style kernels for
attention variants written in flashjit's text DSL, on the CPU and on NVIDIA
GPUs, for any DLPack tensor (numpy, torch, CuPy, ...).

    import numpy as np, flashjit
    q = np.random.randn(1, 4, 128, 64).astype(np.float32)
    o = flashjit.attention(q, q, q, mask="kv_idx <= q_idx")

    k = flashjit.compile(mask="kv_idx <= q_idx", head_dim=64, dtype="fp32",
                         heads_q=4, heads_kv=4)   # reuse: k.run(q, k, v)

The kernels come from the flashjit C library (libflashjit_c.so) through
ctypes; see README.md "Python".
"""

from ._errors import (CompileError, DriverError, Error, InternalError,
                      UserError)
from ._api import (SINK, BlockMask, Kernel, attention, attention_backward,
                   canonical_expr, canonical_spec, compile,
                   create_block_mask, load,
                   merge_states, paged_append, spec_text)
from ._api import version as _library_version


def _version():
    try:
        return _library_version()
    except Error:
        # No C library found: the installed distribution's version.
        try:
            from importlib.metadata import version
            return version("flashjit")
        except Exception:  # noqa: BLE001 - not installed either
            return "unknown"


#: flashjit's version: the C library's (the CMake project's version).
__version__ = _version()

__all__ = ["attention", "attention_backward", "compile", "load", "Kernel",
           "BlockMask", "create_block_mask", "merge_states", "paged_append",
           "spec_text", "canonical_expr", "canonical_spec",
           "Error", "UserError", "CompileError", "DriverError",
           "InternalError", "SINK", "__version__"]
