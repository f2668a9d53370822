"""Serving helpers (issue 17) on CUDA torch tensors (skipped without torch
or a GPU; CI has neither, the GPU machine has both): Kernel.run_paged with
the GPU split-KV decode kernels (compiled through the cache on the first
call) on paged caches whose unused slots hold NaN, page tables as CUDA
int32 tensors in both layouts, an attention sink and forced split counts,
against float64 attention over the gathered pages; merge_states and
paged_append on the device against float64 / exact host results."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import flashjit  # noqa: E402
import reference as ref  # noqa: E402

DEV = "cuda"


def _paged_case(rng, lens, page, hk, d, dtype):
    """A paged cache [pages, page_size, hk, d] (NaN where unused, pages in
    random order, one spare) viewed as [pages, hk, page_size, d], the
    float64 keys/values of each sequence, and the pages it owns."""
    pages = sum((n + page - 1) // page for n in lens) + 1
    order = rng.permutation(pages)
    owned, at = [], 0
    for n in lens:
        cnt = (n + page - 1) // page
        owned.append([int(x) for x in order[at:at + cnt]])
        at += cnt
    kc = torch.full((pages, page, hk, d), float("nan"), dtype=dtype)
    vc = torch.full((pages, page, hk, d), float("nan"), dtype=dtype)
    keys, vals = [], []
    for bi, n in enumerate(lens):
        k = torch.from_numpy(rng.uniform(-1, 1, (hk, n, d))).to(dtype)
        v = torch.from_numpy(rng.uniform(-1, 1, (hk, n, d))).to(dtype)
        for j in range(n):
            kc[owned[bi][j // page], j % page] = k[:, j]
            vc[owned[bi][j // page], j % page] = v[:, j]
        keys.append(k.double().numpy())
        vals.append(v.double().numpy())
    kc, vc = kc.to(DEV), vc.to(DEV)
    return (kc.permute(0, 2, 1, 3), vc.permute(0, 2, 1, 3), keys, vals,
            owned)


def _tables(layout, lens, owned, page):
    """The page table as CUDA int32 tensors."""
    i32 = dict(dtype=torch.int32, device=DEV)
    if layout == "csr":
        return dict(
            kv_indptr=torch.tensor(
                np.cumsum([0] + [len(p) for p in owned]), **i32),
            kv_indices=torch.tensor(sum(owned, []), **i32),
            kv_last_page_len=torch.tensor(
                [(n - 1) % page + 1 if n else 0 for n in lens], **i32))
    width = max(1, max(len(p) for p in owned))
    bt = torch.full((len(lens), width), -1, **i32)
    for bi, p in enumerate(owned):
        if p:
            bt[bi, :len(p)] = torch.tensor(p, **i32)
    return dict(block_table=bt, seq_lens=torch.tensor(lens, **i32))


def _check(o, lse, q, keys, vals, lens, sink, q_len, atol):
    qd = q.double().cpu().numpy()
    o = o.double().cpu().numpy()
    lse = lse.double().cpu().numpy()
    s = sink.double().cpu().numpy()
    for bi, n in enumerate(lens):
        if n == 0:  # no key: O = 0, LSE = sink[h]
            assert np.all(o[bi] == 0)
            ref.assert_close(lse[bi], np.repeat(s[:, None], q_len, 1),
                             1e-5, 1e-5, what="lse (no key)")
            continue
        allowed = ref.causal(q_len, n, bottom_right=True)
        wo, wl = ref.attention(qd[bi:bi + 1], keys[bi][None],
                               vals[bi][None], allowed=allowed)
        wl2 = np.logaddexp(wl, s[None, :, None])
        wo = np.where(np.isfinite(wl), np.exp(wl - wl2), 0.0)[..., None] * wo
        ref.assert_close(o[bi:bi + 1], wo, atol, atol, what=f"o[{bi}]")
        ref.assert_close(lse[bi:bi + 1], wl2, 2e-3, 1e-4,
                         what=f"lse[{bi}]")


@pytest.mark.parametrize("layout", ["csr", "block_table"])
@pytest.mark.parametrize("page", [16, 64])
def test_run_paged_cuda_matches_attention_over_gathered_pages(layout, page):
    rng = ref.rng()
    hq, hk, d, q_len = 8, 2, 64, 3
    lens = [130, 17, 0, 301, 64]
    kc, vc, keys, vals, owned = _paged_case(rng, lens, page, hk, d,
                                            torch.bfloat16)
    q = torch.from_numpy(rng.uniform(-1, 1, (len(lens), hq, q_len, d))).to(
        torch.bfloat16).to(DEV)
    sink = torch.from_numpy(rng.uniform(-1, 1, hq)).float().to(DEV)
    k = flashjit.compile(head_dim=d, dtype="bf16", heads_q=hq, heads_kv=hk,
                         causal="bottom_right", sink=True, target=_target())
    tables = _tables(layout, lens, owned, page)
    for splits in (0, 1, 7):
        o, lse = k.run_paged(q, kc, vc, sink=sink, num_splits=splits,
                             **tables)
        assert o.device.type == "cuda" and o.dtype == torch.bfloat16
        _check(o, lse, q, keys, vals, lens, sink, q_len, 2e-2)


def _target():
    major, minor = torch.cuda.get_device_capability(0)
    return "sm_90a" if (major, minor) == (9, 0) else "sm_80"


def test_run_paged_cuda_errors_name_the_field():
    rng = ref.rng()
    hq, hk, d, page = 4, 2, 64, 16
    lens = [20, 5]
    kc, vc, keys, vals, owned = _paged_case(rng, lens, page, hk, d,
                                            torch.float16)
    k = flashjit.compile(head_dim=d, dtype="fp16", heads_q=hq, heads_kv=hk,
                         causal="bottom_right", target=_target())
    tables = _tables("csr", lens, owned, page)
    q65 = torch.zeros((2, hq, 65, d), dtype=torch.float16, device=DEV)
    with pytest.raises(flashjit.UserError, match=r"q.shape\[2\] = 65"):
        k.run_paged(q65, kc, vc, **tables)
    q = torch.zeros((2, hq, 1, d), dtype=torch.float16, device=DEV)
    with pytest.raises(flashjit.UserError, match=r"num_splits = 5000"):
        k.run_paged(q, kc, vc, num_splits=5000, **tables)
    bad = dict(tables)
    bad["kv_indices"] = tables["kv_indices"].clone()
    bad["kv_indices"][0] = 1000
    with pytest.raises(flashjit.UserError, match=r"kv_indices\[0\] = 1000"):
        k.run_paged(q, kc, vc, **bad)
    with pytest.raises(flashjit.UserError, match=r"is on cpu"):
        k.run_paged(q.cpu(), kc, vc, **tables)


def test_merge_states_cuda_equals_attention_over_all_keys():
    rng = ref.rng()
    b, h, sq, d = 2, 3, 5, 16
    splits = [0, 9, 9, 30, 41]  # one empty split
    q = rng.uniform(-1, 1, (b, h, sq, d))
    k = rng.uniform(-1, 1, (b, h, 41, d))
    v = rng.uniform(-1, 1, (b, h, 41, d))
    os, lses = [], []
    for lo, hi in zip(splits, splits[1:]):
        if hi == lo:
            os.append(torch.full((b, h, sq, d), float("nan"), device=DEV))
            lses.append(torch.full((b, h, sq), -float("inf"), device=DEV))
            continue
        o, lse = ref.attention(q, k[:, :, lo:hi], v[:, :, lo:hi])
        os.append(torch.tensor(o, dtype=torch.float32, device=DEV))
        lses.append(torch.tensor(lse, dtype=torch.float32, device=DEV))
    o, lse = flashjit.merge_states(os, lses)
    assert o.device.type == "cuda"
    wo, wl = ref.attention(q, k, v)
    ref.assert_close(o.double().cpu().numpy(), wo, 2e-5, what="o")
    ref.assert_close(lse.double().cpu().numpy(), wl, 2e-5, 2e-6, what="lse")


@pytest.mark.parametrize("layout", ["csr", "block_table"])
def test_paged_append_cuda_writes_the_last_tokens(layout):
    rng = ref.rng()
    page, hk, d = 16, 2, 64
    lens = [40, 2, 17]  # after the append of 2 tokens each
    pages = sum((n + page - 1) // page for n in lens) + 1
    order = rng.permutation(pages)
    owned, at = [], 0
    for n in lens:
        cnt = (n + page - 1) // page
        owned.append([int(x) for x in order[at:at + cnt]])
        at += cnt
    kc = torch.full((pages, hk, page, d), float("nan"), dtype=torch.float16,
                    device=DEV)
    vc = torch.full_like(kc, float("nan"))
    k_new = torch.from_numpy(rng.uniform(-1, 1, (3, hk, 2, d))).to(
        torch.float16).to(DEV)
    v_new = torch.from_numpy(rng.uniform(-1, 1, (3, hk, 2, d))).to(
        torch.float16).to(DEV)
    flashjit.paged_append(k_new, v_new, kc, vc,
                          **_tables(layout, lens, owned, page))
    torch.cuda.synchronize()
    written = 0
    for bi, n in enumerate(lens):
        for i in range(2):
            pos = n - 2 + i
            pg, slot = owned[bi][pos // page], pos % page
            assert torch.equal(kc[pg, :, slot], k_new[bi, :, i])
            assert torch.equal(vc[pg, :, slot], v_new[bi, :, i])
            written += 1
    assert int((~torch.isnan(kc)).sum()) == written * hk * d
