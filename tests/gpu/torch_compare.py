#!/usr/bin/env python3
"""flashjit kernels vs torch on identical inputs, in one process, through
the C API (python/flashjit_ctypes.py over libflashjit_c_runtime.so).

  torch_compare.py --list-specs          # the spec texts to bundle (no torch)
  torch_compare.py --lib LIB --bundle DIR [--json OUT]   # on a GPU machine

For every variant (dense, causal top-left and bottom-right, sliding window +
soft-cap with a run-time parameter, ALiBi with a slope buffer, a document
mask with a doc_id buffer, prefix-LM), head dim 64/128/256, fp16/bf16 and
several shapes (odd, unequal seqlens, empty rows, GQA 8/2, a [B, S, H, D]
storage layout): the bundled kernel runs on torch tensors, and its O and LSE
are checked against a float64 torch oracle (the README semantics, written
here with plain torch ops) at the project's tolerances; the peer
(sdpa FLASH_ATTENTION for dense/causal, compiled flex_attention for the
rest, where compiled) runs on the same inputs, and its error against the
oracle is printed beside ours. O and LSE are NaN-poisoned before each run.
Exit status 0 iff every flashjit check passed.
"""

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "python"))

HEADS_Q, HEADS_KV = 8, 2
WINDOW, PREFIX = 256, 100
# (batch, seqlen_q, seqlen_k); the first shape also runs with a
# [batch, seqlen, heads, head_dim] storage layout.
SHAPES = [(2, 1000, 1000), (1, 77, 1100), (2, 300, 40), (3, 1, 513)]

VARIANTS = {
    # name: (spec fields, peer)
    "dense": ("", "sdpa"),
    "causal": ("causal=top_left", "sdpa"),
    "causal_br": ("causal=bottom_right", "flex"),
    "swa_softcap": ("mask=((q_idx >= kv_idx) && ((q_idx - kv_idx) < "
                    f"{WINDOW})), score=(param<f32>(cap) * tanh((score / "
                    "param<f32>(cap))))", "flex"),
    "alibi": ("score=(score - (buffer<f32>(slope)[head] * "
              "cast<f32>(abs((q_idx - kv_idx)))))", "flex"),
    "document": ("mask=((buffer<i32>(doc_id)[q_idx] == "
                 "buffer<i32>(doc_id)[kv_idx]) && (kv_idx <= q_idx))",
                 "flex"),
    "prefix_lm": (f"mask=((kv_idx <= q_idx) || (kv_idx < {PREFIX}))", "flex"),
}
HEAD_DIMS = [64, 128, 256]
DTYPES = ["bf16", "fp16"]
# |x - ref| <= atol + rtol * |ref| (O), as in the C++ tests.
TOL = {"bf16": (1e-2, 1e-2), "fp16": (2e-3, 2e-3)}
LSE_TOL = (1e-3, 1e-5)


def spec_text(variant, d, dtype):
    fields = VARIANTS[variant][0]
    parts = [f"name={variant}_d{d}_{dtype}"]
    if fields:
        parts.append(fields)
    parts += [f"head_dim={d}", f"dtype={dtype}", f"heads_q={HEADS_Q}",
              f"heads_kv={HEADS_KV}"]
    return "attention(" + ", ".join(parts) + ")"


def all_specs():
    return [(v, d, t, spec_text(v, d, t)) for v in VARIANTS
            for d in HEAD_DIMS for t in DTYPES]


# ---------------------------------------------------------------- torch side
def make_case(torch, variant, shape, dtype, d, gen, bshd):
    b, sq, sk = shape
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    dev = "cuda"

    def rand(h, s):
        if bshd:  # stored [B, S, H, D], viewed as [B, H, S, D]
            x = torch.randn(b, s, h, d, generator=gen, device=dev)
            return (1.5 * x).to(tdt).transpose(1, 2)
        return (1.5 * torch.randn(b, h, s, d, generator=gen,
                                  device=dev)).to(tdt)

    q, k, v = rand(HEADS_Q, sq), rand(HEADS_KV, sk), rand(HEADS_KV, sk)
    args = {}
    if variant == "swa_softcap":
        args["cap"] = 5.0
    if variant == "alibi":
        args["slope"] = torch.tensor(
            [2.0 ** (-8.0 * (h + 1) / HEADS_Q) for h in range(HEADS_Q)],
            device=dev, dtype=torch.float32)
    if variant == "document":
        n = max(sq, sk)
        # Random document boundaries, including 1-token documents.
        cuts = torch.randint(0, 2, (n,), generator=gen, device=dev)
        cuts[torch.rand(n, generator=gen, device=dev) < 0.97] = 0
        cuts[min(5, n - 1)] = 1
        args["doc_id"] = torch.cumsum(cuts, 0).to(torch.int32)
    return q, k, v, args


