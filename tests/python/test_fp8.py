"""fp8 spec dtypes through the Python package (issue 18's foundation): the
names map to the spec's e4m3/e5m2 (torch's float8_e4m3fn / float8_e5m2),
dtype="e4m3" gives a bf16 O, fp8 O is refused, sm_80 refuses fp8, and
sm_90a builds the fp8 forward (fp8 wgmma; dense, varlen, block-sparse,
head dims up to 256) but refuses what it does not build yet (head dim 80),
and descales for non-fp8 tensors are refused.
The numerics are checked in C++ (tests/unit/frontend/Fp8Test.cpp,
tests/unit/compiler/Fp8CpuTest.cpp) and, with torch, in test_fp8_torch.py
(q_descale/k/v, flashjit.torch.quantize_fp8)."""

import pytest

import flashjit


def test_fp8_dtype_names_compile_on_the_cpu():
    for name, spec in (("e4m3", "e4m3"), ("float8_e4m3fn", "e4m3"),
                       ("torch.float8_e5m2", "e5m2")):
        kern = flashjit.compile(target="cpu", head_dim=16, dtype=name)
        assert f"dtype_q={spec}, dtype_k={spec}, dtype_v={spec}, " \
               "dtype_o=bf16" in kern.spec
        assert kern.dtype_o == "bfloat16"
    kern = flashjit.compile(target="cpu", head_dim=16, dtype_q="e4m3",
                            dtype_k="e4m3", dtype_v="e5m2", dtype_o="fp32")
    assert "dtype_v=e5m2, dtype_o=fp32" in kern.spec


def test_fp8_refusals_are_user_errors():
    with pytest.raises(flashjit.UserError, match="fp8 output"):
        flashjit.compile(target="cpu", head_dim=16, dtype_o="e4m3")
    with pytest.raises(flashjit.UserError, match="not fp16, bf16, fp32"):
        flashjit.compile(target="cpu", head_dim=16, dtype="fp8")
    with pytest.raises(flashjit.UserError, match="fp8 needs sm_90a wgmma"):
        flashjit.compile(target="sm_80", head_dim=64, dtype="e4m3")
    with pytest.raises(flashjit.UserError, match="head_dim_qk = 80"):
        flashjit.compile(target="sm_90a", head_dim=80, dtype="e4m3")


def test_fp8_forward_compiles_for_sm_90a():
    kern = flashjit.compile(target="sm_90a", head_dim=64, dtype="e4m3")
    assert "k32.f32.e4m3.e4m3" in kern.ptx
    assert "cvt.rn.satfinite.e4m3x2.f32" in kern.ptx
    # varlen, block-sparse (both too) and head dim 256 (64-key tiles).
    for varlen, sparse in ((True, False), (False, True), (True, True)):
        k = flashjit.compile(kern.spec, target="sm_90a", varlen=varlen,
                             block_sparse=sparse)
        assert "k32.f32.e4m3.e4m3" in k.ptx
    wide = flashjit.compile(target="sm_90a", head_dim=256, dtype="e4m3")
    assert "m64n64k32.f32.e4m3.e4m3" in wide.ptx
    assert "m64n256k32.f32.e4m3.e4m3" in wide.ptx
    d96 = flashjit.compile(target="sm_90a", head_dim=96, dtype="e4m3")
    assert "m64n96k32.f32.e4m3.e4m3" in d96.ptx


def test_descales_without_fp8_are_refused_by_name():
    # numpy has no fp8 dtype: the fp8 runs are in test_fp8_torch.py; a
    # descale for an fp32 tensor is refused before its value is read.
    import numpy as np
    q = np.zeros((1, 2, 5, 16), np.float32)
    one = np.ones(1, np.float32)
    for key in ("q_descale", "k_descale", "v_descale"):
        with pytest.raises(flashjit.UserError,
                           match=rf"{key} was given, but the kernel's dtype_"
                                 rf"{key[0]} is fp32: descales belong to "
                                 rf"fp8 tensors"):
            flashjit.attention(q, q, q, **{key: one})
    kern = flashjit.compile(target="cpu", head_dim=16, dtype="fp32",
                            heads_q=2, heads_kv=2)
    with pytest.raises(flashjit.UserError, match=r"'@v_descale' is reserved "
                       r"for the fp8 descale v_descale; pass v_descale="):
        kern.run(q, q, q, buffers={"@v_descale": one})
