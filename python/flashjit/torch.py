"""flashjit for PyTorch: autograd and torch.compile.

``flashjit.torch.attention(q, k, v, mask=..., score=..., params=...,
buffers=...)`` is the torch face of ``flashjit.attention`` (which calls it
for torch tensors): it runs the custom op ``torch.ops.flashjit.attention``
(``torch.library.custom_op``, torch >= 2.4) whose fake (meta)
implementation gives ``torch.compile`` the output shapes without running a
kernel, and whose registered autograd formula calls the op
``torch.ops.flashjit.attention_backward`` (flashjit_run_backward: dQ, dK, dV
and the gradients of f32 buffers). ``torch.compile(..., fullgraph=True)``
traces through both without graph breaks: every argument the ops take is a
tensor, a list of tensors, a str, a list of floats or a list of ints.

``AttentionFunction`` is the same forward and backward as a plain
``torch.autograd.Function`` (eager autograd without the custom op).

An attention sink (``sink=``, fp32 [Hq]) travels in the ops' buffer list
under the reserved name ``flashjit.SINK`` ("@sink"), so it gets its gradient
(d sink = -sum_i exp(sink - LSE_i) D_i) like an f32 buffer does.

LSE is returned but not differentiable (its gradient is ignored);
parameters (``params``) are constants for autograd: their gradients come
from ``flashjit.attention_backward(..., grads=[...])``.
"""

import torch

from . import _api

__all__ = ["attention", "AttentionFunction", "quantize_fp8"]


def _encode_params(params):
    """params dict -> (kinds "name:kind,...", float values, int values)."""
    names, floats, ints = [], [], []
    for name, value in (params or {}).items():
        if isinstance(value, tuple) and len(value) == 2:
            kind, value = value[1], value[0]
            if isinstance(value, bool):
                raise _api.UserError(f"parameter '{name}' is a bool")
        elif isinstance(value, bool):
            raise _api.UserError(f"parameter '{name}' is a bool")
        elif isinstance(value, int):
            kind = "i32"
        else:
            kind = "f32"
        if kind == "f32":
            floats.append(float(value))
        else:
            ints.append(int(value))
        names.append(f"{name}:{kind}")
    return ",".join(names), floats, ints


def _decode_params(kinds, floats, ints):
    params = {}
    fi = ii = 0
    for item in kinds.split(",") if kinds else []:
        name, kind = item.rsplit(":", 1)
        if kind == "f32":
            params[name] = floats[fi]
            fi += 1
        else:
            params[name] = (ints[ii], kind)
            ii += 1
    return params


def _spec_keywords(mask, score, causal, scale, name, sink=False):
    """The keyword arguments of _api._infer_spec from the op's strings."""
    return dict(mask=mask or None, score=score or None,
                causal=causal or None, scale=None if scale is None else scale,
                name=name or None, return_lse=True,
                sink=True if sink else None)


def _kernel(q, k, v, mask, score, causal, scale, name, target, sink=False,
            block_mask=None):
    """The forward kernel of the call: block-sparse when ``block_mask``
    (a BlockMask, checked against the call's spec) is given."""
    from . import _dlpack
    qv = _dlpack.view(q.detach(), "q")
    kv = _dlpack.view(k.detach(), "k")
    vv = _dlpack.view(v.detach(), "v")
    target = target or _api._target_for(qv)
    text = _api._infer_spec(qv, kv, vv, False,
                            **_spec_keywords(mask, score, causal, scale,
                                             name, sink))
    kernel = _api.compile(text, target=target,
                          block_sparse=block_mask is not None)
    if block_mask is not None:
        _api._check_mask_spec(block_mask, kernel)
    return kernel


def _wants_grad(name, tensor, requires_grad):
    """Whether the op marks buffer ``name`` for a gradient: an f32 buffer
    that requires one, never an fp8 descale (constants: the fp8 forward has
    no backward)."""
    return (requires_grad and tensor.dtype == torch.float32
            and name not in _api.DESCALES.values())


def _names(buffer_names):
    """[(name, wants a gradient)] of the op's buffer_names string: names
    joined by commas, a trailing "+" marks an f32 buffer that needs its
    gradient."""
    return [(n.rstrip("+"), n.endswith("+"))
            for n in (buffer_names.split(",") if buffer_names else [])]