def oracle(torch, variant, q, k, v, args, scale):
    """float64 attention per the README semantics; returns O, LSE."""
    b, hq, sq, d = q.shape
    sk = k.shape[2]
    rep = hq // k.shape[1]
    qd = q.double()
    kd = k.double().repeat_interleave(rep, 1)
    vd = v.double().repeat_interleave(rep, 1)
    s = (qd @ kd.transpose(-1, -2)) * scale
    qi = torch.arange(sq, device=q.device).view(sq, 1)
    ki = torch.arange(sk, device=q.device).view(1, sk)
    allowed = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if variant == "causal":
        allowed = ki <= qi
    elif variant == "causal_br":
        allowed = ki <= qi + (sk - sq)
    elif variant == "swa_softcap":
        allowed = (qi >= ki) & (qi - ki < WINDOW)
        cap = args["cap"]
        s = cap * torch.tanh(s / cap)
    elif variant == "alibi":
        slope = args["slope"].double().view(1, hq, 1, 1)
        s = s - slope * (qi - ki).abs().double()
    elif variant == "document":
        doc = args["doc_id"]
        allowed = (doc[:sq].view(sq, 1) == doc[:sk].view(1, sk)) & (ki <= qi)
    elif variant == "prefix_lm":
        allowed = (ki <= qi) | (ki < PREFIX)
    allowed = allowed.expand(b, hq, sq, sk)
    s = s.masked_fill(~allowed, -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse.unsqueeze(-1))
    p = torch.nan_to_num(p, nan=0.0)  # empty rows: O = 0, LSE = -inf
    return p @ vd, lse


