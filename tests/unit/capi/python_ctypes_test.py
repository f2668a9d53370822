#!/usr/bin/env python3
"""python/flashjit_ctypes.py on the CPU, with no torch or numpy: tensors are
ctypes arrays behind the torch tensor interface (data_ptr, dtype, shape,
stride). Compiles a causal soft-capped variant with a run-time parameter
through libflashjit_c, runs it on random fp32 inputs and compares O and LSE
with attention computed here in Python doubles; checks that errors arrive
as FlashjitError with flashjit's message, and that libflashjit_c_runtime
refuses to compile.

  python_ctypes_test.py LIBFLASHJIT_C LIBFLASHJIT_C_RUNTIME
"""
import ctypes
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                "python"))
import flashjit_ctypes as fj  # noqa: E402


class Tensor:
    """A contiguous fp32 tensor in a ctypes array."""

    def __init__(self, shape, rng=None, fill=float("nan")):
        self.shape = tuple(shape)
        n = math.prod(shape)
        values = [rng.uniform(-2, 2) for _ in range(n)] if rng else [fill] * n
        self.buf = (ctypes.c_float * n)(*values)
        self.dtype = "torch.float32"
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        self._strides = tuple(reversed(strides))

    def data_ptr(self):
        return ctypes.addressof(self.buf)

    def stride(self):
        return self._strides

    def at(self, *idx):
        return self.buf[sum(i * s for i, s in zip(idx, self._strides))]


def main():
    seed = int(os.environ.get("FLASHJIT_TEST_SEED", time.time_ns() % 2**31))
    print(f"seed {seed}")
    rng = random.Random(seed)
    lib = fj.Library(sys.argv[1])
    B, HQ, HKV, SQ, SK, D = 2, 4, 2, 7, 11, 16
    cap = rng.uniform(1.0, 3.0)
    spec = ("attention(mask=(kv_idx <= (q_idx + 4)), score=(param<f32>(cap) "
            "* tanh((score / param<f32>(cap)))), "
            f"head_dim={D}, dtype=fp32, heads_q={HQ}, heads_kv={HKV})")
    kernel = lib.compile(spec, "cpu")
    assert kernel.ptx is None
    q, k, v = (Tensor([B, HQ, SQ, D], rng), Tensor([B, HKV, SK, D], rng),
               Tensor([B, HKV, SK, D], rng))
    o, lse = Tensor([B, HQ, SQ, D]), Tensor([B, HQ, SQ])
    kernel.run(q, k, v, o, lse, {"cap": cap})
    worst_o = worst_l = 0.0
    for b in range(B):
        for h in range(HQ):
            hk = h // (HQ // HKV)
            for i in range(SQ):
                keys = [j for j in range(SK) if j <= i + 4]
                s = []
                for j in keys:
                    dot = sum(q.at(b, h, i, d) * k.at(b, hk, j, d)
                              for d in range(D)) / math.sqrt(D)
                    s.append(cap * math.tanh(dot / cap))
                m = max(s)
                total = sum(math.exp(x - m) for x in s)
                for d in range(D):
                    want = sum(math.exp(x - m) / total * v.at(b, hk, j, d)
                               for x, j in zip(s, keys))
                    worst_o = max(worst_o, abs(o.at(b, h, i, d) - want))
                worst_l = max(worst_l, abs(lse.at(b, h, i) -
                                           (m + math.log(total))))
    print(f"max |O - O_ref| = {worst_o:.3g}, max |LSE - LSE_ref| = "
          f"{worst_l:.3g}")
    assert worst_o < 1e-4 and worst_l < 1e-4, (worst_o, worst_l)

    def expect_error(status, needle, f, *args):
        try:
            f(*args)
        except fj.FlashjitError as e:
            assert e.status == status and needle in str(e), str(e)
            print(f"expected: {e}")
            return
        raise AssertionError(f"no {status} ({needle})")

    expect_error("FLASHJIT_USER_ERROR", "cap", kernel.run, q, k, v, o, lse,
                 {})
    expect_error("FLASHJIT_USER_ERROR", "k.shape", kernel.run, q,
                 Tensor([B, HKV, SK, 8], rng), v, o, lse, {"cap": cap})
    expect_error("FLASHJIT_USER_ERROR", "sm_75", lib.compile, spec, "sm_75")
    expect_error("FLASHJIT_USER_ERROR", "o overlaps q", kernel.run, q, k, v, q,
                 lse, {"cap": cap})
    expect_error("FLASHJIT_USER_ERROR", "o is None", kernel.run, q, k, v, None,
                 lse, {"cap": cap})
    expect_error("FLASHJIT_USER_ERROR", "(not ASCII)", lib.compile,
                 "attention(mask=(q_idx >= \u00e9))", "cpu")
    # Values that do not fit their type are refused, never wrapped: a plain
    # int is i32 (2**40 once ran as 0), an f32 must not overflow to inf.
    for bad, needle in [({"cap": 1e300}, "1e+300"),
                        ({"cap": -1e39}, "-1e+39"),
                        ({"w": 2**40}, str(2**40)),
                        ({"w": 2**31}, str(2**31)),
                        ({"w": -2**31 - 1}, str(-2**31 - 1)),
                        ({"w": 2**70}, str(2**70)),
                        ({"w": (2**63, "i64")}, str(2**63)),
                        ({"w": (-2**63 - 1, "i64")}, str(-2**63 - 1))]:
        name = next(iter(bad))
        expect_error("FLASHJIT_USER_ERROR", f"'{name}'", kernel.run, q, k, v,
                     o, lse, bad)
        expect_error("FLASHJIT_USER_ERROR", needle, kernel.run, q, k, v, o,
                     lse, bad)
    runtime = fj.Library(sys.argv[2])
    expect_error("FLASHJIT_USER_ERROR", "flashjit_load", runtime.compile,
                 spec, "cpu")
    expect_error("FLASHJIT_USER_ERROR", "/nonexistent", runtime.load,
                 "/nonexistent", spec, "sm_90a")
    print("ok")


if __name__ == "__main__":
    main()
