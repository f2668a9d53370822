#!/usr/bin/env python3
"""The training path (forward + backward) of flashjit beside its peers, in
one process on the same inputs (issue 15, section 3).

flashjit runs through its Python package's autograd path
(``flashjit.attention`` on CUDA tensors: the custom op
``flashjit::attention`` and its backward ``flashjit_run_backward``; kernels
JIT-compiled through the cache on the first call), which is what a user
trains with. Peers: FlashAttention-2 and cuDNN (torch sdpa with
SDPBackend.FLASH_ATTENTION / CUDNN_ATTENTION; dense and causal only),
FlexAttention (``torch.compile(flex_attention)`` with block masks and
score_mod: every variant; its backward differentiates the score_mod, ALiBi
slopes included) and FlashAttention-4 (``flash_attn.cute``, when it
imports: ../shared/tools/fa4-pack.sh; dense, causal, window, softcap).

Shapes (issue 15): batch x seqlen = --tokens (32768), hidden = --hidden
(2048), so heads = hidden / D; bf16. Variants: dense, causal (top-left),
swa1024 (causal sliding window of 1024 keys, the current one included),
softcap30 (causal + 30 tanh(s / 30)), alibi (no mask, s - slope_h |i - j|,
slope gradients), doc (document-causal: doc[i] == doc[j] and j <= i, --docs
random documents per sequence, seeded). FLOPs count only the (q, k) pairs
the mask allows: forward 4 B H D pairs, backward 2.5x that, fwd+bwd 3.5x.

Block masks: Flex gets one (create_block_mask) for every masked variant;
flashjit gets one (flashjit.create_block_mask, the block-sparse forward and
backward) for doc, whose mask reads a buffer that no per-tile
classification sees through; both are built once per (variant, shape),
outside the timed region. flashjit's other masks (causal, window) are
classified per tile by the kernels themselves, without a block mask.

Timing: CUDA events around each forward (autograd on) and each backward
(torch.autograd.grad of O with the same dO), --warmup untimed iterations,
median of --reps; fwd+bwd is the median of the event span from the
forward's start to the backward's end. Before timing, each (variant,
shape) is checked once: flashjit's O, dQ, dK, dV (and d slopes for ALiBi)
on batch element 0 against an fp32 torch autograd reference on --check-heads
heads, beside the same errors of one peer; a mismatch is printed loudly,
its row is marked invalid (markdown: "WRONG") and the exit status is 1.

Writes bwd_<tag>.json, bwd_<tag>.md and (matplotlib) bwd_<tag>_d<D>.png
under --out.

  python3 bench/run_bwd_bench.py --out DIR [--n 4096,16384] [--d 128]
      [--variants dense,causal] [--impls flashjit,flex]
  python3 bench/run_bwd_bench.py --device cpu --tokens 256 --hidden 64 \\
      --n 64,128 --d 32 --dtype fp32     # a small run without a GPU
                                         # (Flex rows: skipped, FlexAttention
                                         # has no CPU backward)

The pieces that need no torch (argument parsing, pair and FLOP counting,
document layouts, the output tables) are in bench/bwd_bench_common.py;
this module imports torch only in run() (tests/python/test_bwd_bench.py).
"""
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bwd_bench_common import (  # noqa: E402
    IMPL_LABELS, IMPLS, SLOPE_TOL, SOFTCAP, TOLERANCES, VARIANTS, WINDOW,
    UserError, allowed, allowed_pairs, alibi_slopes, doc_ids, doc_lengths,
    check_heads, flashjit_spec, git_commit, make_row, median, parse_args,
    shape, write_outputs)

__all__ = ["main", "run", "VARIANTS", "IMPLS"]

#: The Flex row of a --device cpu run.
FLEX_CPU_SKIP = "skipped: no CPU backward in FlexAttention"


def _torch_dtype(torch, name):
    return {"bf16": torch.bfloat16, "fp16": torch.float16,
            "fp32": torch.float32}[name]


