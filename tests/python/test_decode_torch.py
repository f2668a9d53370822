"""Paged decode (issue 17) beside torch on the gathered pages, in one
process: flashjit's Kernel.run_paged on a paged bf16 cache, and torch's own
attention on the same keys gathered into contiguous tensors, both measured
against a float64 oracle (README "Serving" semantics written with torch
ops). The rule is FlashAttention's test rule:

    max |O_flashjit - O_fp64| <= 2 * max |O_torch - O_fp64| + 1e-3

(max over every output element of the sequences that have keys; 1e-3 is the
absolute floor). "torch" is:
- sdpa (torch.nn.functional.scaled_dot_product_attention, default backend
  choice; K/V heads repeated so no GQA path decides the backend) for dense
  (q_len 1), causal bottom-right (q_len 4, attn_mask causal_lower_right)
  and the sliding window (a boolean attn_mask);
- for softcap and ALiBi, which sdpa cannot express: an explicit masked
  softmax in torch with bf16 inputs and fp32 math, P rounded to bf16 before
  P @ V and O rounded to bf16, as a flash kernel does (named "torch-fp32" in
  the output);
- FlashAttention-4's paged forward (flash_attn.cute.flash_attn_varlen_func
  with page_table = the block table and seqused_k) where it imports and the
  GPU is sm_90 (dense, causal, window, softcap; printed, not asserted: FA4
  is a peer, not an oracle).

Every case: GQA 32/8 (and MQA 32/1 for dense and causal), head_dim 128,
pages of 16 and 64 tokens in shuffled order, a prefix page shared by two
sequences, NaN in every unused slot and spare page, a sequence of length 0
(O = 0, LSE = -inf), both page-table layouts (CSR and block table). LSE is
checked against the oracle too. On the CPU (flashjit's CPU decode, torch's
CPU sdpa) the same comparison runs on smaller shapes, so the harness itself
is tested wherever torch is; the CUDA cases skip without a GPU.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashjit  # noqa: E402
import reference as ref  # noqa: E402

WINDOW = 300
CAP = 5.0
FLOOR = 1e-3  # absolute floor of the rule above

# name: (spec keywords, q_len, peer)
VARIANTS = {
    "dense": (dict(), 1, "sdpa"),
    "causal": (dict(causal="bottom_right"), 4, "sdpa"),
    "window": (dict(mask=f"sliding_window({WINDOW}, 0, bottom_right)"), 1,
               "sdpa"),
    "softcap": (dict(causal="bottom_right", score=f"softcap({CAP})"), 1,
                "torch-fp32"),
    "alibi": (dict(causal="bottom_right",
                   score="score - buffer<f32>(slopes)[head] * "
                   "cast<f32>(abs(aligned_q_idx(bottom_right) - kv_idx))"),
              1, "torch-fp32"),
}


def _layout_case(gen, lens, page, shared):
    """Page ids per sequence: shuffled, sequence 1 starting with the first
    ``shared`` pages of sequence 0 (a shared prefix), one spare page."""
    own = [(n + page - 1) // page for n in lens]
    fresh = [own[0]] + [max(0, c - (shared if b == 1 else 0))
                        for b, c in enumerate(own) if b > 0]
    pages = sum(fresh) + 1
    order = torch.randperm(pages, generator=gen).tolist()
    owned, at = [], 0
    for b, cnt in enumerate(fresh):
        ids = order[at:at + cnt]
        at += cnt
        if b == 1:
            ids = owned[0][:shared] + ids
        owned.append(ids)
    return pages, owned


def _tables(layout, lens, owned, page, device):
    i32 = dict(dtype=torch.int32, device=device)
    if layout == "csr":
        return dict(
            kv_indptr=torch.tensor(
                np.cumsum([0] + [len(p) for p in owned]).tolist(), **i32),
            kv_indices=torch.tensor(sum(owned, []), **i32),
            kv_last_page_len=torch.tensor(
                [(n - 1) % page + 1 if n else 0 for n in lens], **i32))
    return dict(block_table=_block_table(owned, len(lens), device),
                seq_lens=torch.tensor(lens, **i32))


def _block_table(owned, batch, device, fill=-1):
    width = max(1, max(len(p) for p in owned))
    bt = torch.full((batch, width), fill, dtype=torch.int32, device=device)
    for b, p in enumerate(owned):
        if p:
            bt[b, :len(p)] = torch.tensor(p, dtype=torch.int32)
    return bt


def _positions(n, q_len, device):
    """Query positions (bottom-right: the last q_len of n) and key indices."""
    p = torch.arange(n - q_len, n, device=device).view(q_len, 1)
    j = torch.arange(n, device=device).view(1, n)
    return p, j


def _allowed(variant, n, q_len, device):
    p, j = _positions(n, q_len, device)
    if variant == "dense":
        return torch.ones(q_len, n, dtype=torch.bool, device=device)
    if variant == "window":
        return (j >= p - WINDOW) & (j <= p)
    return j <= p


def _modify(variant, s, n, q_len, slopes):
    """The score modifier on scaled scores s [H, q_len, n] (any float)."""
    if variant == "softcap":
        return CAP * torch.tanh(s / CAP)
    if variant == "alibi":
        p, j = _positions(n, q_len, s.device)
        return s - slopes.to(s.dtype).view(-1, 1, 1) * (p - j).abs().to(
            s.dtype)
    return s


def _oracle(variant, q, k, v, n, slopes, scale):
    """float64 O [H, q_len, D], LSE [H, q_len] of one sequence: q [H, q_len,
    D], k/v [H, n, D] (heads already repeated)."""
    q_len = q.shape[1]
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    s = _modify(variant, s, n, q_len, slopes)
    s = s.masked_fill(~_allowed(variant, n, q_len, q.device), -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return p @ v.double(), lse


def _torch_fp32(variant, q, k, v, n, slopes, scale):
    """A flash kernel's arithmetic in torch: bf16 inputs, fp32 scores and
    softmax, P rounded to the input dtype before P @ V (fp32 accumulate),
    O rounded to it."""
    q_len = q.shape[1]
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    s = _modify(variant, s, n, q_len, slopes)
    s = s.masked_fill(~_allowed(variant, n, q_len, q.device), -math.inf)
    m = s.amax(-1, keepdim=True)
    p = torch.exp(s - m)
    o = (p.to(v.dtype).float() @ v.float()) / p.sum(-1, keepdim=True)
    return o.to(v.dtype)


def _sdpa(variant, q, k, v, n):
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    q_len = q.shape[1]
    if variant == "dense":
        return sdpa(q[None], k[None], v[None])[0]
    if variant == "causal":
        from torch.nn.attention.bias import causal_lower_right
        return sdpa(q[None], k[None], v[None],
                    attn_mask=causal_lower_right(q_len, n))[0]
    return sdpa(q[None], k[None], v[None],
                attn_mask=_allowed(variant, n, q_len, q.device))[0]


def _fa4():
    """flash_attn.cute's varlen entry point on an sm_90 GPU, else None."""
    if not torch.cuda.is_available() or \
            torch.cuda.get_device_capability(0) != (9, 0):
        return None
    try:
        from flash_attn.cute import flash_attn_varlen_func
    except Exception:  # not installed, or its CuTe DSL does not load
        return None
    return flash_attn_varlen_func


