"""Attention sinks (issue 22) through the Python API on the CPU target,
against float64 numpy straight from README "Attention sinks":
LSE = log(exp(sink[h]) + sum exp(s)), O = sum exp(s - LSE) v, a row with no
allowed key gets O = 0 and LSE = sink[h]; d sink[h] = -sum_i exp(sink[h] -
LSE_i) D_i with D_i = dO_i . O_i. With torch (skipped in CI): autograd of
the sink against float64 torch autograd of the same formula."""

import numpy as np
import pytest

import flashjit
import reference as ref
from flashjit import _capi


def sink_reference(q, k, v, sink, allowed):
    """O, LSE of attention with a sink, from the no-sink reference through
    LSE' = logaddexp(LSE, sink), O' = O exp(LSE - LSE')."""
    o, lse = ref.attention(q, k, v, allowed=allowed)
    s = np.asarray(sink, dtype=np.float64)[None, :, None]
    lse2 = np.logaddexp(lse, s)
    w = np.where(np.isfinite(lse), np.exp(lse - lse2), 0.0)
    return o * w[..., None], lse2


def test_forward_and_d_sink_match_float64():
    rng = ref.rng()
    b, hq, hkv, sq, sk, d = 2, 4, 2, 29, 13, 16
    q = rng.uniform(-1, 1, (b, hq, sq, d)).astype(np.float32)
    k = rng.uniform(-1, 1, (b, hkv, sk, d)).astype(np.float32)
    v = rng.uniform(-1, 1, (b, hkv, sk, d)).astype(np.float32)
    sink = rng.uniform(-2, 2, hq).astype(np.float32)
    # Bottom-right causal with sq > sk: rows 0..15 see no key.
    o, lse = flashjit.attention(q, k, v, causal="bottom_right", sink=sink,
                                return_lse=True)
    want_o, want_lse = sink_reference(q, k, v, sink,
                                      ref.causal(sq, sk, bottom_right=True))
    ref.assert_close(o, want_o, 2e-5, what="o")
    ref.assert_close(lse, want_lse, 2e-5, 2e-6, what="lse")
    assert np.all(o[:, :, :sq - sk] == 0)
    np.testing.assert_allclose(lse[:, :, :sq - sk],
                               np.broadcast_to(sink[None, :, None],
                                               (b, hq, sq - sk)), rtol=1e-6)
    if not _capi.default_library().has("flashjit_run_backward"):
        pytest.skip("no flashjit_run_backward in the C library")
    d_o = rng.uniform(-1, 1, o.shape).astype(np.float32)
    dq, dk, dv, g = flashjit.attention_backward(
        q, k, v, o, lse, d_o, causal="bottom_right", sink=sink,
        grads=(flashjit.SINK,))
    dsink = g[flashjit.SINK]
    rows = (d_o.astype(np.float64) * want_o).sum(-1)
    want = -(np.exp(sink[None, :, None] - want_lse) * rows).sum((0, 2))
    ref.assert_close(dsink, want, 1e-4, 1e-4, what="d sink")
    assert np.all(dq[:, :, :sq - sk] == 0)


def test_sink_errors():
    q = np.zeros((1, 2, 3, 8), np.float32)
    k = np.zeros((1, 1, 3, 8), np.float32)
    with pytest.raises(flashjit.UserError, match="heads_q = 2"):
        flashjit.attention(q, k, k, sink=np.zeros(3, np.float32))
    with pytest.raises(flashjit.UserError, match="1-D float32"):
        flashjit.attention(q, k, k, sink=np.zeros(2, np.float64))
    with pytest.raises(flashjit.UserError, match=r"sink\[1\] = nan"):
        flashjit.attention(q, k, k, sink=np.array([0, np.nan], np.float32))
    kernel = flashjit.compile(head_dim=8, heads_q=2, dtype="fp32", sink=True)
    assert kernel.sink and kernel.spec.endswith(", sink=true)")
    with pytest.raises(flashjit.UserError, match="declares a sink"):
        kernel.run(q, k, k)
    plain = flashjit.compile(head_dim=8, heads_q=2, dtype="fp32")
    assert not plain.sink
    with pytest.raises(flashjit.UserError, match="declares no sink"):
        plain.run(q, k, k, sink=np.zeros(2, np.float32))


def test_torch_autograd_of_the_sink():
    torch = pytest.importorskip("torch")
    if not _capi.default_library().has("flashjit_run_backward"):
        pytest.skip("no flashjit_run_backward in the C library")
    # CPU tensors: the GPU backward does not compute d sink yet.
    for _ in range(1):
        g = torch.Generator().manual_seed(int(ref.rng().integers(2**31)))
        q, k, v = (torch.randn(*s, generator=g, dtype=torch.float32)
                   .requires_grad_() for s in
                   ((2, 4, 21, 16), (2, 2, 17, 16), (2, 2, 17, 16)))
        sink = torch.randn(4, generator=g).requires_grad_()
        o = flashjit.attention(q, k, v, causal="bottom_right", sink=sink)
        w = torch.randn(o.shape, generator=g)
        (o * w).sum().backward()
        got = [x.grad.clone() for x in (q, k, v, sink)]
        qd, kd, vd, sd = (x.detach().double().requires_grad_()
                          for x in (q, k, v, sink))
        s = qd @ kd.repeat_interleave(2, 1).transpose(-1, -2) / 4.0
        i = torch.arange(21)[:, None]
        j = torch.arange(17)[None, :]
        s = s.masked_fill(~(j <= i + 17 - 21), float("-inf"))
        s = torch.cat([s, sd[None, :, None, None].expand(2, 4, 21, 1)], -1)
        p = torch.softmax(s, -1)[..., :-1]
        (p @ vd.repeat_interleave(2, 1) * w.double()).sum().backward()
        for name, a, b in zip(("q", "k", "v", "sink"), got, (qd, kd, vd, sd)):
            err = (a.double() - b.grad).abs().max().item()
            assert err < 1e-4 * max(1.0, b.grad.abs().max().item()), (name,
                                                                     err)
