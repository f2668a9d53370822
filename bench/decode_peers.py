#!/usr/bin/env python3
"""Decode peers on the GPU machine, at the decode shapes of issue 17 (bf16,
D = 128, one query token; B = 8 / Nk = 32k, B = 1 / Nk = 128k, B = 64 /
Nk = 4k), for GQA 32/8 and MQA 32/1: TB/s of the K + V bytes of the KV
heads (B * Nk * heads_kv * 128 * 2 bytes * 2), median of
triton.testing.do_bench. flashjit's own rows come from the `[.decodebench]`
case of flashjit_gpu_tests (DECODE lines), in the same gpu-check call.

Peers (each skipped with a line saying why when it is not there):
- FA2: torch sdpa with the FLASH_ATTENTION backend (FlashAttention-2 as
  torch builds it), enable_gqa;
- cuDNN: sdpa with CUDNN_ATTENTION (for either: K/V heads repeated, once
  per shape, when the backend refuses enable_gqa; the bytes counted stay
  those of the KV heads; the row then says "(repeated K/V)");
- Flex: torch.compile(flex_attention) with enable_gqa and no block mask
  (its decode kernel for a short query);
- FA2-kvcache: flash_attn.flash_attn_with_kvcache (num_splits = 0, its
  heuristic), only where the FlashAttention-2 package imports;
- FA4: flash_attn.cute.flash_attn_varlen_func (FlashAttention-4; on sm_90
  it takes seqused_k and a page table but has no split-KV, so one CTA per
  (sequence, KV head)), contiguous and paged (page_table of 64-token
  pages), only where flash_attn.cute imports (../shared/tools/fa4-pack.sh).

Each peer's first output is checked against an fp32 reference on the first
sequence (max abs error <= 2e-2); a mismatch prints MISMATCH and makes the
exit status 1. Prints one line per (shape, peer):
  PEER <name> B=.. Nk=.. h=32/8 <layout> <ms> ms <TB/s> TB/s [err ..]

  decode_peers.py [--impls fa2,cudnn,flex,fa2kv,fa4] [--heads 8,1]
                  [--shapes 8x32768,1x131072,64x4096]
  decode_peers.py --dry-run   # CPU, tiny shapes, no timing: checks the
                              # script's logic (FA4 simulated in torch)
"""
import argparse
import math
import sys

IMPLS = ["fa2", "cudnn", "flex", "fa2kv", "fa4"]
SHAPES = [(8, 32768), (1, 131072), (64, 4096)]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--heads", default="8,1",
                    help="KV head counts (32 query heads): 8 = GQA, 1 = MQA")
    ap.add_argument("--shapes", default=",".join(f"{b}x{n}"
                                                 for b, n in SHAPES),
                    help="BxNk,...")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU, tiny shapes, no timing")
    a = ap.parse_args(argv)
    a.impls = [x for x in a.impls.split(",") if x]
    bad = [x for x in a.impls if x not in IMPLS]
    if bad:
        ap.error(f"--impls: unknown {bad}, known {IMPLS}")
    a.heads = [int(x) for x in a.heads.split(",") if x]
    a.shapes = [tuple(int(y) for y in x.split("x"))
                for x in a.shapes.split(",") if x]
    return a