def _fa4_run(fa4, variant, q, kc, vc, owned, lens, device):
    """FA4's paged forward: q [B, Hq, q_len, D] -> O [B, Hq, q_len, D], or
    None where the variant is not one FA4 takes as an argument."""
    kw = {}
    if variant == "causal" or variant == "softcap":
        kw["causal"] = True
    if variant == "window":
        kw["window_size"] = (WINDOW, 0)
    if variant == "softcap":
        kw["softcap"] = CAP
    if variant == "alibi":
        return None  # a CuTe score_mod, not an argument
    bt = _block_table(owned, len(lens), device, fill=0)
    used = torch.tensor(lens, dtype=torch.int32, device=device)
    out = fa4(q.transpose(1, 2).contiguous(), kc, vc, page_table=bt,
              seqused_k=used, **kw)
    out = out[0] if isinstance(out, tuple) else out
    return out.transpose(1, 2)


def _maxerr(got, want):
    """max |got - want| in float64; inf if got holds NaN (max() would
    skip it)."""
    d = (got.double() - want).abs()
    return math.inf if bool(d.isnan().any()) else float(d.max())


def run_case(device, target, variant, layout, page, hq, hk, d, lens,
             shared=1, seed=None):
    """Runs one case and checks the rule; returns the errors by name."""
    spec_kw, q_len, peer = VARIANTS[variant]
    gen = torch.Generator().manual_seed(
        int(seed if seed is not None else ref.rng().integers(2**31)))
    dt = torch.bfloat16
    pages, owned = _layout_case(gen, lens, page, shared)
    # Keys/values of each sequence (sequence 1's shared prefix equals
    # sequence 0's), written into a [pages, page_size, hk, d] cache (the
    # FlashInfer/vLLM layout) that is NaN everywhere else.
    kc = torch.full((pages, page, hk, d), float("nan"), dtype=dt)
    vc = torch.full((pages, page, hk, d), float("nan"), dtype=dt)
    keys, vals = [], []
    for b, n in enumerate(lens):
        k = (1.5 * torch.randn(n, hk, d, generator=gen)).to(dt)
        v = (1.5 * torch.randn(n, hk, d, generator=gen)).to(dt)
        if b == 1:
            m = min(n, shared * page, lens[0])
            k[:m], v[:m] = keys[0][:m], vals[0][:m]
        for t in range(n):
            kc[owned[b][t // page], t % page] = k[t]
            vc[owned[b][t // page], t % page] = v[t]
        keys.append(k)
        vals.append(v)
    if shared and len(lens) > 1 and lens[1]:
        assert owned[1][0] == owned[0][0]  # the prefix page is shared
    q = (1.5 * torch.randn(len(lens), hq, q_len, d, generator=gen)).to(dt)
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / hq) for h in range(hq)],
                          dtype=torch.float32)
    kc, vc, q, slopes = (x.to(device) for x in (kc, vc, q, slopes))

    kernel = flashjit.compile(target=target, varlen=target == "cpu",
                              head_dim=d, dtype="bf16", heads_q=hq,
                              heads_kv=hk, **spec_kw)
    buffers = {"slopes": slopes} if variant == "alibi" else None
    o, lse = kernel.run_paged(q, kc.permute(0, 2, 1, 3),
                              vc.permute(0, 2, 1, 3), buffers=buffers,
                              **_tables(layout, lens, owned, page, device))
    fa4 = _fa4() if device == "cuda" else None
    o_fa4 = None
    if fa4:
        try:
            o_fa4 = _fa4_run(fa4, variant, q, kc, vc, owned, lens, device)
        except Exception as e:  # noqa: BLE001 - a peer's refusal is news,
            # not a flashjit failure
            print(f"FA4 {variant} page {page}: {type(e).__name__}: "
                  f"{str(e)[:200]}")

    scale = float(np.float32(1 / np.sqrt(np.float32(d))))
    group = hq // hk
    err = {"flashjit": 0.0, peer: 0.0, "lse": 0.0}
    if o_fa4 is not None:
        err["fa4"] = 0.0
    for b, n in enumerate(lens):
        if n == 0:
            assert torch.all(o[b] == 0), "a sequence without keys: O = 0"
            assert torch.all(lse[b] == -math.inf), "... and LSE = -inf"
            continue
        kb = keys[b].to(device).transpose(0, 1).repeat_interleave(group, 0)
        vb = vals[b].to(device).transpose(0, 1).repeat_interleave(group, 0)
        want, want_lse = _oracle(variant, q[b], kb, vb, n, slopes, scale)
        got = (_sdpa(variant, q[b], kb, vb, n) if peer == "sdpa" else
               _torch_fp32(variant, q[b], kb, vb, n, slopes, scale))
        assert got.dtype == dt
        err["flashjit"] = max(err["flashjit"], _maxerr(o[b], want))
        err[peer] = max(err[peer], _maxerr(got, want))
        assert bool(torch.isfinite(lse[b]).all()), f"LSE of sequence {b}"
        err["lse"] = max(err["lse"], float(
            ((lse[b].double() - want_lse).abs() /
             (1 + want_lse.abs())).max()))
        if o_fa4 is not None:
            err["fa4"] = max(err["fa4"], _maxerr(o_fa4[b], want))
    print(f"DECODE-VS-TORCH {device} {variant:7s} {layout:11s} page {page:<2d}"
          f" {hq}/{hk} lens {lens}: max |O - O_fp64| "
          + " ".join(f"{k} {v:.3g}" for k, v in err.items()))
    assert bool(torch.isfinite(o).all()), "flashjit's O holds NaN/inf"
    assert math.isfinite(err[peer]), f"{peer}'s O holds NaN/inf"
    assert err["flashjit"] <= 2 * err[peer] + FLOOR, (
        f"flashjit {err['flashjit']:.3g} > 2 * {peer} {err[peer]:.3g} "
        f"+ {FLOOR}")
    assert err["lse"] <= 1e-4, f"LSE relative error {err['lse']:.3g}"
    return err


CASES = [(v, hk) for v in VARIANTS for hk in (8,)] + [("dense", 1),
                                                    ("causal", 1)]


@pytest.mark.parametrize("layout,page", [("csr", 16), ("block_table", 64),
                                         ("csr", 64), ("block_table", 16)])
@pytest.mark.parametrize("variant,hk", CASES)
def test_cuda_decode_matches_torch_on_gathered_pages(variant, hk, layout,
                                                     page):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    major, minor = torch.cuda.get_device_capability(0)
    target = "sm_90a" if (major, minor) == (9, 0) else "sm_80"
    # Lengths: a long one, one sharing its first page, two short ones (17
    # keys: within one page of 16 plus one), an empty one.
    lens = [1537, 300 + page // 2, 64, 17, 0]
    run_case("cuda", target, variant, layout, page, 32, hk, 128, lens)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cpu_decode_matches_torch_on_gathered_pages(variant):
    # The same harness on flashjit's CPU decode and torch's CPU kernels
    # (small: GQA 8/2, head_dim 64, pages of 16).
    layout = "csr" if variant in ("dense", "window", "alibi") else \
        "block_table"
    run_case("cpu", "cpu", variant, layout, 16, 8, 2, 64, [333, 40, 5, 0])


def test_decode_peers_dry_run(capsys):
    # bench/decode_peers.py's own logic on the CPU (no timing): each peer's
    # output against its fp32 reference, FA4's page-table construction
    # through a torch stand-in for flash_attn_varlen_func.
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "bench",
                        "decode_peers.py")
    spec = importlib.util.spec_from_file_location("decode_peers", path)
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    assert peers.main(["--dry-run", "--impls", "fa2,fa4"]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("PEER ")]
    assert len(rows) == 6, out  # (FA2, FA4 contiguous, FA4 page 64) x 2
    assert all(" err " in ln and "MISMATCH" not in ln for ln in rows), out
