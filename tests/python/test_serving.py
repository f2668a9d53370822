"""Serving helpers (issue 17) through the Python API on the CPU target:
flashjit.merge_states (2-way, n-way, with an attention sink, issue 22)
against float64 numpy attention over all keys, and flashjit.paged_append
into a paged cache (both page-table layouts) against a numpy scatter."""

import numpy as np
import pytest

import flashjit
import reference as ref


def _state(q, k, v):
    """O, LSE (float64) of plain attention of q against k, v."""
    return ref.attention(q, k, v)


def test_merge_states_of_key_splits_equals_attention_over_all_keys():
    rng = ref.rng()
    b, h, sq, sk, d = 2, 3, 5, 41, 8
    q = rng.uniform(-1, 1, (b, h, sq, d))
    k = rng.uniform(-1, 1, (b, h, sk, d))
    v = rng.uniform(-1, 1, (b, h, sk, d))
    cuts = [0, 7, 7, 30, sk]  # one empty split: LSE -inf, O garbage
    os, lses = [], []
    for a, e in zip(cuts[:-1], cuts[1:]):
        if a == e:
            os.append(np.full((b, h, sq, d), np.nan, np.float32))
            lses.append(np.full((b, h, sq), -np.inf, np.float32))
            continue
        o, lse = _state(q, k[:, :, a:e], v[:, :, a:e])
        os.append(o.astype(np.float32))
        lses.append(lse.astype(np.float32))
    want_o, want_lse = _state(q, k, v)
    o, lse = flashjit.merge_states(os, lses)
    ref.assert_close(o, want_o, 1e-5, what="o")
    ref.assert_close(lse, want_lse, 1e-5, 1e-6, what="lse")
    # With a sink, entered once: LSE' = logaddexp(LSE, sink).
    sink = rng.uniform(-2, 2, h).astype(np.float32)
    o2, lse2 = flashjit.merge_states(os, lses, sink=sink)
    want_lse2 = np.logaddexp(want_lse, sink[None, :, None])
    ref.assert_close(lse2, want_lse2, 1e-5, 1e-6, what="lse (sink)")
    ref.assert_close(o2, want_o * np.exp(want_lse - want_lse2)[..., None],
                     1e-5, what="o (sink)")
    # Two-way, in place into the first state.
    a0, l0 = os[0].copy(), lses[0].copy()
    flashjit.merge_states([a0, os[3]], [l0, lses[3]], out=a0, lse=l0)
    w_o, w_l = _state(q, np.concatenate([k[:, :, :7], k[:, :, 30:]], 2),
                      np.concatenate([v[:, :, :7], v[:, :, 30:]], 2))
    ref.assert_close(a0, w_o, 1e-5, what="o (in place)")
    ref.assert_close(l0, w_l, 1e-5, 1e-6, what="lse (in place)")


def test_merge_states_errors_name_the_field():
    o = np.zeros((1, 2, 3, 4), np.float32)
    lse = np.zeros((1, 2, 3), np.float32)
    with pytest.raises(flashjit.UserError, match=r"o\[1\].shape\[3\] = 5"):
        flashjit.merge_states([o, np.zeros((1, 2, 3, 5), np.float32)],
                              [lse, lse])
    with pytest.raises(flashjit.UserError, match=r"sink has 3 entries"):
        flashjit.merge_states([o], [lse], sink=np.zeros(3, np.float32))
    with pytest.raises(flashjit.UserError, match=r"sink\[0\] = nan"):
        flashjit.merge_states([o], [lse],
                              sink=np.array([np.nan, 0], np.float32))


