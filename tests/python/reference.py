"""Attention in float64 numpy, straight from README "Semantics", as the
oracle of the Python tests (independent of flashjit's kernels)."""

import os
import time

import numpy as np


def rng():
    """A seeded generator; FLASHJIT_TEST_SEED replays a run."""
    seed = int(os.environ.get("FLASHJIT_TEST_SEED", time.time_ns() % 2**31))
    print(f"seed {seed} (FLASHJIT_TEST_SEED replays it)")
    return np.random.default_rng(seed)


def attention(q, k, v, allowed=None, score=None, scale=None):
    """O [B, Hq, Sq, Dv] and LSE [B, Hq, Sq] in float64 of q [B, Hq, Sq, D],
    k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv] (GQA by repeating K/V heads).
    ``allowed`` is a boolean array broadcastable to [B, Hq, Sq, Sk];
    ``score(s, b, h, i, j)`` maps the scaled scores (index arrays
    broadcast to [B, Hq, Sq, Sk]). Rows with no allowed key: O = 0,
    LSE = -inf."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    if scale is None:
        scale = np.float32(1 / np.sqrt(np.float32(q.shape[-1])))
    s = np.einsum("bhid,bhjd->bhij", q, k) * float(np.float32(scale))
    if score is not None:
        b, h, i, j = np.ix_(*(np.arange(n) for n in s.shape))
        s = score(s, b, h, i, j)
    if allowed is None:
        allowed = np.ones(s.shape, dtype=bool)
    allowed = np.broadcast_to(allowed, s.shape)
    s = np.where(allowed, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(m)
    m = np.where(empty, 0, m)
    p = np.where(allowed, np.exp(s - m), 0)
    total = p.sum(axis=-1, keepdims=True)
    safe = np.where(total > 0, total, 1)
    o = np.einsum("bhij,bhjd->bhid", p / safe, v)
    lse = np.where(empty | (total == 0), -np.inf, m + np.log(safe))
    return o, lse[..., 0]


def causal(sq, sk, bottom_right=False):
    """[Sq, Sk] causal mask, top-left or bottom-right aligned."""
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    return j <= i + (sk - sq if bottom_right else 0)


def assert_close(got, want, atol, rtol=0.0, what=""):
    """Max excess over atol + rtol * |want| must be <= 0; -inf must match."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    inf = np.isinf(want)
    assert np.array_equal(np.isinf(got), inf), f"{what}: infinities differ"
    assert np.array_equal(got[inf], want[inf]), f"{what}: infinities differ"
    err = np.abs(got[~inf] - want[~inf])
    worst = float(err.max()) if err.size else 0.0
    excess = err - atol - rtol * np.abs(want[~inf])
    print(f"{what}: max |got - want| = {worst:.3g}")
    assert not excess.size or excess.max() <= 0, (
        f"{what}: max |got - want| = {worst:.3g} > {atol} + {rtol} |want|")