def _forward(q, k, v, buffers, mask, score, causal, scale, name, target,
             kinds, floats, ints, buffer_names, block_mask=0):
    """(O, LSE); ``block_mask`` is a BlockMask's key (0: dense)."""
    names = [n for n, _ in _names(buffer_names)]
    bufs = {n: b.detach() for n, b in zip(names, buffers)}
    sink = bufs.pop(_api.SINK, None)
    descales = {key: bufs.pop(reserved, None)
                for key, reserved in _api.DESCALES.items()}
    bm = _api._block_mask_by_key(block_mask)
    kernel = _kernel(q, k, v, mask, score, causal, scale, name, target,
                     sink is not None, bm)
    o, lse = kernel.run(q.detach(), k.detach(), v.detach(),
                        params=_decode_params(kinds, floats, ints),
                        buffers=bufs, sink=sink, block_mask=bm, **descales)
    return o, lse


def _backward(q, k, v, o, lse, d_o, buffers, mask, score, causal, scale,
              name, target, kinds, floats, ints, buffer_names, block_mask=0):
    """(dq, dk, dv, flat fp32 gradients of the marked buffers in order)."""
    marked = _names(buffer_names)
    bufs = {n: b.detach() for (n, _), b in zip(marked, buffers)}
    sink = bufs.pop(_api.SINK, None)
    # fp8 descales (the backward refuses fp8 specs by name).
    for reserved in _api.DESCALES.values():
        bufs.pop(reserved, None)
    bm = _api._block_mask_by_key(block_mask)
    kernel = _kernel(q, k, v, mask, score, causal, scale, name, target,
                     sink is not None, bm)
    grads = [n for n, want in marked if want]
    result = kernel.backward(q.detach(), k.detach(), v.detach(), o.detach(),
                             lse.detach(), d_o.detach().contiguous(),
                             params=_decode_params(kinds, floats, ints),
                             buffers=bufs, grads=grads, sink=sink,
                             block_mask=bm)
    dq, dk, dv = result[:3]
    flat = (torch.cat([result[3][n].reshape(-1) for n in grads])
            if grads else q.new_empty((0,), dtype=torch.float32))
    return dq, dk, dv, flat


def _fake_outputs(q, v):
    b, hq, sq, _ = q.shape
    return (q.new_empty((b, hq, sq, v.shape[-1])),
            q.new_empty((b, hq, sq), dtype=torch.float32))


def _flat_size(buffers, buffer_names):
    return sum(b.numel() for (_, want), b in zip(_names(buffer_names),
                                                 buffers) if want)


_HAVE_CUSTOM_OP = hasattr(torch, "library") and hasattr(torch.library,
                                                        "custom_op")

if _HAVE_CUSTOM_OP:
    @torch.library.custom_op("flashjit::attention", mutates_args=())
    def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      buffers: list[torch.Tensor], mask: str, score: str,
                      causal: str, scale: float, name: str, target: str,
                      kinds: str, floats: list[float], ints: list[int],
                      buffer_names: str, block_mask: int = 0
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        # NaN stands for "default" (1/sqrt(head_dim)): a spec's scale is
        # finite (and may be negative).
        s = None if scale != scale else scale
        return _forward(q, k, v, buffers, mask, score, causal, s, name,
                        target, kinds, floats, ints, buffer_names,
                        block_mask)

    @_attention_op.register_fake
    def _(q, k, v, buffers, mask, score, causal, scale, name, target, kinds,
          floats, ints, buffer_names, block_mask=0):
        return _fake_outputs(q, v)

    @torch.library.custom_op("flashjit::attention_backward",
                             mutates_args=())
    def _attention_backward_op(
            q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            o: torch.Tensor, lse: torch.Tensor, d_o: torch.Tensor,
            buffers: list[torch.Tensor], mask: str, score: str, causal: str,
            scale: float, name: str, target: str, kinds: str,
            floats: list[float], ints: list[int], buffer_names: str,
            block_mask: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        s = None if scale != scale else scale
        return _backward(q, k, v, o, lse, d_o, buffers, mask, score, causal,
                         s, name, target, kinds, floats, ints, buffer_names,
                         block_mask)

    @_attention_backward_op.register_fake
    def _(q, k, v, o, lse, d_o, buffers, mask, score, causal, scale, name,
          target, kinds, floats, ints, buffer_names, block_mask=0):
        return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
                q.new_empty((_flat_size(buffers, buffer_names),),
                            dtype=torch.float32))

    def _setup_context(ctx, inputs, output):
        q, k, v, buffers = inputs[:4]
        o, lse = output
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(q, k, v, o, lse, *buffers)
        ctx.n_buffers = len(buffers)
        ctx.rest = inputs[4:]
        # The backward op gets the block mask's key: keep the mask alive
        # until then (eager autograd; compiled graphs keep the key only).
        key = inputs[14] if len(inputs) > 14 else 0
        ctx.block_mask = (_api._block_mask_by_key(key)
                          if isinstance(key, int) else None)

    def _op_backward(ctx, d_o, d_lse):
        saved = ctx.saved_tensors
        q, k, v, o, lse = saved[:5]
        buffers = list(saved[5:])
        dq, dk, dv, flat = torch.ops.flashjit.attention_backward(
            q, k, v, o, lse, d_o, buffers, *ctx.rest)
        # No gradient for the other inputs, in the structure torch checks:
        # None for a str, a float or a non-empty list of numbers, [] for an
        # empty list (which torch cannot tell from a list of tensors).
        rest = tuple([] if isinstance(x, (list, tuple)) and not x else None
                     for x in ctx.rest)
        grads = (dq, dk, dv, _split_flat(flat, buffers, ctx.rest[9])) + rest
        # The dispatcher drops trailing arguments equal to their defaults
        # (block_mask=0) before autograd sees them, and torch checks the
        # return against the arguments it saw: ctx.needs_input_grad has
        # one entry per such argument (torch >= 2.5).
        return grads[:len(ctx.needs_input_grad)]

    torch.library.register_autograd("flashjit::attention", _op_backward,
                                    setup_context=_setup_context)


