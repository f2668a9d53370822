#!/usr/bin/env python3
"""Times flashjit's generated kernels beside FlashAttention-2 (torch sdpa
FLASH_ATTENTION), cuDNN (sdpa CUDNN_ATTENTION) and FlexAttention
(torch.compile(flex_attention)) on the same random bf16 inputs, on the GPU
machine. Kernels come as PTX from bench_kernels (made on the build machine:
the GPU machine has no MLIR); they are loaded with CuPy.

TF/s count only the (q, k) pairs the mask allows: 4 * B * H * N^2 * D * f.
Writes JSON, a markdown table and one PNG per head dim under --out.

  python3 bench/run_bench.py --kernels DIR --out DIR [--n 512,4096] [--d 128]

--backward: the training path (forward + backward) instead, flashjit through
its Python package beside the peers: bench/run_bwd_bench.py with the other
options (no --kernels).
"""
import argparse, ctypes, json, math, os, sys, time

if __name__ == "__main__" and "--backward" in sys.argv[1:]:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import run_bwd_bench
    sys.exit(run_bwd_bench.main([a for a in sys.argv[1:] if a != "--backward"]))

import numpy as np
import cupy as cp
import torch
import triton.testing as tt
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

LOG2E = 1.4426950408889634

ap = argparse.ArgumentParser()
ap.add_argument("--kernels", required=True)
ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/bench"))
ap.add_argument("--n", default="512,1024,2048,4096,8192,16384")
ap.add_argument("--d", default="64,128,256")
ap.add_argument("--variants", default="dense,causal,swa1024,softcap30,alibi")
ap.add_argument("--flex", default="1", help="0 to skip FlexAttention")
ap.add_argument("--rep", type=int, default=100, help="timing window, ms")
ap.add_argument("--labels", default="default", help="tile configurations to time (bench_kernels --tiles), or all")
ap.add_argument("--peers", default="1", help="0 to time flashjit only")
ap.add_argument("--fa4", default="1", help="0 to skip FlashAttention-4 (timed "
                "when flash_attn.cute imports: ../shared/tools/fa4-pack.sh)")
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)
torch._dynamo.config.recompile_limit = 10000
torch._dynamo.config.cache_size_limit = 10000
flex = torch.compile(flex_attention)
manifest = json.load(open(os.path.join(args.kernels, "manifest.json")))
fa4_func = None
if args.fa4 == "1" and args.peers == "1":
    try:
        from flash_attn.cute.interface import flash_attn_func as fa4_func
        print("FlashAttention-4 (flash_attn.cute) found", flush=True)
    except Exception as e:
        print("no FlashAttention-4:", str(e)[:160], flush=True)
modules = {}


def bench(fn):
    return tt.do_bench(fn, warmup=25, rep=args.rep, return_mode="median")


_cuda = None


def tensor_map(t, box_rows):
    """The TMA tensor map of a contiguous bf16 [B, H, N, D] tensor t as the
    runtime builds it (abi::gpu::kTensorMapArgs: boxes of 64 head_dim
    elements x box_rows rows, 128-byte swizzle)."""
    global _cuda
    if _cuda is None:
        _cuda = ctypes.CDLL("libcuda.so.1")
    B, H, N, D = t.shape
    # A CUtensorMap is 128 bytes, 64-byte aligned: an aligned slice of a
    # larger buffer (kept alive with its address).
    buf = (ctypes.c_uint8 * 192)()
    addr = (ctypes.addressof(buf) + 63) // 64 * 64
    u64x4 = ctypes.c_uint64 * 4
    u64x3 = ctypes.c_uint64 * 3
    u32x4 = ctypes.c_uint32 * 4
    dims = u64x4(D, N, H, B)
    strides = u64x3(*(s * 2 for s in (t.stride(2), t.stride(1), t.stride(0))))
    # BFLOAT16 = 9, INTERLEAVE_NONE = 0, SWIZZLE_128B = 3, L2_256B = 3,
    # OOB_FILL_NONE = 0 (cuda.h).
    r = _cuda.cuTensorMapEncodeTiled(ctypes.c_void_p(addr), 9, 4, ctypes.c_void_p(t.data_ptr()),
                                     dims, strides, u32x4(64, box_rows, 1, 1), u32x4(1, 1, 1, 1),
                                     0, 3, 3, 0)
    assert r == 0, f"cuTensorMapEncodeTiled: {r}"
    return buf, addr


