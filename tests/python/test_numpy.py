"""flashjit on numpy arrays on the CPU target, against the float64
reference of reference.py: variants, GQA, unequal and odd seqlens, strided
inputs, parameters and buffers, varlen batches, block masks and BSR
layouts, compile() reuse, typed errors."""

import os
import re

import numpy as np
import pytest

import flashjit
import reference as ref

RNG = ref.rng()
TOL = {"float32": (2e-5, 2e-5), "float16": (4e-3, 4e-3)}


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def test_version_is_the_cmake_projects():
    cmake = open(os.path.join(os.path.dirname(__file__), "..", "..",
                              "CMakeLists.txt")).read()
    want = re.search(r"project\(flashjit VERSION ([0-9.]+)", cmake).group(1)
    assert flashjit.__version__ == want


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("causal", [None, "top_left", "bottom_right"])
def test_causal_gqa_odd_shapes(dtype, causal):
    b, hq, hkv, sq, sk, d, dv = 2, 4, 2, 37, 53, 32, 16
    q = randn(b, hq, sq, d, dtype=dtype)
    k = randn(b, hkv, sk, d, dtype=dtype)
    v = randn(b, hkv, sk, dv, dtype=dtype)
    o, lse = flashjit.attention(q, k, v, causal=causal, return_lse=True)
    assert o.dtype == np.dtype(dtype) and o.shape == (b, hq, sq, dv)
    assert lse.dtype == np.float32 and lse.shape == (b, hq, sq)
    allowed = None if causal is None else ref.causal(
        sq, sk, causal == "bottom_right")
    want_o, want_lse = ref.attention(q, k, v, allowed)
    ref.assert_close(o, want_o, *TOL[dtype], what=f"O {dtype} {causal}")
    ref.assert_close(lse, want_lse, *TOL["float32"], what="LSE")


def test_empty_rows_are_zero_and_minus_inf():
    # Bottom-right with seqlen_q > seqlen_k: the first rows see no key.
    q, k, v = randn(1, 2, 20, 16), randn(1, 2, 7, 16), randn(1, 2, 7, 16)
    o, lse = flashjit.attention(q, k, v, causal="bottom_right",
                                return_lse=True)
    assert np.all(o[:, :, :13] == 0) and np.all(lse[:, :, :13] == -np.inf)
    want_o, want_lse = ref.attention(q, k, v, ref.causal(20, 7, True))
    ref.assert_close(o, want_o, *TOL["float32"], what="O")
    ref.assert_close(lse, want_lse, *TOL["float32"], what="LSE")


def test_softcap_parameter_and_scale():
    cap = float(RNG.uniform(1, 3))
    scale = float(RNG.uniform(0.1, 0.5))
    q, k, v = randn(1, 3, 29, 32), randn(1, 3, 41, 32), randn(1, 3, 41, 32)
    score = "param<f32>(cap) * tanh(score / param<f32>(cap))"
    o = flashjit.attention(q, k, v, mask="kv_idx <= q_idx + 4", score=score,
                           params={"cap": cap}, scale=scale)
    i, j = np.arange(29)[:, None], np.arange(41)[None, :]
    want, _ = ref.attention(q, k, v, j <= i + 4,
                            lambda s, *_: cap * np.tanh(s / cap), scale)
    ref.assert_close(o, want, *TOL["float32"], what="softcap O")
    # A new parameter value reuses the kernel (no recompile) and matters.
    o2 = flashjit.attention(q, k, v, mask="kv_idx <= q_idx + 4", score=score,
                            params={"cap": cap + 1}, scale=scale)
    assert np.abs(o2 - o).max() > 1e-4