def peer(torch, variant, q, k, v, args, scale, flex_fns):
    """The torch kernel people use for this variant (or None)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    b, hq, sq, d = q.shape
    sk = k.shape[2]
    rep = hq // k.shape[1]
    if VARIANTS[variant][1] == "sdpa":
        if variant == "causal" and sq != sk:
            return None, None, "-"  # sdpa's causal alignment differs by backend
        ke, ve = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            o = F.scaled_dot_product_attention(
                q, ke, ve, is_causal=variant == "causal", scale=scale)
        return o, None, "sdpa-flash"
    if flex_fns is None:
        return None, None, "-"
    flex, create_block_mask = flex_fns
    mask_mod, score_mod = None, None
    if variant == "causal_br":
        off = sk - sq
        mask_mod = lambda b_, h, qi, ki: ki <= qi + off  # noqa: E731
    elif variant == "swa_softcap":
        cap = args["cap"]
        mask_mod = lambda b_, h, qi, ki: (qi >= ki) & (qi - ki < WINDOW)  # noqa
        score_mod = lambda s, b_, h, qi, ki: cap * torch.tanh(s / cap)  # noqa
    elif variant == "alibi":
        slope = args["slope"]
        score_mod = lambda s, b_, h, qi, ki: s - slope[h] * (qi - ki).abs()  # noqa
    elif variant == "document":
        doc = args["doc_id"]
        mask_mod = lambda b_, h, qi, ki: (doc[qi] == doc[ki]) & (ki <= qi)  # noqa
    elif variant == "prefix_lm":
        mask_mod = lambda b_, h, qi, ki: (ki <= qi) | (ki < PREFIX)  # noqa
    bm = None
    if mask_mod is not None:
        bm = create_block_mask(mask_mod, None, None, sq, sk, device="cuda")
    o, lse = flex(q, k, v, score_mod=score_mod, block_mask=bm, scale=scale,
                  enable_gqa=True, return_lse=True)
    return o, lse, "flex-compiled"


def max_excess(x, ref, atol, rtol):
    """max(|x - ref| - atol - rtol |ref|) over finite refs (<= 0 passes), and
    max |x - ref|; infinite refs must match exactly."""
    import torch
    x = x.double()
    fin = torch.isfinite(ref)
    if not torch.equal(torch.isfinite(x), fin) or not torch.equal(
            x[~fin], ref[~fin]):
        return math.inf, math.inf
    if fin.sum() == 0:
        return -1.0, 0.0
    err = (x - ref).abs()[fin]
    return ((err - atol - rtol * ref.abs()[fin]).max().item(),
            err.max().item())


def run(lib_path, bundle, out_json):
    import torch
    import flashjit_ctypes as fj
    torch._dynamo.config.recompile_limit = 1000
    try:
        from torch.nn.attention.flex_attention import (create_block_mask,
                                                       flex_attention)
        flex_fns = (torch.compile(flex_attention), create_block_mask)
    except Exception as e:  # noqa: BLE001
        print(f"flex_attention unavailable: {e}")
        flex_fns = None
    lib = fj.Library(lib_path)
    seed = int(os.environ.get("FLASHJIT_TEST_SEED", time.time_ns() % 2**31))
    print(f"seed {seed} (FLASHJIT_TEST_SEED replays it)")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    arch = "sm_%d%d" % torch.cuda.get_device_capability()
    arch = "sm_90a" if arch == "sm_90" else arch
    rows, failures = [], 0
    for variant, d, dtype, text in all_specs():
        kernel = lib.load(bundle, text, arch)
        scale = 1.0 / math.sqrt(d)
        cases = [(s, False) for s in SHAPES] + [(SHAPES[0], True)]
        for shape, bshd in cases:
            q, k, v, args = make_case(torch, variant, shape, dtype, d, gen,
                                      bshd)
            b, sq, sk = shape
            o = torch.full((b, HEADS_Q, sq, d), float("nan"), device="cuda",
                           dtype=q.dtype)
            lse = torch.full((b, HEADS_Q, sq), float("nan"), device="cuda")
            stream = torch.cuda.current_stream().cuda_stream
            kernel.run(q, k, v, o, lse, args, stream)
            torch.cuda.synchronize()
            ref_o, ref_lse = oracle(torch, variant, q, k, v, args, scale)
            ex_o, err_o = max_excess(o, ref_o, *TOL[dtype])
            ex_l, err_l = max_excess(lse, ref_lse, *LSE_TOL)
            ok = ex_o <= 0 and ex_l <= 0
            failures += not ok
            # Compiled flex: bf16 and the first shape only (each new shape
            # and closure recompiles); sdpa everywhere it applies.
            use_peer = VARIANTS[variant][1] == "sdpa" or (
                dtype == "bf16" and shape == SHAPES[0] and not bshd)
            p_err, p_name = None, "-"
            if use_peer:
                try:
                    po, _plse, p_name = peer(torch, variant, q, k, v, args,
                                             scale, flex_fns)
                    if po is not None:
                        p_err = max_excess(po, ref_o, *TOL[dtype])[1]
                        diff = (po.double() - o.double()).abs().max().item()
                        p_name += f" (|ours-peer| {diff:.2e})"
                except Exception as e:  # noqa: BLE001
                    p_name = f"peer failed: {type(e).__name__}: {e}"[:120]
            rows.append(dict(variant=variant, d=d, dtype=dtype,
                             shape=list(shape), layout="bshd" if bshd else
                             "bhsd", err_o=err_o, err_lse=err_l, ok=ok,
                             peer=p_name, peer_err_o=p_err))
            print(f"{'ok  ' if ok else 'FAIL'} {variant:12s} d={d:3d} {dtype} "
                  f"B,Sq,Sk={shape} {'bshd' if bshd else 'bhsd'} "
                  f"|O-ref| {err_o:.2e} |LSE-ref| {err_l:.2e} peer "
                  f"{p_err if p_err is None else f'{p_err:.2e}'} {p_name}",
                  flush=True)
    print(f"\n{len(rows) - failures}/{len(rows)} cases passed "
          f"({len(all_specs())} bundled kernels, {arch}, through "
          f"{os.path.basename(lib_path)})")
    if out_json:
        with open(out_json, "w") as f:
            json.dump(dict(seed=seed, arch=arch, rows=rows), f, indent=1)
    return 0 if failures == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list-specs", action="store_true")
    ap.add_argument("--lib")
    ap.add_argument("--bundle")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.list_specs:
        for *_, text in all_specs():
            print(text)
        return 0
    if not a.lib or not a.bundle:
        ap.error("--lib and --bundle are required (or --list-specs)")
    return run(a.lib, a.bundle, a.json)


if __name__ == "__main__":
    sys.exit(main())