def launch_tma(k, B, H, N, tensors, ptrs, extra, maps, sink=None):
    """launch() for a TMA kernel: cuLaunchKernel through ctypes (the
    tensor maps are 128-byte by-value parameters after the fixed ones and
    the sink pointer, before the variant's arguments)."""
    key = k["ptx"]
    if key not in modules:
        m = cp.RawModule(path=os.path.join(args.kernels, k["ptx"]))
        f = m.get_function(k["kernel"])
        f.max_dynamic_shared_size_bytes = k["smem"]
        modules[key] = (m, f)
    f = modules[key][1]
    D = k["D"]
    vals = [ctypes.c_void_p(p) for p in ptrs]
    vals += [ctypes.c_int64(x) for x in [H * N * D, N * D, D] * 4 + [H * N, N, 1]]
    vals += [ctypes.c_int32(N), ctypes.c_int32(N), ctypes.c_int32(1),
             ctypes.c_float(k["scale"]), ctypes.c_float(k["scale"] * LOG2E)]
    if sink is not None:
        vals.append(ctypes.c_void_p(sink))
    addrs = [ctypes.addressof(v) for v in vals] + [a for _, a in maps] + [ctypes.addressof(v) for v in extra]
    params = (ctypes.c_void_p * len(addrs))(*addrs)
    grid = ((N + k["block_m"] - 1) // k["block_m"], H, B)
    r = _cuda.cuLaunchKernel(ctypes.c_void_p(f.kernel.ptr), *grid, k["threads"], 1, 1, k["smem"],
                             ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), params, None)
    assert r == 0, f"cuLaunchKernel: {r}"