def peer_fns(torch, impls, device, dry):
    """name -> fn(q [B, Hq, 1, D], k, v [B, Hkv, Nk, D]) -> O [B, Hq, 1, D]
    (or a list of (label, fn) for peers with several layouts); names not
    available map to a reason string."""
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    from torch.nn.attention import SDPBackend, sdpa_kernel
    fns = {}

    def sdpa_with(backend):
        # enable_gqa where the backend takes it, else K/V heads repeated
        # once per shape (outside the timed call).
        memo = {}

        def run(q, k, v):
            key = (k.data_ptr(), v.data_ptr(), tuple(k.shape))
            with sdpa_kernel(backend):
                if key not in memo:
                    try:
                        out = sdpa(q, k, v, enable_gqa=True)
                        memo.clear()
                        memo[key] = None
                        return out
                    except RuntimeError:
                        g = q.shape[1] // k.shape[1]
                        memo.clear()
                        memo[key] = (k.repeat_interleave(g, 1),
                                     v.repeat_interleave(g, 1))
                if memo[key] is None:
                    return sdpa(q, k, v, enable_gqa=True)
                return sdpa(q, *memo[key])
        run.repeated = lambda: any(x is not None for x in memo.values())
        return run

    if "fa2" in impls:
        fns["FA2"] = sdpa_with(SDPBackend.MATH if dry else
                               SDPBackend.FLASH_ATTENTION)
    if "cudnn" in impls:
        fns["cuDNN"] = "not on the CPU" if dry else sdpa_with(
            SDPBackend.CUDNN_ATTENTION)
    if "flex" in impls:
        try:
            from torch.nn.attention.flex_attention import flex_attention
            torch._dynamo.config.recompile_limit = 1000
            flex = flex_attention if dry else torch.compile(flex_attention)
            fns["Flex"] = lambda q, k, v: flex(q, k, v, enable_gqa=True)
        except Exception as e:  # noqa: BLE001 - any import failure
            fns["Flex"] = f"unavailable: {e}"
    if "fa2kv" in impls:
        try:
            from flash_attn import flash_attn_with_kvcache

            def fa2kv(q, k, v):
                lens = _lens(torch, q.shape[0], k.shape[2], q.device)
                return flash_attn_with_kvcache(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                    cache_seqlens=lens, num_splits=0).transpose(1, 2)
            fns["FA2-kvcache"] = fa2kv
        except Exception as e:  # noqa: BLE001
            fns["FA2-kvcache"] = ("flash_attn.flash_attn_with_kvcache does "
                                  f"not import ({type(e).__name__})")
    if "fa4" in impls:
        try:
            if dry:
                fa4 = fa4_simulated(torch)  # the paging logic, on the CPU
            elif torch.cuda.get_device_capability(0)[0] < 9:
                raise RuntimeError("needs an sm_90+ GPU")
            else:
                from flash_attn.cute import flash_attn_varlen_func as fa4
            fns["FA4"] = [("contiguous", fa4_contiguous(torch, fa4)),
                          ("page 64", fa4_paged(torch, fa4, 64))]
        except Exception as e:  # noqa: BLE001
            fns["FA4"] = f"unavailable: {type(e).__name__}: {e}"[:120]
    return fns


_LENS = {}


def _lens(torch, b, nk, device):
    """seqused_k / cache_seqlens: int32 [b] of nk, made once per shape."""
    key = (b, nk, str(device))
    if key not in _LENS:
        _LENS[key] = torch.full((b,), nk, dtype=torch.int32, device=device)
    return _LENS[key]


def fa4_simulated(torch):
    """flash_attn_varlen_func's contract for this script's calls, in torch
    (--dry-run: checks the layouts and the page table built below)."""
    def fa4(q, k, v, page_table=None, seqused_k=None):
        b = q.shape[0]
        if page_table is not None:
            k = k[page_table.long()].reshape(b, -1, *k.shape[2:])
            v = v[page_table.long()].reshape(b, -1, *v.shape[2:])
        n = int(seqused_k.max())
        g = q.shape[2] // k.shape[2]
        s = torch.einsum("bqhd,bkhd->bhqk", q.float(),
                         k[:, :n].float().repeat_interleave(g, 2))
        p = torch.softmax(s / math.sqrt(q.shape[-1]), -1)
        o = torch.einsum("bhqk,bkhd->bqhd", p,
                         v[:, :n].float().repeat_interleave(g, 2))
        return o.to(q.dtype), None
    return fa4


def fa4_contiguous(torch, fa4):
    """FA4 over a [B, Nk, Hkv, D] copy of k/v (its own layout), made once
    per shape and reused."""
    memo = {}

    def run(q, k, v):
        key = (k.data_ptr(), v.data_ptr(), tuple(k.shape))
        if key not in memo:
            memo.clear()
            memo[key] = (k.transpose(1, 2).contiguous(),
                         v.transpose(1, 2).contiguous())
        kt, vt = memo[key]
        lens = _lens(torch, q.shape[0], k.shape[2], q.device)
        out = fa4(q.transpose(1, 2), kt, vt, seqused_k=lens)
        return (out[0] if isinstance(out, tuple) else out).transpose(1, 2)
    return run