def _split_flat(flat, buffers, buffer_names):
    """Per-buffer gradients from the flat vector (None for unmarked
    buffers)."""
    grads, at = [], 0
    for (_, want), b in zip(_names(buffer_names), buffers):
        if want:
            n = b.numel()
            grads.append(flat[at:at + n].view(b.shape))
            at += n
        else:
            grads.append(None)
    return grads


class AttentionFunction(torch.autograd.Function):
    """flashjit attention as a torch.autograd.Function:
    ``AttentionFunction.apply(q, k, v, options, *buffers)`` -> (O, LSE),
    with ``options = flashjit.torch.options(mask=..., score=..., params=...,
    buffer_names=[...], causal=..., scale=..., name=..., target=...,
    block_mask=...)``. Forward saves O and LSE (and keeps the block mask);
    backward calls flashjit_run_backward (flashjit_run_backward_ex with a
    block mask)."""

    @staticmethod
    def forward(ctx, q, k, v, opts, *buffers):
        # opts: options()'s 10 fields, then the block mask's key (older
        # 10-field tuples: none).
        opts, key = tuple(opts[:10]), (opts[10] if len(opts) > 10 else 0)
        # Mark the f32 buffers whose gradient autograd will ask for.
        names = [n for n, _ in _names(opts[9])]
        opts = opts[:9] + (",".join(
            n + ("+" if _wants_grad(n, b, ctx.needs_input_grad[4 + i])
                 else "")
            for i, (n, b) in enumerate(zip(names, buffers))),)
        ctx.block_mask = _api._block_mask_by_key(key)
        o, lse = _forward(q, k, v, list(buffers), *opts, key)
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(q, k, v, o, lse, *buffers)
        ctx.opts = opts + (key,)
        return o, lse

    @staticmethod
    def backward(ctx, d_o, d_lse):
        saved = ctx.saved_tensors
        q, k, v, o, lse = saved[:5]
        buffers = list(saved[5:])
        dq, dk, dv, flat = _backward(q, k, v, o, lse, d_o, buffers,
                                     *ctx.opts)
        return (dq, dk, dv, None) + tuple(_split_flat(flat, buffers,
                                                      ctx.opts[9]))


def options(mask=None, score=None, params=None, buffer_names=(), causal=None,
            scale=None, name=None, target=None, block_mask=None):
    """The ``opts`` tuple of AttentionFunction.apply (``block_mask``: a
    flashjit.BlockMask from create_block_mask, kept alive by the
    autograd graph)."""
    kinds, floats, ints = _encode_params(params)
    return (mask or "", score or "", _causal_text(causal),
            None if scale is None else float(scale), name or "", target or "",
            kinds, floats, ints, ",".join(buffer_names),
            _mask_key(block_mask))