class Case:
    """The inputs of one (variant, D, N): q, k, v, dO [B, H, N, D] (seeded
    by N, D and --seed), ALiBi slopes (f32 [H]), document ids (i32 [N])."""

    def __init__(self, torch, args, variant, d, n):
        self.variant, self.d, self.n = variant, d, n
        self.batch, self.heads = shape(n, d, args.tokens, args.hidden)
        dev, dt = args.device, _torch_dtype(torch, args.dtype)
        g = torch.Generator(device=dev).manual_seed(
            args.seed * 7919 + n * 131 + d)
        size = (self.batch, self.heads, n, d)

        def rnd():
            return torch.randn(size, generator=g, device=dev).to(dt)
        self.q, self.k, self.v, self.d_o = rnd(), rnd(), rnd(), rnd()
        self.slopes = torch.tensor(alibi_slopes(self.heads), device=dev,
                                   dtype=torch.float32)
        self.lengths = doc_lengths(n, args.docs, args.seed)
        self.doc = torch.tensor(doc_ids(self.lengths), device=dev,
                                dtype=torch.int32)
        self.pairs = allowed_pairs(variant, n, self.lengths)


class Impl:
    """One implementation's training step on fixed inputs: ``run()`` -> O
    [B, H, N, D] (autograd on); ``leaves`` the tensors whose gradients the
    backward computes (q, k, v and, where supported, the ALiBi slopes);
    ``d_out`` dO in O's layout; ``to_bhnd`` maps O or a gradient of a leaf
    back to [B, H, N, D]."""

    def __init__(self, run, leaves, d_out, to_bhnd=None):
        self.run, self.leaves, self.d_out = run, leaves, d_out
        self.to_bhnd = to_bhnd or (lambda x: x)


class Unsupported(Exception):
    """The implementation has no kernel for this variant."""


def _leaves(torch, tensors):
    return [t.detach().clone().requires_grad_(True) for t in tensors]


def make_flashjit(torch, case, q, k, v, d_o, slope_grad=True):
    import flashjit
    kw = flashjit_spec(case.variant)
    q, k, v = _leaves(torch, (q, k, v))
    buffers, leaves = {}, [q, k, v]
    if case.variant == "alibi":
        s = case.slopes.detach().clone().requires_grad_(slope_grad)
        buffers["slopes"] = s
        if slope_grad:
            leaves.append(s)
    if case.variant == "doc":
        buffers["doc"] = case.doc
        # The document mask reads a buffer, which no tile classification
        # can see through: give flashjit its block mask, built here once
        # per (variant, shape) outside the timed region, as make_flex
        # builds Flex's (forward and backward then skip the empty tiles).
        kw["block_mask"] = flashjit.create_block_mask(
            kw["mask"], q=q, k=k, v=v, buffers=buffers,
            causal=kw.get("causal"))
    return Impl(lambda: flashjit.attention(q, k, v, buffers=buffers or None,
                                           **kw), leaves, d_o)


def make_sdpa(torch, case, q, k, v, d_o, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if case.variant not in ("dense", "causal"):
        raise Unsupported("sdpa: dense and causal only")
    be = getattr(SDPBackend, backend)
    causal = case.variant == "causal"
    q, k, v = _leaves(torch, (q, k, v))

    def run():
        with sdpa_kernel(be):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal)
    return Impl(run, [q, k, v], d_o)


_FLEX = {}


def make_flex(torch, case, q, k, v, d_o, compiled, slope_grad=True):
    from torch.nn.attention.flex_attention import (create_block_mask,
                                                   flex_attention)
    key = ("flex", compiled)
    if key not in _FLEX:
        # Static shapes: one compiled kernel per shape, as a training
        # run with a fixed sequence length gets.
        _FLEX[key] = torch.compile(flex_attention, dynamic=False) \
            if compiled else flex_attention
    flex = _FLEX[key]
    variant, n = case.variant, case.n
    q, k, v = _leaves(torch, (q, k, v))
    leaves = [q, k, v]
    doc = case.doc
    block_mask = None
    if variant not in ("dense", "alibi"):
        def mask_mod(b, h, qq, kv):
            return allowed(variant, qq, kv, doc)
        block_mask = create_block_mask(mask_mod, None, None, n, n,
                                       device=q.device.type)
    slopes = case.slopes.detach().clone().requires_grad_(slope_grad)
    if variant == "alibi" and slope_grad:
        leaves.append(slopes)

    def softcap_mod(sc, b, h, qq, kv):
        return SOFTCAP * torch.tanh(sc / SOFTCAP)

    def alibi_mod(sc, b, h, qq, kv):
        return sc - slopes[h] * (qq - kv).abs()
    score_mod = {"softcap30": softcap_mod, "alibi": alibi_mod}.get(variant)
    return Impl(lambda: flex(q, k, v, score_mod=score_mod,
                             block_mask=block_mask), leaves, d_o)