def fa4_paged(torch, fa4, page):
    """FA4 over a paged copy of k/v ([pages, page, Hkv, D], pages shuffled,
    block table + seqused_k), made once per shape and reused."""
    memo = {}

    def run(q, k, v):
        key = (k.data_ptr(), v.data_ptr(), tuple(k.shape))
        if key not in memo:
            memo.clear()
            b, hk, nk, d = k.shape
            per = nk // page
            perm = torch.randperm(b * per, device=k.device)
            kc = torch.empty(b * per, page, hk, d, dtype=k.dtype,
                             device=k.device)
            vc = torch.empty_like(kc)
            kc[perm] = k.transpose(1, 2).reshape(b * per, page, hk, d)
            vc[perm] = v.transpose(1, 2).reshape(b * per, page, hk, d)
            table = perm.view(b, per).to(torch.int32)
            lens = _lens(torch, b, nk, k.device)
            memo[key] = (kc, vc, table, lens)
        kc, vc, table, lens = memo[key]
        out = fa4(q.transpose(1, 2), kc, vc, page_table=table,
                  seqused_k=lens)
        return (out[0] if isinstance(out, tuple) else out).transpose(1, 2)
    return run


def reference(torch, q, k, v):
    """fp32 attention of the first sequence: [Hq, 1, D]."""
    g = q.shape[1] // k.shape[1]
    qf = q[0].float()
    kf = k[0].float().repeat_interleave(g, 0)
    vf = v[0].float().repeat_interleave(g, 0)
    s = (qf @ kf.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.softmax(s, -1) @ vf


def main(argv=None):
    a = parse_args(argv if argv is not None else sys.argv[1:])
    import torch
    dry = a.dry_run
    if not dry and not torch.cuda.is_available():
        print("decode_peers: no CUDA device (use --dry-run)")
        return 2
    device = "cpu" if dry else "cuda"
    shapes = [(2, 256)] if dry else a.shapes
    fns = peer_fns(torch, a.impls, device, dry)
    for name, f in fns.items():
        if isinstance(f, str):
            print(f"PEER {name:11s} skipped: {f}", flush=True)
    bench = None
    if not dry:
        import triton.testing
        bench = triton.testing.do_bench
    failed = 0
    gen = torch.Generator(device=device).manual_seed(1)
    for hk in a.heads:
        for b, nk in shapes:
            q = torch.randn(b, 32, 1, 128, device=device, generator=gen,
                            dtype=torch.bfloat16)
            k = torch.randn(b, hk, nk, 128, device=device, generator=gen,
                            dtype=torch.bfloat16)
            v = torch.randn(b, hk, nk, 128, device=device, generator=gen,
                            dtype=torch.bfloat16)
            want = reference(torch, q, k, v)
            kv_bytes = b * nk * hk * 128 * 2 * 2
            for name, f in fns.items():
                if isinstance(f, str):
                    continue
                for label, fn in (f if isinstance(f, list)
                                  else [("contiguous", f)]):
                    head = (f"PEER {name:11s} B={b:<3d} Nk={nk:<6d} "
                            f"h=32/{hk} {label:10s}")
                    try:
                        err = float((fn(q, k, v)[0].float() - want).abs()
                                    .max())
                        ok = err <= 2e-2
                        failed += not ok
                        tail = f"err {err:.2g}" + ("" if ok else " MISMATCH")
                        if getattr(fn, "repeated", lambda: False)():
                            tail += " (repeated K/V)"
                        if dry:
                            print(f"{head} {tail}", flush=True)
                            continue
                        ms = bench(lambda: fn(q, k, v), return_mode="median")
                        print(f"{head} {ms:8.3f} ms "
                              f"{kv_bytes / (ms * 1e-3) / 1e12:6.2f} TB/s "
                              f"{tail}", flush=True)
                    except Exception as e:  # noqa: BLE001 - refused shape
                        why = (str(e).splitlines() or [type(e).__name__])[0]
                        print(f"{head} unavailable: {why[:100]}", flush=True)
            del q, k, v
            if not dry:
                torch.cuda.empty_cache()
    print("decode_peers: " + (f"MISMATCH in {failed} rows" if failed else
                              "all checked rows match the fp32 reference"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
