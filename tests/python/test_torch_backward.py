"""flashjit's gradients through torch autograd against torch's own, on the
same inputs (issue 15 section 2; skipped without torch: CI has none, the
GPU machine's `python` step of scripts/gpu-check.sh runs it).

One training step of ``flashjit.attention`` (the package's custom op:
forward, then ``flashjit_run_backward`` through autograd) and of torch's
kernels on identical 16-bit inputs (CUDA: bf16) is compared with float64
torch autograd of the variant's formula on those inputs: O, dQ, dK, dV and,
for ALiBi, d slopes. FlashAttention's test rule: flashjit's max |error|
must be at most 2x torch's own max |error| against the same reference,
plus a small absolute floor, FLOOR[dtype] x max |reference| of that tensor
(bf16: 2^-10, a quarter of bf16's unit roundoff; d slopes: the same factor
times the slope sum's condition, sum over the pairs of |dS_ij| |i - j|,
since the sum cancels). torch's own, per variant:

- dense and causal: sdpa with the FLASH_ATTENTION (FlashAttention-2) and
  CUDNN_ATTENTION backends, each separately (a backend without a kernel for
  the shape is reported and left out; at least one must run);
- causal softcap under a sliding window, and ALiBi (slope gradients) under
  a causal document mask: compiled ``flex_attention`` (torch.compile) and
  its backward.

The buffers the package allocates (O, LSE, dQ, dK, dV, the slope gradient)
are NaN-poisoned first (``flashjit._api._empty`` patched), so a value the
kernels fail to write is caught. Inputs are fresh random ones (seeded by
FLASHJIT_TEST_SEED or the time); odd lengths (77, 200, 777, 1000), GQA and
head dims 32 .. 256.

Without CUDA, on the CPU (fp32 flashjit kernels), the same comparison runs
with torch's fp32 eager computation as torch's own: sdpa's MATH backend for
dense and causal, the variant's formula in fp32 for the others
(FlexAttention has no CPU backward); lengths are capped at CPU_MAX_LEN.
"""

import math

import pytest

torch = pytest.importorskip("torch")

import flashjit  # noqa: E402
import reference  # noqa: E402
from flashjit import _api, _capi  # noqa: E402

HAVE_BACKWARD = _capi.default_library().has("flashjit_run_backward")
# The CPU comparison runs where CUDA does not (the GPU machine's time goes
# to the CUDA one; tests/python/test_torch.py covers CPU autograd there).
DEVICES = ["cuda"] if torch.cuda.is_available() else ["cpu"]
CAP = 30.0
WINDOW = 64  # q - kv in [0, WINDOW)
CPU_MAX_LEN = 131  # sequence lengths on the CPU are capped here
# The absolute floor of the 2x rule, relative to max |reference| (d slopes:
# to the slope sum's condition): a quarter of the unit roundoff of bf16
# (2^-8) and fp16 (2^-11); fp32 (the CPU path): 16 of its unit roundoff
# 2^-24, the size of its sums' rounding over ~100 keys.
FLOOR = {torch.bfloat16: 2.0 ** -10, torch.float16: 2.0 ** -13,
         torch.float32: 2.0 ** -20}

GEN = torch.Generator(device="cpu").manual_seed(
    int(reference.rng().integers(2**31)))

# (variant, batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim)
CASES = [
    ("dense", 2, 6, 2, 77, 200, 32),
    ("causal", 1, 4, 2, 1000, 1000, 128),
    ("dense", 1, 2, 1, 200, 77, 64),
    ("causal", 2, 2, 2, 200, 200, 256),
    ("softcap_window", 1, 4, 2, 1000, 1000, 64),
    # sm_90a: the wgmma backward whose score_grad reads s' recovered from P.
    ("softcap_window", 1, 4, 2, 1000, 1000, 128),
    ("alibi_doc", 2, 6, 2, 777, 777, 128),
]
SDPA = ("dense", "causal")


def _id(case):
    v, b, hq, hkv, sq, sk, d = case
    return f"{v}-b{b}-h{hq}x{hkv}-{sq}x{sk}-d{d}"


def flashjit_keywords(variant):
    """flashjit.attention's mask / score / causal keywords of ``variant``
    (buffers "slopes", f32 [Hq], and "doc", i32 [N], for alibi_doc)."""
    return {
        "dense": {},
        "causal": {"causal": "top_left"},
        "softcap_window": {"mask": f"sliding_window({WINDOW - 1}, 0, "
                                   f"top_left)",
                           "score": f"softcap({CAP})"},
        "alibi_doc": {"mask": "buffer<i32>(doc)[q_idx] == "
                              "buffer<i32>(doc)[kv_idx]",
                      "causal": "top_left", "score": "alibi(slopes)"},
    }[variant]