def test_buffers_alibi_and_document_mask():
    h, s, d = 4, 45, 16
    slopes = RNG.uniform(0.1, 1.0, size=h).astype(np.float32)
    doc = np.sort(RNG.integers(0, 4, size=s)).astype(np.int32)
    q, k, v = randn(2, h, s, d), randn(2, h, s, d), randn(2, h, s, d)
    o = flashjit.attention(
        q, k, v,
        mask="buffer<i32>(doc)[q_idx] == buffer<i32>(doc)[kv_idx]",
        score="score - buffer<f32>(slope)[head] * "
              "cast<f32>(abs(q_idx - kv_idx))",
        buffers={"doc": doc, "slope": slopes})
    allowed = doc[:, None] == doc[None, :]
    want, _ = ref.attention(
        q, k, v, allowed,
        lambda sc, b, hh, i, j: sc - slopes[hh].astype(np.float64) *
        np.abs(i - j))
    ref.assert_close(o, want, *TOL["float32"], what="alibi + document O")


def test_strided_inputs_and_outputs():
    # BSHD memory seen as BHSD (FlashAttention's layout), a strided output.
    qs, ks, vs = randn(2, 33, 3, 16), randn(2, 40, 3, 16), randn(2, 40, 3, 16)
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (qs, ks, vs))
    assert not q.flags.c_contiguous
    out_mem = np.full((2, 33, 3, 16), np.nan, np.float32)
    out = out_mem.transpose(0, 2, 1, 3)
    res = flashjit.attention(q, k, v, causal="top_left", out=out)
    assert res is out
    want, _ = ref.attention(q, k, v, ref.causal(33, 40))
    ref.assert_close(out, want, *TOL["float32"], what="strided O")


def test_compile_and_reuse():
    kernel = flashjit.compile(mask="kv_idx <= q_idx", head_dim=16,
                              dtype="fp32", heads_q=2, heads_kv=1)
    assert kernel is flashjit.compile(mask="kv_idx <= q_idx", head_dim=16,
                                      dtype="fp32", heads_q=2, heads_kv=1)
    assert kernel.spec == flashjit.canonical_spec(kernel.spec)
    assert "mask=(kv_idx <= q_idx)" in kernel.spec
    assert kernel.ptx is None and kernel.target == "cpu"
    same = flashjit.compile(kernel.spec)
    assert same.spec == kernel.spec
    for sq, sk in [(1, 1), (17, 5), (64, 130)]:
        q, k, v = randn(1, 2, sq, 16), randn(1, 1, sk, 16), randn(1, 1, sk, 16)
        o, lse = kernel.run(q, k, v)
        want_o, want_lse = ref.attention(q, k, v, ref.causal(sq, sk))
        ref.assert_close(o, want_o, *TOL["float32"], what=f"O {sq}x{sk}")
        ref.assert_close(lse, want_lse, *TOL["float32"], what="LSE")


def test_gpu_target_gives_ptx_without_a_gpu():
    kernel = flashjit.compile(causal="top_left", head_dim=64, dtype="bf16",
                              target="sm_90a")
    assert "wgmma.mma_async" in kernel.ptx
    assert kernel.spec.startswith("attention(name=attention")


def test_varlen_packed_batch():
    lens_q, lens_k = [5, 0, 70, 33], [9, 4, 70, 12]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    hq, hkv, d = 4, 2, 16
    q, k, v = (randn(int(cu_q[-1]), hq, d), randn(int(cu_k[-1]), hkv, d),
               randn(int(cu_k[-1]), hkv, d))
    o, lse = flashjit.attention(q, k, v, causal="bottom_right",
                                cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                return_lse=True)
    assert o.shape == (cu_q[-1], hq, d) and lse.shape == (hq, cu_q[-1])
    for bi in range(len(lens_q)):
        qs = q[cu_q[bi]:cu_q[bi + 1]].transpose(1, 0, 2)[None]
        ks = k[cu_k[bi]:cu_k[bi + 1]].transpose(1, 0, 2)[None]
        vs = v[cu_k[bi]:cu_k[bi + 1]].transpose(1, 0, 2)[None]
        want_o, want_lse = ref.attention(
            qs, ks, vs, ref.causal(lens_q[bi], lens_k[bi], True))
        got_o = o[cu_q[bi]:cu_q[bi + 1]].transpose(1, 0, 2)[None]
        got_l = lse[:, cu_q[bi]:cu_q[bi + 1]][None]
        ref.assert_close(got_o, want_o, *TOL["float32"], what=f"seq {bi} O")
        ref.assert_close(got_l, want_lse, *TOL["float32"], what="LSE")