def _mask_key(block_mask):
    """The key of a BlockMask for the ops (0: none); UserError for other
    objects."""
    if block_mask is None:
        return 0
    if not isinstance(block_mask, _api.BlockMask):
        raise _api.UserError(f"block_mask must be a flashjit.BlockMask (from "
                             f"flashjit.create_block_mask) or True, got "
                             f"{type(block_mask).__name__}")
    return block_mask._key


def _causal_text(causal):
    if causal is None or causal is False:
        return ""
    if causal is True:
        return "top_left"
    return str(causal)


def attention(q, k, v, mask=None, score=None, params=None, buffers=None,
              scale=None, return_lse=False, *, causal=None, name=None,
              target=None, sink=None, block_mask=None, q_descale=None,
              k_descale=None, v_descale=None):
    """``flashjit.attention`` for torch tensors [B, H, S, D], through the
    custom op ``flashjit::attention`` (differentiable in q, k, v, f32
    buffers and the attention sink ``sink``, fp32 [Hq]; traceable by
    torch.compile). ``block_mask``: a BlockMask from
    ``flashjit.create_block_mask`` for this call's spec and shape (the
    forward and the backward visit only its tiles; build it once, outside
    the training step), or True to build one for this call (eagerly: a
    graph break under torch.compile). fp8 q, k, v (float8_e4m3fn,
    float8_e5m2; forward only, O bf16) take ``q_descale``, ``k_descale``,
    ``v_descale``: float32 [1] or [B, Hkv] tensors on q's device (None:
    1), as ``quantize_fp8`` returns them. Returns O, or (O, LSE) with
    ``return_lse``."""
    if block_mask is True:
        block_mask = _api.create_block_mask(
            mask, q=q.detach(), k=k.detach(), v=v.detach(), params=params,
            buffers={n: b.detach() for n, b in (buffers or {}).items()},
            target=target, score=score, causal=causal, scale=scale,
            name=name, sink=True if sink is not None else None)
    elif block_mask is False:
        block_mask = None
    key = _mask_key(block_mask)
    buffers = dict(buffers or {})
    if _api.SINK in buffers:
        raise _api.UserError(f"buffer name {_api.SINK!r} is reserved for "
                             f"the sink; pass sink=")
    if sink is not None:
        buffers[_api.SINK] = sink
    # The descales travel in the buffer list under their reserved names
    # (the op takes tensors and lists of tensors only); _forward takes
    # them out again and Kernel.run checks them.
    for arg, value in (("q_descale", q_descale), ("k_descale", k_descale),
                       ("v_descale", v_descale)):
        if _api.DESCALES[arg] in buffers:
            raise _api.UserError(f"buffer name {_api.DESCALES[arg]!r} is "
                                 f"reserved for the fp8 descale {arg}; pass "
                                 f"{arg}=")
        if value is not None:
            if not isinstance(value, torch.Tensor):
                raise _api.UserError(f"{arg} must be a torch.Tensor (float32"
                                     f" [1] or [batch, heads_kv]), got "
                                     f"{type(value).__name__}")
            buffers[_api.DESCALES[arg]] = value
    kinds, floats, ints = _encode_params(params)
    # "+" marks the f32 buffers that need a gradient (see _names).
    names = ",".join(n + ("+" if _wants_grad(n, b, b.requires_grad)
                          else "") for n, b in buffers.items())
    bufs = list(buffers.values())
    if _HAVE_CUSTOM_OP:
        o, lse = torch.ops.flashjit.attention(
            q, k, v, bufs, mask or "", score or "", _causal_text(causal),
            float("nan") if scale is None else float(scale), name or "",
            target or "", kinds, floats, ints, names, key)
    else:
        opts = options(mask, score, params, list(buffers.keys()), causal,
                       scale, name, target, block_mask)
        o, lse = AttentionFunction.apply(q, k, v, opts, *bufs)
    return (o, lse) if return_lse else o


# The largest finite magnitude of each fp8 format (OCP: e4m3fn has no inf,
# S.1111.110 = 448; e5m2 is IEEE-like, S.11110.11 = 57344).
_FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0} \
    if hasattr(torch, "float8_e4m3fn") else {}