def allowed(variant, i, j, doc):
    """Whether query i may see key j (broadcast index tensors): the one
    predicate of the reference, Flex's mask_mod and the fp32 peer."""
    if variant == "dense":
        return i >= 0
    causal = j <= i
    if variant == "causal":
        return causal
    if variant == "softcap_window":
        return causal & (i - j < WINDOW)
    return causal & (doc[i] == doc[j])


class Inputs:
    """q, k, v, dO [B, H, S, D] of ``dtype`` on ``device``; ALiBi slopes
    (f32 [Hq]) and document ids (i32 [S]) for alibi_doc."""

    def __init__(self, case, device, dtype):
        self.variant, b, hq, hkv, sq, sk, d = case
        self.hq, self.hkv, self.sq, self.sk, self.d = hq, hkv, sq, sk, d

        def rnd(*shape):
            return torch.randn(*shape, generator=GEN).to(device, dtype)
        self.q, self.k, self.v = rnd(b, hq, sq, d), rnd(b, hkv, sk, d), \
            rnd(b, hkv, sk, d)
        self.d_o = rnd(b, hq, sq, d)
        self.slopes = self.doc = None
        if self.variant == "alibi_doc":
            self.slopes = (2.0 ** (-8.0 * (torch.arange(hq) + 1) / hq)).to(
                device, torch.float32)
            # Documents of random lengths (>= 1 token) covering the sequence.
            cuts = torch.randperm(sq - 1, generator=GEN)[:5] + 1
            ids = torch.zeros(sq, dtype=torch.int32)
            ids[cuts] = 1
            self.doc = ids.cumsum(0).to(torch.int32).to(device)


def formula(x, dtype, slopes_grad=True):
    """O, dQ, dK, dV and (alibi_doc) d slopes and its condition of the
    variant's formula computed by torch autograd in ``dtype`` (float64: the
    reference) on the inputs ``x``."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in (x.q, x.k, x.v)]
    q, k, v = leaves
    g = x.hq // x.hkv
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = float(torch.tensor(1.0 / math.sqrt(x.d), dtype=torch.float32))
    s = (q @ k.transpose(-1, -2)) * scale
    i = torch.arange(x.sq, device=q.device)[:, None]
    j = torch.arange(x.sk, device=q.device)[None, :]
    slope = dist = None
    if x.variant == "softcap_window":
        s = CAP * torch.tanh(s / CAP)
    if x.variant == "alibi_doc":
        slope = x.slopes.detach().to(dtype).requires_grad_(slopes_grad)
        dist = (i - j).abs().to(dtype)
        s = s - slope[None, :, None, None] * dist
        if slopes_grad:
            leaves.append(slope)
    z = s.masked_fill(~allowed(x.variant, i, j, x.doc), float("-inf"))
    o = torch.softmax(z, -1) @ v
    if slope is not None and dtype == torch.float64:
        grads = torch.autograd.grad(o, leaves + [s], x.d_o.to(dtype))
        cond = (grads[-1].abs() * dist).sum(dim=(0, 2, 3)).max().item()
        return [o.detach()] + list(grads[:-1]), cond
    return [o.detach()] + list(torch.autograd.grad(o, leaves,
                                                   x.d_o.to(dtype))), None


def run_flashjit(x, monkeypatch):
    """O and the gradients of flashjit's custom op through autograd, every
    buffer the package allocates NaN-poisoned; also how many it
    allocated."""
    allocated = []
    plain = _api._empty

    def poisoned(*args, **kwargs):
        t = plain(*args, **kwargs)
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            t.fill_(float("nan"))
        allocated.append(tuple(t.shape))
        return t

    monkeypatch.setattr(_api, "_empty", poisoned)
    leaves = [t.detach().clone().requires_grad_() for t in (x.q, x.k, x.v)]
    buffers = {}
    if x.slopes is not None:
        buffers["slopes"] = x.slopes.detach().clone().requires_grad_()
        buffers["doc"] = x.doc
        leaves.append(buffers["slopes"])
    o = flashjit.attention(*leaves[:3], buffers=buffers or None,
                           **flashjit_keywords(x.variant))
    grads = torch.autograd.grad(o, leaves, x.d_o)
    monkeypatch.setattr(_api, "_empty", plain)
    return [o.detach()] + list(grads), allocated


def run_sdpa(x, backend):
    """O, dQ, dK, dV of torch sdpa with ``backend`` (GQA: K and V heads
    repeated in the graph, their gradients summed by autograd)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    leaves = [t.detach().clone().requires_grad_() for t in (x.q, x.k, x.v)]
    q, k, v = leaves
    g = x.hq // x.hkv
    with sdpa_kernel(getattr(SDPBackend, backend)):
        o = torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1),
            is_causal=x.variant == "causal")
        grads = torch.autograd.grad(o, leaves, x.d_o)
    return [o.detach()] + list(grads)