def make_fa4(torch, case, q, k, v, d_o, fa4_func):
    if fa4_func is None:
        raise Unsupported("flash_attn.cute does not import")
    if case.variant in ("alibi", "doc"):
        raise Unsupported("FA4: no ALiBi / document kernel here")
    kw = {"causal": case.variant != "dense"}
    if case.variant == "swa1024":
        kw["window_size"] = (WINDOW - 1, 0)
    if case.variant == "softcap30":
        kw["softcap"] = SOFTCAP
    # FA4 takes [B, N, H, D].
    q, k, v = _leaves(torch, (t.transpose(1, 2).contiguous()
                              for t in (q, k, v)))
    d_o_t = d_o.transpose(1, 2).contiguous()

    def run():
        res = fa4_func(q, k, v, **kw)
        return res[0] if isinstance(res, tuple) else res
    return Impl(run, [q, k, v], d_o_t, lambda x: x.transpose(1, 2))


def build(torch, name, case, tensors, ctx, slope_grad=True):
    """The Impl of ``name`` on ``tensors`` = (q, k, v, dO)."""
    if name == "flashjit":
        return make_flashjit(torch, case, *tensors, slope_grad=slope_grad)
    if name == "fa2":
        return make_sdpa(torch, case, *tensors,
                         "MATH" if ctx["device"] == "cpu"
                         else "FLASH_ATTENTION")
    if name == "cudnn":
        if ctx["device"] == "cpu":
            raise Unsupported("cuDNN: CUDA only")
        return make_sdpa(torch, case, *tensors, "CUDNN_ATTENTION")
    if name == "flex":
        if ctx["device"] == "cpu":
            # torch raises "FlexAttention does not support backward on
            # CPU" at the first backward: a row that says so, not a failure.
            raise Unsupported(FLEX_CPU_SKIP)
        try:
            return make_flex(torch, case, *tensors, ctx["flex_compile"],
                             slope_grad)
        except Exception as e:  # noqa: BLE001 - reported in the table
            raise Unsupported(f"flex: {type(e).__name__}: {str(e)[:120]}")
    if name == "fa4":
        return make_fa4(torch, case, *tensors, ctx["fa4"])
    raise UserError(f"unknown impl {name!r}")


def step(torch, impl):
    """One forward + backward; returns (O, gradients of the leaves)."""
    o = impl.run()
    grads = torch.autograd.grad(o, impl.leaves, impl.d_out)
    return o, grads