def launch(k, B, H, N, ptrs, extra):
    key = k["ptx"]
    if key not in modules:
        m = cp.RawModule(path=os.path.join(args.kernels, k["ptx"]))
        f = m.get_function(k["kernel"])
        f.max_dynamic_shared_size_bytes = k["smem"]
        modules[key] = (m, f)
    f = modules[key][1]
    D = k["D"]
    st = [np.int64(H * N * D), np.int64(N * D), np.int64(D)]
    a = list(ptrs) + st * 4 + [np.int64(H * N), np.int64(N), np.int64(1)]
    a += [np.int32(N), np.int32(N), np.int32(1), np.float32(k["scale"]),
          np.float32(k["scale"] * LOG2E)] + extra
    f(((N + k["block_m"] - 1) // k["block_m"], H, B), (k["threads"], 1, 1), tuple(a),
      shared_mem=k["smem"])


def allowed_fraction(variant, N):
    if variant in ("dense", "alibi", "dense_sink"):
        return 1.0
    full = N * (N + 1) / 2
    if variant == "swa1024":
        w = 1024
        full = sum(min(i + 1, w) for i in range(N)) if N <= 16384 else full
    return full / (N * N)


def mm_ceiling():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    ms = bench(lambda: a @ b)
    return 2 * 8192 ** 3 / ms / 1e9


ceiling = mm_ceiling()
print(f"bf16 matmul 8192^3: {ceiling:.0f} TF/s", flush=True)
rows = []
for D in [int(x) for x in args.d.split(",")]:
    H = 2048 // D
    for N in [int(x) for x in args.n.split(",")]:
        B = max(1, 32768 // N)
        torch.manual_seed(N + D)
        q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
        kk = torch.randn_like(q)
        v = torch.randn_like(q)
        o = torch.empty_like(q)
        lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        status = torch.zeros(4, device="cuda", dtype=torch.int32)
        slopes = torch.tensor([2 ** (-8 * (h + 1) / H) for h in range(H)], device="cuda")
        # dense_sink: one sink logit per head (the argument after the fixed
        # ones, abi::gpu::kSinkArgs).
        sinks = torch.linspace(-2.0, 2.0, H, device="cuda", dtype=torch.float32)
        ptrs = [cp.asarray(t.view(torch.int16)) for t in (q, kk, v, o)] + [cp.asarray(lse), cp.asarray(status)]
        idx = torch.arange(N, device="cuda")
        for variant, k in [(e["variant"], e) for v in args.variants.split(",") for e in manifest
                           if e["variant"] == v and e["D"] == D and (args.labels == "all" or e["label"] in args.labels.split(","))]:
            causal = variant in ("causal", "swa1024", "softcap30")
            extra = [cp.asarray(slopes), np.int64(H)] if variant == "alibi" else []
            if variant == "dense_sink":
                extra = [cp.asarray(sinks)]
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            if k.get("tma"):
                maps = [tensor_map(t, k["block_m"] if i == 0 else k["block_n"]) for i, t in enumerate((q, kk, v))]
                raw = [q.data_ptr(), kk.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), status.data_ptr()]
                cextra = [ctypes.c_void_p(slopes.data_ptr()), ctypes.c_int64(H)] if variant == "alibi" else []
                o.fill_(float("nan"))
                sink = sinks.data_ptr() if variant == "dense_sink" else None
                ours = bench(lambda: launch_tma(k, B, H, N, (q, kk, v), raw, cextra, maps, sink))
            else:
                ours = bench(lambda: launch(k, B, H, N, ptrs, extra))
            extra_bytes = torch.cuda.max_memory_allocated() - base
            # Correctness on one batch element, fp32 reference.
            qi = min(N, 2048)
            s0 = (q[0, :, -qi:].float() @ kk[0].float().transpose(-1, -2)) * k["scale"]
            rq = idx[-qi:]
            if variant == "softcap30":
                s0 = 30 * torch.tanh(s0 / 30)
            if variant == "alibi":
                s0 = s0 - slopes[:, None, None] * (rq[:, None] - idx[None, :]).abs().float()
            allow = torch.ones(qi, N, dtype=torch.bool, device="cuda")
            if causal:
                allow = rq[:, None] >= idx[None, :]
            if variant == "swa1024":
                allow &= (rq[:, None] - idx[None, :]) < 1024
            s0 = s0.masked_fill(~allow, float("-inf"))
            if variant == "dense_sink":  # the sink: a logit with no value
                s0 = torch.cat([s0, sinks[:, None, None].expand(H, qi, 1)], -1)
                ref = torch.softmax(s0, -1)[..., :-1] @ v[0].float()
            else:
                ref = torch.softmax(s0, -1) @ v[0].float()
            err = (o[0, :, -qi:].float() - ref).abs().max().item()
            del s0, ref, allow
            fa2 = cud = fx = float("nan")
            if variant in ("dense", "causal") and args.peers == "1":
                sd = lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=causal)
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    fa2 = bench(sd)
                try:
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        cud = bench(sd)
                except Exception as e:
                    print("cudnn failed:", str(e)[:120])
            fa4 = float("nan")
            if fa4_func is not None and variant != "alibi":
                # FA4 takes [B, N, H, D]; its window is (left, right)
                # inclusive, its sink FA4's learnable_sink (fp32 [H]).
                kw = dict(causal=causal)
                if variant == "swa1024":
                    kw["window_size"] = (1023, 0)
                if variant == "softcap30":
                    kw["softcap"] = 30.0
                if variant == "dense_sink":
                    kw["learnable_sink"] = sinks
                qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, kk, v))
                try:
                    fa4 = bench(lambda: fa4_func(qt, kt, vt, **kw))
                except Exception as e:
                    print("fa4 failed:", variant, D, N, str(e)[:160])
                del qt, kt, vt
            if args.flex == "1" and args.peers == "1" and variant != "dense_sink":
                def mask_mod(b, h, qq, kv):
                    m = qq >= kv
                    if variant == "swa1024":
                        m = m & (qq - kv < 1024)
                    return m
                sm = None
                if variant == "softcap30":
                    sm = lambda sc, b, h, qq, kv: 30 * torch.tanh(sc / 30)
                if variant == "alibi":
                    sm = lambda sc, b, h, qq, kv: sc - slopes[h] * (qq - kv).abs()
                try:
                    bm = create_block_mask(mask_mod, None, None, N, N) if causal else None
                    fx = bench(lambda: flex(q, kk, v, score_mod=sm, block_mask=bm))
                except Exception as e:
                    print("flex failed:", variant, D, N, str(e)[:160])
            flops = 4 * B * H * N * N * D * allowed_fraction(variant, N)
            tf = lambda ms: flops / ms / 1e9
            r = dict(variant=variant, D=D, N=N, B=B, H=H, ours=tf(ours), fa2=tf(fa2), cudnn=tf(cud),
                     flex=tf(fx), fa4=tf(fa4), ours_ms=ours, max_err=err, extra_bytes=extra_bytes,
                     registers=k["registers"], smem=k["smem"], block_m=k["block_m"], label=k["label"],
                     block_n=k["block_n"], threads=k["threads"], ceiling_frac=tf(ours) / ceiling)
            rows.append(r)
            print(f"| {variant} {k['label']} | {D} | {N} | {r['ours']:.0f} | {r['fa2']:.0f} | {r['cudnn']:.0f} | "
                  f"{r['flex']:.0f} | {r['fa4']:.0f} | {err:.2g} |", flush=True)
        del q, kk, v, o, lse, ptrs
        torch.cuda.empty_cache()

tag = f"d{args.d.replace(',', '-')}_n{args.n.replace(',', '-')}"
json.dump(dict(ceiling_tfs=ceiling, gpu=torch.cuda.get_device_name(), rows=rows),
          open(os.path.join(args.out, f"bench_{tag}.json"), "w"), indent=1)
with open(os.path.join(args.out, f"bench_{tag}.md"), "w") as f:
    f.write("| variant | D | N | flashjit TF/s | FA2 | cuDNN | Flex | FA4 | vs FA2 | vs Flex | vs FA4 | regs | smem | max err |\n")
    f.write("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        f.write(f"| {r['variant']} | {r['D']} | {r['N']} | {r['ours']:.0f} | {r['fa2']:.0f} | {r['cudnn']:.0f} | "
                f"{r['flex']:.0f} | {r['fa4']:.0f} | {r['ours'] / r['fa2']:.2f} | {r['ours'] / r['flex']:.2f} | "
                f"{r['ours'] / r['fa4']:.2f} | {r['registers']} | "
                f"{r['smem']} | {r['max_err']:.2g} |\n")
try:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from plot_bench import plot
    plot(rows, args.variants.split(","), args.out)
except Exception as e:
    print("plot failed:", e)