_FLEX = {}


def run_flex(x):
    """O and the gradients (d slopes too) of compiled flex_attention."""
    from torch.nn.attention.flex_attention import (create_block_mask,
                                                   flex_attention)
    if "fn" not in _FLEX:
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    leaves = [t.detach().clone().requires_grad_() for t in (x.q, x.k, x.v)]
    doc, variant = x.doc, x.variant

    def mask_mod(b, h, i, j):
        return allowed(variant, i, j, doc)
    block_mask = create_block_mask(mask_mod, None, None, x.sq, x.sk,
                                   device=x.q.device.type)

    def softcap_mod(s, b, h, i, j):
        return CAP * torch.tanh(s / CAP)

    def alibi_mod(s, b, h, i, j):
        return s - slopes[h] * (i - j).abs()
    score_mod = softcap_mod
    if variant == "alibi_doc":
        slopes = x.slopes.detach().clone().requires_grad_()
        leaves.append(slopes)
        score_mod = alibi_mod
    o = _FLEX["fn"](*leaves[:3], score_mod=score_mod, block_mask=block_mask,
                    enable_gqa=x.hq != x.hkv)
    grads = torch.autograd.grad(o, leaves, x.d_o)
    return [o.detach()] + list(grads)


def max_error(got, want):
    """max |got - want| (inf where got has a NaN)."""
    err = (got.double() - want).abs()
    return math.inf if torch.isnan(err).any() else err.max().item()


@pytest.mark.skipif(not HAVE_BACKWARD,
                    reason="no flashjit_run_backward in the C library")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_gradients_within_twice_torchs_error(device, case, monkeypatch):
    if device == "cpu":
        # fp32 kernels; shorter sequences (the CPU kernels are slower).
        dtype = torch.float32
        v, b, hq, hkv, sq, sk, d = case
        case = (v, b, hq, hkv, min(sq, CPU_MAX_LEN), min(sk, CPU_MAX_LEN), d)
    else:
        dtype = torch.bfloat16
    x = Inputs(case, device, dtype)
    want, cond = formula(x, torch.float64)
    got, allocated = run_flashjit(x, monkeypatch)
    # O, LSE, dQ, dK, dV (and d slopes): all poisoned before the kernels.
    assert len(allocated) >= 5 + (x.slopes is not None), allocated

    peers, skipped = {}, {}
    if device == "cpu":
        if x.variant in SDPA:
            peers["sdpa MATH"] = run_sdpa(x, "MATH")
        else:
            peers["fp32 formula"] = formula(x, torch.float32)[0]
    elif x.variant in SDPA:
        for backend in ("FLASH_ATTENTION", "CUDNN_ATTENTION"):
            try:
                peers["sdpa " + backend] = run_sdpa(x, backend)
            except RuntimeError as e:  # no kernel for this shape
                skipped["sdpa " + backend] = str(e).splitlines()[0][:160]
    else:
        peers["compiled flex"] = run_flex(x)
    assert peers, f"no torch kernel ran: {skipped}"

    names = ["O", "dQ", "dK", "dV", "dslopes"][:len(want)]
    failures, lines = [], []
    for n, w, g in zip(names, want, got):
        floor = FLOOR[dtype] * (cond if n == "dslopes"
                                else w.abs().max().item())
        mine = max_error(g, w)
        own = {p: max_error(r[names.index(n)], w) for p, r in peers.items()}
        lines.append(f"{n}: flashjit {mine:.3g}; " + ", ".join(
            f"{p} {e:.3g}" for p, e in own.items()) + f"; floor {floor:.3g}")
        for p, e in own.items():
            if not mine <= 2 * e + floor:
                failures.append(f"{n}: flashjit {mine:.3g} > 2 x {p} "
                                f"{e:.3g} + {floor:.3g}")
    print(f"{_id(case)} {device}: " + " | ".join(lines)
          + (f" (not run: {skipped})" if skipped else ""))
    assert not failures, failures
