"""Block masks in training: the block-sparse (and varlen) backward through
the Python package (Kernel.backward with block_mask= / cu_seqlens,
attention_backward, flashjit.create_block_mask, and torch autograd through
``flashjit.attention(..., block_mask=...)``).

numpy (CPU, fp32; runs in CI): gradients against a float64 reference
backward written here from README "Backward" (P, D = rowsum(dO * O),
dS = P (dP - D), dQ = scale dS K, ...), given the same allowed set: the
spec's mask, and for BSR layouts the mask restricted to the listed tiles
(so a backward that ignored the block mask would not match).

torch (skipped without torch; CPU fp32, and CUDA bf16 on the GPU machine):
one training step of ``flashjit.attention`` with a block mask against torch
autograd of a float64 reference built from the same mask; eager, the
autograd.Function fallback, torch.compile (fullgraph) and ``block_mask=True``.
"""

import numpy as np
import pytest

import flashjit
import reference as ref
from flashjit import _capi

HAVE_EX = _capi.default_library().has("flashjit_run_backward_ex")
pytestmark = pytest.mark.skipif(
    not HAVE_EX, reason="no flashjit_run_backward_ex in the C library")

RNG = ref.rng()
DOC_MASK = "buffer<i32>(doc)[q_idx] == buffer<i32>(doc)[kv_idx]"
ALIBI = "score - buffer<f32>(slope)[head] * cast<f32>(abs(q_idx - kv_idx))"


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def documents(lengths):
    return np.concatenate([np.full(n, i, np.int32)
                           for i, n in enumerate(lengths)])