def tile_classes(allowed, bm, bn):
    """(partial, full) sets of tiles of a [Sq, Sk] boolean mask."""
    partial, full = set(), set()
    for m in range(-(-allowed.shape[0] // bm)):
        for n in range(-(-allowed.shape[1] // bn)):
            t = allowed[m * bm:(m + 1) * bm, n * bn:(n + 1) * bn]
            if t.all():
                full.add((m, n))
            elif t.any():
                partial.add((m, n))
    return partial, full


def test_block_mask_built_from_a_document_buffer():
    s, h, d = 200, 2, 16
    doc = np.repeat(np.arange(4), [30, 90, 45, 35]).astype(np.int32)
    spec = dict(mask="buffer<i32>(doc)[q_idx] == buffer<i32>(doc)[kv_idx]",
                head_dim=d, dtype="fp32", heads_q=h, heads_kv=h)
    kernel = flashjit.compile(block_sparse=True, **spec)
    assert kernel.block_sparse and not kernel.varlen
    bm = kernel.build_block_mask(2, s, s, buffers={"doc": doc})
    assert (bm.batch, bm.heads, bm.seqlen_q) == (1, 1, s)
    lists = bm.to_numpy()
    allowed = doc[:, None] == doc[None, :]
    partial, full = tile_classes(allowed, *bm.block_size)
    got_p, got_f = set(), set()
    for m in range(bm.num_q_tiles):
        n_p = lists["kv_num_blocks"][0, 0, m]
        n_f = lists["full_kv_num_blocks"][0, 0, m]
        got_p |= {(m, int(n)) for n in lists["kv_indices"][0, 0, m, :n_p]}
        got_f |= {(m, int(n)) for n in
                  lists["full_kv_indices"][0, 0, m, :n_f]}
    assert (got_p, got_f) == (partial, full)
    q, k, v = randn(2, h, s, d), randn(2, h, s, d), randn(2, h, s, d)
    o = kernel.run(q, k, v, buffers={"doc": doc}, block_mask=bm)[0]
    want, _ = ref.attention(q, k, v, allowed)
    ref.assert_close(o, want, *TOL["float32"], what="block-sparse O")
    # attention(block_mask=True) builds it per call.
    o2 = flashjit.attention(q, k, v, mask=spec["mask"],
                            buffers={"doc": doc}, block_mask=True)
    ref.assert_close(o2, want, *TOL["float32"], what="block_mask=True O")
    with pytest.raises(flashjit.UserError, match="seqlen"):
        kernel.run(q[:, :, :150], k, v, buffers={"doc": doc}, block_mask=bm)


def test_bsr_layout():
    s, d = 160, 16
    kernel = flashjit.compile(causal="top_left", head_dim=d, dtype="fp32",
                              block_sparse=True)
    bm_, bn_ = kernel.block_size
    nq, nk = -(-s // bm_), -(-s // bn_)
    # Row m lists key tiles 0 and m (a "sink" plus the diagonal).
    cols = [sorted({0, min(m, nk - 1)}) for m in range(nq)]
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in cols])])
    mask = kernel.block_mask_from_bsr(offsets.astype(np.int32),
                                      np.concatenate(cols).astype(np.int32),
                                      s, s)
    q, k, v = randn(1, 1, s, d), randn(1, 1, s, d), randn(1, 1, s, d)
    o = kernel.run(q, k, v, block_mask=mask)[0]
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    in_layout = np.zeros((s, s), bool)
    for m, cs in enumerate(cols):
        for n in cs:
            in_layout[m * bm_:(m + 1) * bm_, n * bn_:(n + 1) * bn_] = True
    want, _ = ref.attention(q, k, v, in_layout & (j <= i))
    ref.assert_close(o, want, *TOL["float32"], what="BSR O")
    bad = np.concatenate(cols).astype(np.int32)
    bad[-1] = nk
    with pytest.raises(flashjit.UserError, match="col_indices"):
        kernel.block_mask_from_bsr(offsets.astype(np.int32), bad, s, s)


def test_typed_errors():
    q, k, v = randn(1, 2, 8, 16), randn(1, 2, 8, 16), randn(1, 2, 8, 16)
    with pytest.raises(flashjit.UserError, match="dtype int32"):
        flashjit.attention(q.astype(np.int32), k, v)
    with pytest.raises(flashjit.UserError, match="float64"):
        flashjit.attention(q.astype(np.float64), k, v)
    with pytest.raises(flashjit.UserError, match="k.shape"):
        flashjit.attention(q, randn(1, 2, 8, 8), v)
    with pytest.raises(flashjit.UserError, match="rank 3"):
        flashjit.attention(q[0], k[0], v[0])
    with pytest.raises(flashjit.UserError, match="column") as e:
        flashjit.attention(q, k, v, mask="kv_idx <= ")
    assert e.value.status == "FLASHJIT_USER_ERROR"
    assert isinstance(e.value, ValueError)
    # An expression cannot set another spec field.
    with pytest.raises(flashjit.UserError):
        flashjit.attention(q, k, v, mask="true, heads_q=4")
    with pytest.raises(flashjit.UserError, match="cap"):
        flashjit.attention(q, k, v, score="score + param<f32>(cap)")
    with pytest.raises(flashjit.UserError, match="2147483648"):
        flashjit.attention(q, k, v, mask="q_idx < param<i32>(w)",
                           params={"w": 2**31})
    with pytest.raises(flashjit.UserError, match="not a DLPack tensor"):
        flashjit.attention([[1.0]], k, v)
    ro = np.zeros((1, 2, 8, 16), np.float32)
    ro.flags.writeable = False
    with pytest.raises(flashjit.UserError, match="read-only"):
        flashjit.attention(q, k, v, out=ro)
    with pytest.raises(flashjit.UserError, match="sm_75"):
        flashjit.compile(head_dim=16, target="sm_75")
    with pytest.raises(flashjit.UserError, match="buffer 'doc'"):
        flashjit.attention(q, k, v, mask="buffer<i32>(doc)[q_idx] == 0",
                           buffers={"doc": np.zeros((2, 2), np.int32)})
    gpu = flashjit.compile(head_dim=16, heads_q=2, heads_kv=2,
                           dtype="fp16", target="sm_80")
    with pytest.raises(flashjit.UserError, match="q is on cpu.*cuda:0"):
        gpu.run(q.astype(np.float16), k.astype(np.float16),
                v.astype(np.float16))
    kernel = flashjit.compile(head_dim=16, dtype="fp32", heads_q=2,
                              heads_kv=2, varlen=True)
    with pytest.raises(flashjit.UserError, match="cu_seqlens"):
        kernel.run(q[0], k[0], v[0])
    # Exceptions mirror the C++ classes.
    assert issubclass(flashjit.CompileError, flashjit.Error)
    assert issubclass(flashjit.DriverError, flashjit.Error)
    assert issubclass(flashjit.InternalError, flashjit.Error)


def _backward_available():
    from flashjit import _capi
    return _capi.default_library().has("flashjit_run_backward")


def test_backward_without_the_c_function_is_not_implemented():
    if _backward_available():
        pytest.skip("the C library has flashjit_run_backward")
    q = randn(1, 1, 4, 16)
    with pytest.raises(NotImplementedError, match="flashjit_run_backward"):
        flashjit.attention_backward(q, q, q, q, q[..., 0], q)


@pytest.mark.skipif(not _backward_available(),
                    reason="the C library has no flashjit_run_backward yet")
def test_backward_against_finite_differences():
    """dQ, dK, dV and the gradient of an f32 buffer against central finite
    differences of the fp32 forward (eps 1e-2, tolerance 3e-3 + 3e-2
    |grad|) and of the float64 reference (eps 1e-6, tolerance 2e-4)."""
    b, hq, hkv, sq, sk, d = 1, 2, 1, 11, 14, 16
    q, k, v = randn(b, hq, sq, d), randn(b, hkv, sk, d), randn(b, hkv, sk, d)
    slopes = RNG.uniform(0.2, 0.8, size=hq).astype(np.float32)
    w = randn(b, hq, sq, d)  # loss = sum(O * w), so dO = w
    kw = dict(mask="kv_idx <= q_idx + 2",
              score="score - buffer<f32>(slope)[head] * "
                    "cast<f32>(abs(q_idx - kv_idx))")
    o, lse = flashjit.attention(q, k, v, buffers={"slope": slopes},
                                return_lse=True, **kw)
    dq, dk, dv, g = flashjit.attention_backward(
        q, k, v, o, lse, w, buffers={"slope": slopes}, grads=["slope"], **kw)
    i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]

    def loss32(q_, k_, v_, s_):
        return float((flashjit.attention(q_, k_, v_, buffers={"slope": s_},
                                         **kw).astype(np.float64) * w).sum())

    def loss64(q_, k_, v_, s_):
        o_, _ = ref.attention(q_, k_, v_, j <= i + 2,
                              lambda sc, bb, hh, ii, jj: sc - s_[hh] *
                              np.abs(ii - jj))
        return float((o_ * w).sum())

    inputs = [q, k, v, slopes]
    grads = [dq, dk, dv, g["slope"]]
    for which, (x, gx) in enumerate(zip(inputs, grads)):
        flat = x.reshape(-1)
        for idx in RNG.choice(flat.size, size=min(8, flat.size),
                              replace=False):
            num = {}
            for name, fn, eps, dt in (("fp32", loss32, 1e-2, np.float32),
                                      ("f64", loss64, 1e-6, np.float64)):
                args = [a.astype(dt) for a in inputs]
                args[which].reshape(-1)[idx] += eps
                up = fn(*args)
                args[which].reshape(-1)[idx] -= 2 * eps
                num[name] = (up - fn(*args)) / (2 * eps)
            got = float(gx.reshape(-1)[idx])
            assert abs(got - num["fp32"]) <= 3e-3 + 3e-2 * abs(got), (
                which, idx, got, num)
            assert abs(got - num["f64"]) <= 2e-4 + 1e-3 * abs(got), (
                which, idx, got, num)