def time_impl(torch, impl, warmup, reps, device):
    """dict(fwd_ms, bwd_ms, total_ms): medians over ``reps`` training steps
    after ``warmup`` (CUDA events; perf_counter on the CPU)."""
    for _ in range(warmup):
        step(torch, impl)
    spans = []
    if device == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            ev[0].record()
            o = impl.run()
            ev[1].record()
            torch.autograd.grad(o, impl.leaves, impl.d_out)
            ev[2].record()
            del o
            spans.append(ev)
        torch.cuda.synchronize()
        fwd = [a.elapsed_time(b) for a, b, _ in spans]
        bwd = [b.elapsed_time(c) for _, b, c in spans]
        tot = [a.elapsed_time(c) for a, _, c in spans]
    else:
        fwd, bwd, tot = [], [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            o = impl.run()
            t1 = time.perf_counter()
            torch.autograd.grad(o, impl.leaves, impl.d_out)
            t2 = time.perf_counter()
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
            tot.append((t2 - t0) * 1e3)
    return {"fwd_ms": median(fwd), "bwd_ms": median(bwd),
            "total_ms": median(tot)}


def reference_head(torch, case, b, h):
    """fp32 torch autograd of the variant's formula on (batch b, head h):
    (O, dQ, dK, dV [N, D], d slope or None, sum |dS_ij| |i - j| or None):
    ALiBi's slope gradient and the condition of that sum (floats)."""
    q, k, v = (t[b, h].float().detach().requires_grad_(True)
               for t in (case.q, case.k, case.v))
    idx = torch.arange(case.n, device=q.device)
    s = (q @ k.transpose(0, 1)) / math.sqrt(case.d)
    slope = dist = None
    if case.variant == "softcap30":
        s = SOFTCAP * torch.tanh(s / SOFTCAP)
    if case.variant == "alibi":
        slope = case.slopes[h].detach().clone().requires_grad_(True)
        dist = (idx[:, None] - idx[None, :]).abs().float()
        s = s - slope * dist
    allow = allowed(case.variant, idx[:, None], idx[None, :], case.doc)
    z = s.masked_fill(~allow, float("-inf"))
    o = torch.softmax(z, -1) @ v
    leaves = [q, k, v] + ([slope, s] if slope is not None else [])
    grads = torch.autograd.grad(o, leaves, case.d_o[b, h].float())
    out = (o.detach(),) + tuple(g.detach() for g in grads[:3])
    if slope is None:
        return out + (None, None)
    cond = (grads[4].abs() * dist).sum().item()  # grads[4]: dS
    return out + (grads[3].item(), cond)


def _rel(torch, got, want):
    """(max |err| / max |ref|, ||err|| / ||ref||, NaN count)."""
    got = got.float()
    nan = int(torch.isnan(got).sum().item())
    err = (got - want).abs().nan_to_num(float("inf"))
    ref_max = want.abs().max().item() or 1.0
    ref_norm = want.norm().item() or 1.0
    return err.max().item() / ref_max, err.norm().item() / ref_norm, nan


def check_case(torch, case, impls, ctx):
    """One training step of flashjit and of the first peer in ``impls``
    (name -> Impl, in order; Unsupported ones absent) that runs, compared
    on batch element 0, heads ``check_heads`` with the fp32 reference: O,
    dQ, dK, dV, and for ALiBi d slopes (the reference summed over the
    batch; the error relative to the sum's condition, see SLOPE_TOL). Returns the check dict: valid, worst (flashjit's largest
    relative norm error), failures, heads, peer, errors (per impl, per
    tensor: [max rel, norm rel, NaN count])."""
    heads = check_heads(case.heads, ctx["check_heads"])
    results = {}
    for name, impl in impls.items():
        try:
            o, grads = step(torch, impl)
        except Exception as e:  # noqa: BLE001 - flashjit failing is a finding
            if name == "flashjit":
                msg = f"flashjit raised {type(e).__name__}: {str(e)[:300]}"
                return {"valid": False, "worst": float("inf"),
                        "failures": [msg], "error": msg, "heads": heads,
                        "peer": None, "errors": {}}
            print(f"check: peer {name} failed ({type(e).__name__}: "
                  f"{str(e)[:120]}), trying the next", flush=True)
            continue
        got = [impl.to_bhnd(o)] + [impl.to_bhnd(g) for g in grads[:3]]
        slope_g = grads[3] if len(grads) > 3 else None
        results[name] = (got, slope_g)
        del o, grads
        if name != "flashjit":
            break  # one peer is the baseline
    if "flashjit" not in results:
        return {"valid": False, "worst": float("inf"),
                "failures": ["flashjit did not run"], "heads": heads,
                "peer": None, "errors": {}}
    names = ["O", "dQ", "dK", "dV"]
    errs = {n: {} for n in results}
    slope_want, slope_cond, slope_got = [], [], {n: [] for n in results}
    for h in heads:
        ref = reference_head(torch, case, 0, h)
        if ref[4] is not None:  # d slope_h sums over the whole batch
            rest = [reference_head(torch, case, b, h)[4:]
                    for b in range(1, case.batch)]
            slope_want.append(ref[4] + sum(r[0] for r in rest))
            slope_cond.append(ref[5] + sum(r[1] for r in rest))
        for n, (got, slope_g) in results.items():
            for i, t in enumerate(names):
                m, nrm, nan = _rel(torch, got[i][0, h], ref[i])
                e = errs[n].get(t, [0.0, 0.0, 0])
                errs[n][t] = [max(e[0], m), max(e[1], nrm), e[2] + nan]
            if ref[4] is not None and slope_g is not None:
                slope_got[n].append(slope_g[h].item())
        del ref
    # d slopes: |err| / sum |dS_ij| |i - j| (SLOPE_TOL), worst head.
    for n, got in slope_got.items():
        if got:
            nan = sum(g != g for g in got)
            err = max((abs(g - w) if g == g else float("inf")) / (c or 1.0)
                      for g, w, c in zip(got, slope_want, slope_cond))
            errs[n]["dslopes"] = [err, err, nan]
    tol_max, tol_norm = TOLERANCES[ctx["dtype"]]
    peer = next((n for n in results if n != "flashjit"), None)
    failures = []
    for t, (m, nrm, nan) in errs["flashjit"].items():
        pm, pn = (errs[peer][t][:2] if peer and t in errs[peer]
                  else (0.0, 0.0))
        slope_tol = SLOPE_TOL[ctx["dtype"]]
        lim_m = max(slope_tol if t == "dslopes" else tol_max, 2 * pm)
        lim_n = max(slope_tol if t == "dslopes" else tol_norm, 2 * pn)
        if nan or not m <= lim_m or not nrm <= lim_n:
            failures.append(f"{t}: max {m:.3g} norm {nrm:.3g} NaN {nan} "
                            f"(bound max {lim_m:.3g}, norm {lim_n:.3g})")
    worst = max(v[1] for v in errs["flashjit"].values())
    return {"valid": not failures, "worst": worst, "failures": failures,
            "heads": heads, "peer": peer, "errors": errs}


def build_all(torch, case, names, ctx):
    """name -> Impl for ``names`` on the case's full inputs, and name ->
    reason for those without a kernel for the variant."""
    impls, missing = {}, {}
    full = (case.q, case.k, case.v, case.d_o)
    for name in names:
        try:
            impls[name] = build(torch, name, case, full, ctx)
        except Unsupported as e:
            missing[name] = str(e)
        except Exception as e:  # noqa: BLE001 - reported in the table
            missing[name] = f"{type(e).__name__}: {str(e)[:200]}"
    return impls, missing


def time_all(torch, case, impls, args, ctx):
    """name -> timing dict (or dict(error=...)) of every Impl. Flex's ALiBi
    falls back to constant slopes (noted in the row) when its backward
    cannot differentiate them."""
    timings = {}
    for name, impl in impls.items():
        try:
            timings[name] = time_impl(torch, impl, args.warmup, args.reps,
                                      args.device)
        except Exception as e:  # noqa: BLE001 - reported in the table
            err = f"{type(e).__name__}: {str(e)[:200]}"
            timings[name] = {"error": err}
            if name == "flex" and case.variant == "alibi":
                try:
                    full = (case.q, case.k, case.v, case.d_o)
                    t = time_impl(torch, build(torch, name, case, full, ctx,
                                               slope_grad=False),
                                  args.warmup, args.reps, args.device)
                    t["note"] = f"no slope gradient ({err[:100]})"
                    timings[name] = t
                except Exception as e2:  # noqa: BLE001
                    err = f"{err}; without slope gradients: {str(e2)[:100]}"
                    timings[name] = {"error": err}
            print(f"{name}: {case.variant} D={case.d} N={case.n}: "
                  f"{timings[name].get('note', err)}", flush=True)
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return timings


def run(args, on_row=None):
    """The benchmark: returns (meta, rows); ``on_row(meta, rows)`` after
    each row (main writes the outputs there, so that a run cut short
    leaves its rows). Stops starting new rows past --time-limit."""
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: torch sees no GPU (use --device cpu "
                        "for a small run without one)")
    torch._dynamo.config.cache_size_limit = 10000
    if hasattr(torch._dynamo.config, "recompile_limit"):
        torch._dynamo.config.recompile_limit = 10000
    import flashjit
    fa4 = None
    if "fa4" in args.impls and args.device == "cuda":
        try:
            from flash_attn.cute.interface import flash_attn_func as fa4
            print("FlashAttention-4 (flash_attn.cute) found", flush=True)
        except Exception as e:  # noqa: BLE001 - optional peer
            print("no FlashAttention-4:", str(e)[:160], flush=True)
    ctx = {"device": args.device, "dtype": args.dtype, "fa4": fa4,
           "flex_compile": bool(args.flex_compile),
           "check_heads": args.check_heads}
    meta = {"gpu": (torch.cuda.get_device_name() if args.device == "cuda"
                    else "cpu"),
            "torch": torch.__version__, "flashjit": flashjit.__version__,
            "commit": git_commit(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "dtype": args.dtype, "tokens": args.tokens,
            "hidden": args.hidden, "reps": args.reps,
            "warmup": args.warmup, "docs": args.docs,
            "argv": sys.argv[1:], "skipped": []}
    print(f"{meta['gpu']}, torch {meta['torch']}, flashjit "
          f"{meta['flashjit']}, commit {meta['commit']}", flush=True)
    # The check's baseline: the first peer with a kernel for the variant
    # (sdpa FLASH for dense / causal, as FlashAttention's own tests).
    order = ["flashjit"] + [p for p in ("fa2", "flex", "cudnn", "fa4")
                            if p in args.impls]
    rows = []
    t_start = time.time()
    for d in args.d:
        for n in args.n:
            for variant in args.variants:
                if args.time_limit and time.time() - t_start > \
                        args.time_limit:
                    meta["skipped"].append(f"{variant} D={d} N={n}")
                    continue
                case = Case(torch, args, variant, d, n)
                t0 = time.time()
                impls, missing = build_all(
                    torch, case, [x for x in order if x in args.impls], ctx)
                check = None
                if args.check and "flashjit" in impls:
                    check = check_case(torch, case, impls, ctx)
                    if check.get("error"):
                        print(f"!!!!! FLASHJIT FAILED {variant} D={d} N={n}:"
                              f" {check['error']}", flush=True)
                    elif not check["valid"]:
                        print(f"!!!!! MISMATCH {variant} D={d} N={n}: "
                              f"flashjit differs from the fp32 reference: "
                              f"{check['failures']}", flush=True)
                timings = time_all(torch, case, impls, args, ctx)
                timings.update({k: {"error": e} for k, e in missing.items()})
                timings = {k: timings[k] for k in args.impls if k in timings}
                row = make_row(variant, d, n, case.batch, case.heads,
                               case.pairs, timings, check)
                rows.append(row)
                print(_progress(row, time.time() - t0), flush=True)
                del case, impls
                if args.device == "cuda":
                    torch.cuda.empty_cache()
                if on_row:
                    on_row(meta, rows)
    if meta["skipped"]:
        print(f"--time-limit {args.time_limit} s: skipped "
              f"{len(meta['skipped'])} rows: {meta['skipped']}", flush=True)
    return meta, rows


def _progress(row, seconds):
    parts = []
    for impl, t in row["impls"].items():
        if "error" in t:
            continue
        parts.append(f"{IMPL_LABELS[impl]} {t['total_tfs']:.0f} "
                     f"({t['fwd_ms']:.2f}+{t['bwd_ms']:.2f} ms)")
    flag = "" if row["valid"] else "  [flashjit WRONG]"
    return (f"{row['variant']:9s} D={row['D']:<3d} N={row['N']:<6d} "
            f"fwd+bwd TF/s: {', '.join(parts)}{flag} [{seconds:.0f} s]")


def main(argv=None):
    try:
        args = parse_args(argv)
    except UserError as e:
        print(f"run_bwd_bench.py: {e}", file=sys.stderr)
        return 2
    try:
        meta, rows = run(args, lambda m, r: write_outputs(args.out, args.tag,
                                                          m, r))
    except UserError as e:  # e.g. --device cuda without a GPU
        print(f"run_bwd_bench.py: {e}", file=sys.stderr)
        return 2
    jpath, mpath = write_outputs(args.out, args.tag, meta, rows)
    print(open(mpath).read())
    print("wrote", jpath, mpath)
    if args.plot:
        try:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from plot_bench import plot
            for p in plot(rows, args.variants, args.out, f"bwd_{args.tag}",
                          ylabel="fwd+bwd TF/s (allowed pairs)"):
                print("wrote", p)
        except Exception as e:  # noqa: BLE001 - matplotlib is optional
            print("plot failed:", e)
    bad = [r for r in rows if not r["valid"]]
    if bad:
        print(f"!!!!! {len(bad)} of {len(rows)} rows failed the correctness "
              f"check: flashjit's numbers there are not valid", flush=True)
    # The last line (scripts/gpu-check.sh's summary shows it).
    print(f"run_bwd_bench: {len(rows)} rows, {len(bad)} failed checks, "
          f"{len(meta['skipped'])} skipped (--time-limit)", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