def reference_grads(q, k, v, d_o, allowed, slopes=None, scale=None):
    """(dq, dk, dv, dslopes or None) in float64 of the attention of q [B,
    Hq, Sq, D], k, v [B, Hkv, Sk, D] with the boolean ``allowed`` [B or 1,
    Hq or 1, Sq, Sk] and, with ``slopes``, the score s - slopes[h] |i - j|
    (README "Backward"); rows with no allowed key get zero."""
    q, k, v, d_o = (np.asarray(x, np.float64) for x in (q, k, v, d_o))
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    group = hq // hkv
    kk, vv = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    if scale is None:
        scale = float(np.float32(1 / np.sqrt(np.float32(d))))
    dist = np.abs(np.arange(sq)[:, None] - np.arange(sk)[None, :])
    s = np.einsum("bhid,bhjd->bhij", q, kk) * scale
    if slopes is not None:
        s = s - np.asarray(slopes, np.float64)[None, :, None, None] * dist
    allowed = np.broadcast_to(allowed, s.shape)
    s = np.where(allowed, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    p = np.where(allowed, np.exp(s - m), 0)
    total = p.sum(axis=-1, keepdims=True)
    p = p / np.where(total > 0, total, 1)
    o = np.einsum("bhij,bhjd->bhid", p, vv)
    dv = np.einsum("bhij,bhid->bhjd", p, d_o)
    dp = np.einsum("bhid,bhjd->bhij", d_o, vv)
    ds = p * (dp - (d_o * o).sum(-1, keepdims=True))
    dq = np.einsum("bhij,bhjd->bhid", ds, kk) * scale
    dk = np.einsum("bhij,bhid->bhjd", ds, q) * scale
    fold = (lambda x: x.reshape(b, hkv, group, *x.shape[2:]).sum(2))
    dslopes = None if slopes is None else -(ds * dist).sum(axis=(0, 2, 3))
    return dq, fold(dk), fold(dv), dslopes


def doc_allowed(doc_q, doc_k, causal=True):
    """[1, 1, Sq, Sk] document(-causal) mask of per-token document ids."""
    a = doc_q[:, None] == doc_k[None, :]
    if causal:
        a = a & (np.arange(len(doc_k))[None, :] <=
                 np.arange(len(doc_q))[:, None])
    return a[None, None]


def close(got, want, what):
    ref.assert_close(got, want, atol=2e-4 * (1 + np.abs(want).max()),
                     what=what)
    assert np.abs(want).max() > 0, what  # a test that cannot fail otherwise


# ---- numpy: Kernel.backward / attention_backward with block masks ----

def test_block_sparse_backward_with_the_built_mask():
    """A causal document mask with ALiBi slopes (their gradient too), GQA
    4:2, batch 2, 203 tokens (odd, several tiles): the mask from
    create_block_mask skips cross-document tiles; O and the gradients match
    the float64 reference."""
    b, hq, hkv, s, d = 2, 4, 2, 203, 16
    q, k, v, w = randn(b, hq, s, d), randn(b, hkv, s, d), \
        randn(b, hkv, s, d), randn(b, hq, s, d)
    doc = documents([70, 1, 60, 72])
    slopes = RNG.uniform(0.05, 0.5, size=hq).astype(np.float32)
    bufs = {"doc": doc, "slope": slopes}
    bm = flashjit.create_block_mask(DOC_MASK, b, s, s, buffers=bufs,
                                    score=ALIBI, causal=True, head_dim=d,
                                    heads_q=hq, heads_kv=hkv, dtype="fp32")
    lists = bm.to_numpy()
    listed = (lists["kv_num_blocks"] + lists["full_kv_num_blocks"]).sum()
    tiles = bm.num_q_tiles
    assert listed < bm.batch * bm.heads * tiles * (tiles + 1) // 2
    kw = dict(mask=DOC_MASK, score=ALIBI, causal=True, buffers=bufs)
    o, lse = flashjit.attention(q, k, v, return_lse=True, block_mask=bm, **kw)
    dq, dk, dv, g = flashjit.attention_backward(
        q, k, v, o, lse, w, grads=["slope"], block_mask=bm, **kw)
    allowed = doc_allowed(doc, doc)
    want_o, _ = ref.attention(q, k, v, allowed, lambda sc, bb, hh, ii, jj:
                              sc - slopes[hh] * np.abs(ii - jj))
    close(o, want_o, "O")
    rq, rk, rv, rs = reference_grads(q, k, v, w, allowed, slopes)
    close(dq, rq, "dQ")
    close(dk, rk, "dK")
    close(dv, rv, "dV")
    close(g["slope"], rs, "d slope")


def test_bsr_layout_that_drops_tiles_changes_the_gradients():
    """A BSR layout that leaves out the tile left of the diagonal on even
    heads: the gradients are those of the mask restricted to the listed
    tiles, which differ from the dense ones."""
    b, h, s, d = 1, 2, 150, 16
    q, k, v, w = (randn(b, h, s, d) for _ in range(4))
    kernel = flashjit.compile(causal=True, head_dim=d, heads_q=h, heads_kv=h,
                              dtype="fp32", block_sparse=True)
    bm_, bn = kernel.block_size
    qt, kt = -(-s // bm_), -(-s // bn)
    offsets, cols = [0], []
    listed = np.zeros((h, s, s), bool)
    for hh in range(h):
        for m in range(qt):
            for t in range(kt):
                if t * bn < min(s, (m + 1) * bm_) and (t != m - 1 or hh % 2):
                    cols.append(t)
                    listed[hh, m * bm_:(m + 1) * bm_, t * bn:(t + 1) * bn] = 1
            offsets.append(len(cols))
    mask = kernel.block_mask_from_bsr(offsets, cols, s, s, heads=h)
    o, lse = kernel.run(q, k, v, block_mask=mask)
    dq, dk, dv = kernel.backward(q, k, v, o, lse, w, block_mask=mask)
    allowed = ref.causal(s, s)[None, None] & listed[None]
    rq, rk, rv, _ = reference_grads(q, k, v, w, allowed)
    close(dq, rq, "dQ")
    close(dk, rk, "dK")
    close(dv, rv, "dV")
    dense = reference_grads(q, k, v, w, ref.causal(s, s)[None, None])
    assert np.abs(dense[1] - rk).max() > 1e-2


@pytest.mark.parametrize("sparse", [False, True])
def test_varlen_backward_with_odd_lengths_and_empty_sequences(sparse):
    """Packed sequences of 37, 0, 91, 5 queries and 50, 13, 91, 0 keys
    (one with no queries, one with no keys), a document mask over
    per-sequence positions (block-sparse: its varlen block mask), causal:
    each sequence's gradients against the reference on its own; keys of a
    sequence without queries get exactly zero."""
    hq, hkv, d = 2, 1, 16
    cu_q = np.array([0, 37, 37, 128, 133], np.int32)
    cu_k = np.array([0, 50, 63, 154, 154], np.int32)
    q = randn(cu_q[-1], hq, d)
    k, v = randn(cu_k[-1], hkv, d), randn(cu_k[-1], hkv, d)
    w = randn(cu_q[-1], hq, d)
    doc = documents([20, 30, 41])
    kernel = flashjit.compile(mask=DOC_MASK, causal=True, head_dim=d,
                              heads_q=hq, heads_kv=hkv, dtype="fp32",
                              varlen=True, block_sparse=sparse)
    bm = (kernel.build_block_mask(buffers={"doc": doc}, cu_seqlens_q=cu_q,
                                  cu_seqlens_k=cu_k) if sparse else None)
    o, lse = kernel.run(q, k, v, buffers={"doc": doc}, cu_seqlens_q=cu_q,
                        cu_seqlens_k=cu_k, block_mask=bm)
    dq, dk, dv = kernel.backward(q, k, v, o, lse, w, buffers={"doc": doc},
                                 cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                 block_mask=bm)
    want = {n: np.zeros(x.shape) for n, x in (("dq", dq), ("dk", dk),
                                               ("dv", dv))}
    for i in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        sq, sk = cu_q[i + 1] - cu_q[i], cu_k[i + 1] - cu_k[i]
        if sq == 0 or sk == 0:
            continue
        seq = [x[None].transpose(0, 2, 1, 3) for x in (q[qs], k[ks], v[ks],
                                                        w[qs])]
        allowed = doc_allowed(doc[:sq], doc[:sk])
        rq, rk, rv, _ = reference_grads(*seq, allowed)
        want["dq"][qs] = rq[0].transpose(1, 0, 2)
        want["dk"][ks] = rk[0].transpose(1, 0, 2)
        want["dv"][ks] = rv[0].transpose(1, 0, 2)
    close(dq, want["dq"], "dQ")
    close(dk, want["dk"], "dK")
    close(dv, want["dv"], "dV")
    assert (dk[50:63] == 0).all() and (dv[50:63] == 0).all()


def test_mode_errors():
    s, d = 70, 16
    q = randn(1, 1, s, d)
    doc = documents([30, 40])
    kernel = flashjit.compile(mask=DOC_MASK, head_dim=d, dtype="fp32",
                              block_sparse=True)
    dense = flashjit.compile(mask=DOC_MASK, head_dim=d, dtype="fp32")
    bm = kernel.build_block_mask(1, s, s, buffers={"doc": doc})
    o, lse = kernel.run(q, q, q, buffers={"doc": doc}, block_mask=bm)
    with pytest.raises(flashjit.UserError, match="needs block_mask="):
        kernel.backward(q, q, q, o, lse, q, buffers={"doc": doc})
    with pytest.raises(flashjit.UserError, match="without block_sparse"):
        dense.backward(q, q, q, o, lse, q, buffers={"doc": doc},
                       block_mask=bm)
    with pytest.raises(flashjit.UserError, match="must be a flashjit"):
        kernel.backward(q, q, q, o, lse, q, buffers={"doc": doc},
                        block_mask="all")
    with pytest.raises(flashjit.UserError, match="are for varlen"):
        kernel.backward(q, q, q, o, lse, q, buffers={"doc": doc},
                        block_mask=bm, cu_seqlens_q=[0, s],
                        cu_seqlens_k=[0, s])
    # A mask built for another call's length: the C API names both.
    short = kernel.build_block_mask(1, s - 10, s - 10,
                                    buffers={"doc": doc})
    with pytest.raises(flashjit.UserError, match="seqlen"):
        kernel.backward(q, q, q, o, lse, q, buffers={"doc": doc},
                        block_mask=short)
    # A mask of another spec's mask (causal) given to attention().
    other = flashjit.create_block_mask(DOC_MASK, 1, s, s, causal=True,
                                      head_dim=d, dtype="fp32",
                                      buffers={"doc": doc})
    with pytest.raises(flashjit.UserError, match="block_mask was built for "
                                                 "spec"):
        flashjit.attention(q, q, q, mask=DOC_MASK, buffers={"doc": doc},
                           block_mask=other)
    with pytest.raises(flashjit.UserError, match="seqlen_k is missing"):
        flashjit.create_block_mask(DOC_MASK, 1, s, head_dim=d,
                                   buffers={"doc": doc})
    with pytest.raises(flashjit.UserError, match="return_lse"):
        flashjit.create_block_mask(DOC_MASK, 1, s, s, return_lse=False,
                                   buffers={"doc": doc})
    with pytest.raises(flashjit.UserError, match="give all of q, k, v"):
        flashjit.create_block_mask(DOC_MASK, q=q, buffers={"doc": doc})


# ---- torch: autograd through flashjit.attention(block_mask=...) ----

def _torch():
    return pytest.importorskip("torch")


def _torch_reference(torch, q, k, v, doc, slopes):
    """O in float64 of the causal document mask with ALiBi slopes, by torch
    ops (differentiable in q, k, v, slopes)."""
    q, k, v = (x.double() for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, 1)
    v = v.repeat_interleave(group, 1)
    n = q.shape[2]
    idx = torch.arange(n, device=q.device)
    dist = (idx[:, None] - idx[None, :]).abs().double()
    scale = float(np.float32(1 / np.sqrt(np.float32(q.shape[-1]))))
    s = torch.einsum("bhid,bhjd->bhij", q, k) * scale
    s = s - slopes.double()[None, :, None, None] * dist
    allowed = (doc[:, None] == doc[None, :]) & (idx[None, :] <= idx[:, None])
    s = s.masked_fill(~allowed, float("-inf"))
    return torch.einsum("bhij,bhjd->bhid", s.softmax(-1), v)


def _train_step(torch, device, dtype, b, hq, hkv, n, d, lengths, mode):
    """(got, want) lists of O, dQ, dK, dV, d slopes for one training step
    through ``mode``: "eager", "function", "compiled" or "auto"
    (block_mask=True)."""
    import flashjit.torch as fjt
    g = torch.Generator(device="cpu").manual_seed(int(RNG.integers(2**31)))

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)
    q, k, v = rnd(b, hq, n, d), rnd(b, hkv, n, d), rnd(b, hkv, n, d)
    w = rnd(b, hq, n, d)
    doc = torch.tensor(documents(lengths), device=device)
    slopes = torch.rand(hq, generator=g).to(device) * 0.1
    leaves = [x.clone().requires_grad_() for x in (q, k, v, slopes)]
    kw = dict(mask=DOC_MASK, score=ALIBI, causal=True)
    bufs = {"doc": doc, "slope": leaves[3]}
    if mode == "auto":
        bm = True
    else:
        bm = flashjit.create_block_mask(DOC_MASK, q=q, k=k, v=v,
                                        buffers={"doc": doc,
                                                 "slope": slopes},
                                        score=ALIBI, causal=True)
    if mode == "function":
        opts = fjt.options(params=None, buffer_names=["doc", "slope"],
                           block_mask=bm, **kw)
        o, _ = fjt.AttentionFunction.apply(*leaves[:3], opts, doc, leaves[3])
    elif mode == "compiled":
        def f(q_, k_, v_, s_):
            return flashjit.attention(q_, k_, v_, buffers={"doc": doc,
                                                           "slope": s_},
                                      block_mask=bm, **kw)
        o = torch.compile(f, fullgraph=True, backend="aot_eager")(*leaves)
    else:
        o = flashjit.attention(*leaves[:3], buffers=bufs, block_mask=bm,
                               **kw)
    (o.float() * w.float()).sum().backward()
    got = [o.detach()] + [x.grad for x in leaves]
    ref_leaves = [x.detach().clone().requires_grad_() for x in (q, k, v,
                                                                 slopes)]
    want_o = _torch_reference(torch, *ref_leaves[:3], doc, ref_leaves[3])
    (want_o * w.double()).sum().backward()
    want = [want_o.detach()] + [x.grad for x in ref_leaves]
    return got, want


def _check(got, want, dtype_tol):
    for name, a, b in zip(("O", "dQ", "dK", "dV", "dslopes"), got, want):
        a, b = a.double(), b.double()
        err = (a - b).abs().max().item()
        scale = b.abs().max().item()
        assert scale > 0, name
        assert err <= dtype_tol * (1 + scale), (name, err, scale)


@pytest.mark.parametrize("mode", ["eager", "function", "compiled", "auto"])
def test_torch_autograd_with_a_block_mask_cpu(mode):
    torch = _torch()
    got, want = _train_step(torch, "cpu", torch.float32, 2, 4, 2, 203, 16,
                            [70, 1, 60, 72], mode)
    _check(got, want, 2e-4)


@pytest.mark.parametrize("d", [64, 128])
def test_torch_autograd_with_a_block_mask_cuda(d):
    """The H200 path (bf16, sm_90a block-sparse forward and backward; the
    forward's mask tiles fit the backward's at head dims 64 and 128):
    O and the gradients within bf16's error of the float64 reference
    (2^-5 relative to the largest value: P and dS enter the tensor cores in
    bf16)."""
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    got, want = _train_step(torch, "cuda", torch.bfloat16, 2, 8, 4, 1000, d,
                            [300, 1, 250, 449], "eager")
    _check(got[:4], want[:4], 2.0 ** -5)
    # d slopes sums dS |i - j| over every pair and cancels: a looser bound
    # (5% of its largest value), still far below a skipped or doubled tile.
    err = (got[4].double() - want[4].double()).abs().max().item()
    assert err <= 5e-2 * want[4].abs().max().item(), err


def test_torch_block_mask_must_match_the_call():
    torch = _torch()
    q = torch.randn(1, 2, 70, 16, requires_grad=True)
    doc = torch.tensor(documents([30, 40]))
    bm = flashjit.create_block_mask(DOC_MASK, q=q, k=q, v=q,
                                    buffers={"doc": doc})
    with pytest.raises(flashjit.UserError, match="block_mask was built"):
        flashjit.attention(q, q, q, mask=DOC_MASK, causal=True,
                           buffers={"doc": doc}, block_mask=bm)
    with pytest.raises(flashjit.UserError, match="must be a flashjit"):
        flashjit.attention(q, q, q, mask=DOC_MASK, buffers={"doc": doc},
                           block_mask="dense")