@pytest.mark.skipif(not os.environ.get("FLASHJIT_TOOL"),
                    reason="FLASHJIT_TOOL (the flashjit command) not set")
def test_load_from_a_bundle(tmp_path):
    import subprocess
    spec = ("attention(name=bundled, causal=top_left, head_dim=16, "
            "dtype=fp32, heads_q=2, heads_kv=1)")
    subprocess.run([os.environ["FLASHJIT_TOOL"], "bundle", "--out",
                    str(tmp_path / "b"), "--cache-dir", str(tmp_path / "c"),
                    "--target", "cpu", "--spec", spec], check=True,
                   stdout=subprocess.DEVNULL)
    kernel = flashjit.load(tmp_path / "b", spec, target="cpu")
    assert kernel.spec == flashjit.canonical_spec(spec)
    q, k, v = randn(1, 2, 21, 16), randn(1, 1, 30, 16), randn(1, 1, 30, 16)
    o, lse = kernel.run(q, k, v)
    want_o, want_lse = ref.attention(q, k, v, ref.causal(21, 30))
    ref.assert_close(o, want_o, *TOL["float32"], what="bundled O")
    with pytest.raises(flashjit.UserError, match="no cpu kernel"):
        flashjit.load(tmp_path / "b", causal="bottom_right", head_dim=16,
                      dtype="fp32")