@pytest.mark.parametrize("layout", ["csr", "block_table"])
def test_paged_append_writes_the_last_tokens(layout):
    rng = ref.rng()
    page, pages, hk, d = 4, 9, 2, 6
    lens = [7, 2, 5]  # after the append of 2 tokens each
    order = rng.permutation(pages)
    owned, at = [], 0
    for n in lens:
        cnt = (n + page - 1) // page
        owned.append([int(x) for x in order[at:at + cnt]])
        at += cnt
    k_cache = np.full((pages, hk, page, d), np.nan, np.float32)
    v_cache = np.full((pages, hk, page, d), np.nan, np.float32)
    k_new = rng.uniform(-1, 1, (3, hk, 2, d)).astype(np.float32)
    v_new = rng.uniform(-1, 1, (3, hk, 2, d)).astype(np.float32)
    if layout == "csr":
        indptr = np.cumsum([0] + [len(p) for p in owned]).astype(np.int32)
        indices = np.array(sum(owned, []), np.int32)
        last = np.array([(n - 1) % page + 1 for n in lens], np.int32)
        flashjit.paged_append(k_new, v_new, k_cache, v_cache,
                              kv_indptr=indptr, kv_indices=indices,
                              kv_last_page_len=last)
    else:
        table = np.full((3, 3), -1, np.int32)
        for bi, p in enumerate(owned):
            table[bi, :len(p)] = p
        flashjit.paged_append(k_new, v_new, k_cache, v_cache,
                              block_table=table,
                              seq_lens=np.array(lens, np.int32))
    written = 0
    for bi, n in enumerate(lens):
        for i in range(2):
            pos = n - 2 + i
            pg, slot = owned[bi][pos // page], pos % page
            np.testing.assert_array_equal(k_cache[pg, :, slot],
                                          k_new[bi, :, i])
            np.testing.assert_array_equal(v_cache[pg, :, slot],
                                          v_new[bi, :, i])
            written += 1
    assert np.count_nonzero(~np.isnan(k_cache)) == written * hk * d
    # A sequence shorter than the new tokens is refused.
    with pytest.raises(flashjit.UserError, match=r"seq_lens\[1\] = 1 < n_new"):
        table = np.array([[0, 1, 2], [3, -1, -1], [4, 5, -1]], np.int32)
        flashjit.paged_append(k_new, v_new, k_cache, v_cache,
                              block_table=table,
                              seq_lens=np.array([7, 1, 5], np.int32))


@pytest.mark.parametrize("layout", ["csr", "block_table"])
def test_run_paged_matches_attention_over_gathered_pages(layout):
    rng = ref.rng()
    page, pages, hq, hk, d, q_len = 4, 12, 4, 2, 16, 3
    lens = [9, 2, 0, 14]
    order = rng.permutation(pages)
    owned, at = [], 0
    for n in lens:
        cnt = (n + page - 1) // page
        owned.append([int(x) for x in order[at:at + cnt]])
        at += cnt
    # [pages, page_size, heads, dim] storage (FlashInfer/vLLM), NaN where
    # unused, viewed as [pages, heads, page_size, dim].
    kc = np.full((pages, page, hk, d), np.nan, np.float32)
    vc = np.full((pages, page, hk, d), np.nan, np.float32)
    keys = [rng.uniform(-1, 1, (hk, n, d)).astype(np.float32) for n in lens]
    vals = [rng.uniform(-1, 1, (hk, n, d)).astype(np.float32) for n in lens]
    for bi, n in enumerate(lens):
        for j in range(n):
            kc[owned[bi][j // page], j % page] = keys[bi][:, j]
            vc[owned[bi][j // page], j % page] = vals[bi][:, j]
    q = rng.uniform(-1, 1, (4, hq, q_len, d)).astype(np.float32)
    sink = rng.uniform(-1, 1, hq).astype(np.float32)
    k = flashjit.compile(head_dim=d, dtype="fp32", heads_q=hq, heads_kv=hk,
                         causal="bottom_right", sink=True, varlen=True)
    if layout == "csr":
        tables = dict(
            kv_indptr=np.cumsum([0] + [len(p) for p in owned]).astype(
                np.int32),
            kv_indices=np.array(sum(owned, []), np.int32),
            kv_last_page_len=np.array(
                [(n - 1) % page + 1 if n else 0 for n in lens], np.int32))
    else:
        bt = np.full((4, 4), -1, np.int32)
        for bi, p in enumerate(owned):
            bt[bi, :len(p)] = p
        tables = dict(block_table=bt, seq_lens=np.array(lens, np.int32))
    o, lse = k.run_paged(q, kc.transpose(0, 2, 1, 3),
                         vc.transpose(0, 2, 1, 3), sink=sink, **tables)
    for bi, n in enumerate(lens):
        if n == 0:  # no key: O = 0, LSE = sink[h]
            assert np.all(o[bi] == 0)
            ref.assert_close(lse[bi], np.repeat(sink[:, None], q_len, 1),
                             1e-6, 1e-6, what="lse (no key)")
            continue
        allowed = ref.causal(q_len, n, bottom_right=True)
        wo, wl = ref.attention(q[bi:bi + 1], keys[bi][None],
                               vals[bi][None], allowed=allowed)
        wl2 = np.logaddexp(wl, sink[None, :, None])
        wo = np.where(np.isfinite(wl), np.exp(wl - wl2), 0.0)[..., None] * wo
        ref.assert_close(o[bi:bi + 1], wo, 2e-5, what=f"o[{bi}]")
        ref.assert_close(lse[bi:bi + 1], wl2, 2e-5, 2e-6, what=f"lse[{bi}]")


def test_run_paged_errors_name_the_field():
    k = flashjit.compile(head_dim=16, dtype="fp32", heads_q=2, heads_kv=1,
                         causal="bottom_right", varlen=True)
    q = np.zeros((1, 2, 1, 16), np.float32)
    kc = np.zeros((2, 1, 4, 16), np.float32)
    table = dict(block_table=np.array([[1]], np.int32),
                 seq_lens=np.array([3], np.int32))
    with pytest.raises(flashjit.UserError, match=r"num_splits = -1"):
        k.run_paged(q, kc, kc, num_splits=-1, **table)
    with pytest.raises(flashjit.UserError,
                       match=r"block_table\[0\]\[0\] = 5"):
        k.run_paged(q, kc, kc, block_table=np.array([[5]], np.int32),
                    seq_lens=np.array([3], np.int32))
    # The page count of the table is the cache's: O of the one sequence
    # over its 3 keys (all zero: uniform weights over zero values).
    o = k.run_paged(q, kc, kc, **table)[0]
    assert np.all(o == 0)
    # A CPU kernel without varlen cannot decode.
    dense = flashjit.compile(head_dim=16, dtype="fp32", heads_q=2,
                             heads_kv=1, causal="bottom_right")
    with pytest.raises(flashjit.UserError, match=r"varlen=True"):
        dense.run_paged(q, kc, kc, **table)