def quantize_fp8(x, dtype=getattr(torch, "float8_e4m3fn", None),
                 per="tensor", *, heads_kv=None):
    """``(x_fp8, descale)``: ``x`` [batch, heads, seqlen, head_dim]
    (bfloat16, float16 or float32 torch tensor, CPU or CUDA) in the fp8
    format ``dtype`` (torch.float8_e4m3fn, the default, or
    torch.float8_e5m2) with its float32 descale, ready for
    ``attention(..., q_descale=...)`` / ``Kernel.run``.

    FlashAttention-3's scaling (Shah et al. 2024, section 3.3, "block
    quantization": one scale per block rather than per tensor, so one
    outlier does not flatten every other block): per block,

        descale = max(amax / fp8_max, 2^-126)   (1 where amax == 0)
        x_fp8   = round_to_nearest_even(clamp(x / descale, -fp8_max,
                                              fp8_max))

    with amax the largest |x| of the block and fp8_max 448 (e4m3) or 57344
    (e5m2); the real value of an element is ``x_fp8.float() * descale``.
    The clamp only absorbs f32 rounding of x / descale (at most fp8_max
    otherwise): e4m3fn has no inf and would turn an overflow into NaN. An
    all-zero block gets descale 1 and zeros, never NaN or inf.

    ``per="tensor"``: one block, descale of shape [1]. ``per="head"``: one
    block per (batch, head), descale [batch, heads]; for q of a GQA call
    give ``heads_kv`` (k.shape[1]): then a block is the heads // heads_kv
    query heads that share a KV head, descale [batch, heads_kv], the shape
    the kernel takes. Computed with torch ops on x's device (one
    synchronisation: a non-finite element is a UserError)."""
    if not isinstance(x, torch.Tensor):
        raise _api.UserError(f"quantize_fp8: x must be a torch.Tensor, got "
                             f"{type(x).__name__}")
    if dtype not in _FP8_MAX:
        raise _api.UserError(f"quantize_fp8: dtype = {dtype!r} is not "
                             f"torch.float8_e4m3fn or torch.float8_e5m2")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise _api.UserError(f"quantize_fp8: x has dtype {x.dtype}, expected"
                             f" torch.bfloat16, torch.float16 or "
                             f"torch.float32")
    if x.dim() != 4:
        raise _api.UserError(f"quantize_fp8: x has shape {list(x.shape)}, "
                             f"expected 4-D [batch, heads, seqlen, "
                             f"head_dim]")
    if per not in ("tensor", "head"):
        raise _api.UserError(f"quantize_fp8: per = {per!r} is not 'tensor' "
                             f"or 'head'")
    batch, heads = x.shape[0], x.shape[1]
    if heads_kv is None:
        heads_kv = heads
    elif per != "head":
        raise _api.UserError("quantize_fp8: heads_kv groups heads for "
                             "per='head'; per='tensor' has one descale")
    if (isinstance(heads_kv, bool) or not isinstance(heads_kv, int)
            or heads_kv < 1 or heads % heads_kv):
        raise _api.UserError(f"quantize_fp8: heads_kv = {heads_kv!r} does "
                             f"not divide heads = {heads}")
    fp8_max = _FP8_MAX[dtype]
    xf = x.detach().float()
    group = heads // heads_kv
    blocks = (1,) if per == "tensor" else (batch, heads_kv)
    # An empty x has amax 0 everywhere (amax of nothing is an error).
    amax = (xf.abs().reshape(_api._prod(blocks), -1).amax(dim=1)
            .reshape(blocks) if xf.numel() else xf.new_zeros(blocks))
    # amax propagates NaN; inf gives inf: both would poison the descale.
    if not bool(torch.isfinite(amax).all()):
        raise _api.UserError("quantize_fp8: x has a non-finite element "
                             "(inf or NaN)")
    # At least the smallest normal f32: amax / fp8_max of a block of values
    # below about 5e-36 underflows (0 / 0 would give NaN codes).
    descale = torch.where(amax > 0,
                          torch.clamp(amax / fp8_max,
                                      min=torch.finfo(torch.float32).tiny),
                          torch.ones_like(amax))
    if per == "tensor":
        scaled = xf / descale
    else:
        scaled = (xf.reshape(batch, heads_kv, group, x.shape[2], x.shape[3])
                  / descale.reshape(batch, heads_kv, 1, 1, 1)
                  ).reshape(x.shape)
    x_fp8 = scaled.clamp(-fp8_max, fp8_max).to(dtype)
    return x_fp8, descale.contiguous()
