"""flashjit with torch (skipped without torch; CI has none, the GPU
machine has it): CPU and CUDA tensors through DLPack, the custom op
flashjit::attention with autograd (against float64 torch autograd of the
reference formula), the fake implementation, and torch.compile with
fullgraph=True (no graph breaks)."""

import math

import pytest

torch = pytest.importorskip("torch")

import flashjit  # noqa: E402
import reference  # noqa: E402
import flashjit.torch as fjt  # noqa: E402
from flashjit import _capi  # noqa: E402

HAVE_BACKWARD = _capi.default_library().has("flashjit_run_backward")
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
CAP = 20.0
MASK = "kv_idx <= q_idx + 3"
SCORE = "param<f32>(cap) * tanh(score / param<f32>(cap))"


def ref_attention(q, k, v, slopes=None, cap=CAP):
    """float64 torch: the mask MASK, the soft-cap SCORE, an optional ALiBi
    bias with ``slopes`` (differentiable), GQA by repeating heads."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, 1)
    v = v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = cap * torch.tanh(s / cap)
    i = torch.arange(q.shape[2], device=q.device)[:, None]
    j = torch.arange(k.shape[2], device=q.device)[None, :]
    if slopes is not None:
        s = s - slopes.double()[None, :, None, None] * (i - j).abs()
    s = s.masked_fill(~(j <= i + 3), float("-inf"))
    return torch.softmax(s, -1) @ v


GEN = torch.Generator(device="cpu").manual_seed(
    int(reference.rng().integers(2**31)))


def make(device, dtype, b=2, hq=4, hkv=2, sq=37, sk=45, d=32):
    """Random q, k, v (seeded by FLASHJIT_TEST_SEED or the time)."""
    def mk(*shape):
        return torch.randn(*shape, generator=GEN).to(device, dtype)
    return mk(b, hq, sq, d), mk(b, hkv, sk, d), mk(b, hkv, sk, d)


def tol(dtype):
    return {torch.float32: 2e-5, torch.float16: 4e-3,
            torch.bfloat16: 3e-2}[dtype]


@pytest.mark.parametrize("device", DEVICES)
def test_forward_matches_reference(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v = make(device, dtype)
    o = flashjit.attention(q, k, v, mask=MASK, score=SCORE,
                           params={"cap": CAP})
    assert o.device.type == device and o.dtype == dtype
    err = (o.double() - ref_attention(q, k, v)).abs().max().item()
    assert err < tol(dtype), err


@pytest.mark.parametrize("device", DEVICES)
def test_dlpack_path_without_autograd(device):
    # out= skips the custom op: plain DLPack into a strided output.
    dtype = torch.float32 if device == "cpu" else torch.float16
    q, k, v = make(device, dtype)
    out = torch.empty(2, 37, 4, 32, device=device, dtype=dtype)
    flashjit.attention(q, k, v, mask=MASK, score=SCORE, params={"cap": CAP},
                       out=out.transpose(1, 2))
    err = (out.transpose(1, 2).double() - ref_attention(q, k, v)).abs()
    assert err.max().item() < tol(dtype)


def test_fake_implementation_gives_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 4, 37, 32)
        k = torch.empty(2, 2, 45, 32)
        v = torch.empty(2, 2, 45, 16)
        o, lse = torch.ops.flashjit.attention(
            q, k, v, [], MASK, "", "", float("nan"), "", "", "", [], [], "")
        assert o.shape == (2, 4, 37, 16) and lse.shape == (2, 4, 37)
        assert lse.dtype == torch.float32


@pytest.mark.skipif(not HAVE_BACKWARD,
                    reason="no flashjit_run_backward in the C library yet")
@pytest.mark.parametrize("device", DEVICES)
def test_autograd_against_float64_reference(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v = (x.requires_grad_() for x in make(device, dtype))
    slopes = torch.rand(4, device=device).requires_grad_()
    score = SCORE + " - buffer<f32>(slope)[head] * " \
        "cast<f32>(abs(q_idx - kv_idx))"
    o = flashjit.attention(q, k, v, mask=MASK, score=score,
                           params={"cap": CAP}, buffers={"slope": slopes})
    w = torch.randn_like(o)
    (o * w).sum().backward()
    got = [x.grad.clone() for x in (q, k, v, slopes)]
    for x in (q, k, v, slopes):
        x.grad = None
    want = ref_attention(q, k, v, slopes)
    (want * w.double()).sum().backward()
    for name, g, x in zip("q k v slope".split(), got, (q, k, v, slopes)):
        err = (g.double() - x.grad.double()).abs().max().item()
        scale = x.grad.double().abs().max().item()
        assert err <= 10 * tol(dtype) * max(1.0, scale), (name, err)


@pytest.mark.skipif(not HAVE_BACKWARD,
                    reason="no flashjit_run_backward in the C library yet")
def test_autograd_function_matches_custom_op():
    q, k, v = (x.requires_grad_() for x in make("cpu", torch.float32))
    opts = fjt.options(mask=MASK, score=SCORE, params={"cap": CAP})
    o, _ = fjt.AttentionFunction.apply(q, k, v, opts)
    o.sum().backward()
    g1 = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    fjt.attention(q, k, v, mask=MASK, score=SCORE,
                  params={"cap": CAP}).sum().backward()
    for a, x in zip(g1, (q, k, v)):
        assert torch.equal(a, x.grad)


def test_torch_compile_has_no_graph_breaks():
    q, k, v = make("cpu", torch.float32)

    def f(q, k, v):
        return flashjit.attention(q, k, v, mask=MASK, score=SCORE,
                                  params={"cap": CAP}) * 2

    explain = torch._dynamo.explain(f)(q, k, v)
    assert explain.graph_break_count == 0, explain.break_reasons
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    out = compiled(q, k, v)
    err = (out.double() - 2 * ref_attention(q, k, v)).abs().max().item()
    assert err < 1e-4


@pytest.mark.skipif(not HAVE_BACKWARD,
                    reason="no flashjit_run_backward in the C library yet")
def test_torch_compile_backward():
    q, k, v = (x.requires_grad_() for x in make("cpu", torch.float32))

    def f(q, k, v):
        return flashjit.attention(q, k, v, mask=MASK, score=SCORE,
                                  params={"cap": CAP}).square().sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    compiled(q, k, v).backward()
    got = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    ref_attention(q, k, v).square().sum().backward()
    for g, x in zip(got, (q, k, v)):
        assert (g.double() - x.grad).abs().max().item() < 1e-3


@pytest.mark.skipif(HAVE_BACKWARD, reason="the C library has the backward")
def test_backward_without_the_c_function_raises():
    q, k, v = (x.requires_grad_() for x in make("cpu", torch.float32))
    o = flashjit.attention(q, k, v, mask=MASK)
    with pytest.raises(NotImplementedError, match="flashjit_run_backward"):
        o.sum().backward()


def _reference_backward(self, q, k, v, o, lse, d_o, *, params=None,
                        buffers=None, grads=(), stream=None, **_):
    """Kernel.backward replaced by float64 torch autograd of ref_attention
    (the plumbing tests below need no C backward). Runs in a thread of its
    own: a custom op's implementation runs with autograd excluded on the
    calling thread."""
    import concurrent.futures

    def grads_of():
        slopes = (buffers or {}).get("slope")
        leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
        s = None if slopes is None else \
            slopes.detach().double().requires_grad_()
        out = ref_attention(*leaves, s, cap=params["cap"])
        torch.autograd.backward(out, d_o.double())
        result = tuple(x.grad.to(y.dtype) for x, y in zip(leaves, (q, k, v)))
        return result + ({"slope": s.grad.float()},) if grads else result

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(grads_of).result()


@pytest.mark.parametrize("mode", ["eager", "compiled", "function"])
def test_autograd_plumbing_with_a_reference_backward(monkeypatch, mode):
    """The custom op's autograd registration, saved tensors, backward op,
    fake backward and per-buffer gradients, with Kernel.backward replaced
    by a float64 reference: gradients must be the reference's."""
    monkeypatch.setattr(flashjit.Kernel, "backward", _reference_backward)
    q, k, v = (x.requires_grad_() for x in make("cpu", torch.float32))
    slopes = torch.rand(4).requires_grad_()
    score = SCORE + " - buffer<f32>(slope)[head] * " \
        "cast<f32>(abs(q_idx - kv_idx))"

    def f(q, k, v, slopes):
        return flashjit.attention(q, k, v, mask=MASK, score=score,
                                  params={"cap": CAP},
                                  buffers={"slope": slopes})

    def g(q, k, v, slopes):  # the plain autograd.Function
        opts = fjt.options(mask=MASK, score=score, params={"cap": CAP},
                           buffer_names=["slope"])
        return fjt.AttentionFunction.apply(q, k, v, opts, slopes)[0]

    fn = {"eager": f, "function": g,
          "compiled": torch.compile(f, fullgraph=True,
                                    backend="aot_eager")}[mode]
    o = fn(q, k, v, slopes)
    w = torch.randn_like(o)
    (o * w).sum().backward()
    got = [x.grad.clone() for x in (q, k, v, slopes)]
    for x in (q, k, v, slopes):
        x.grad = None
    (ref_attention(q, k, v, slopes) * w.double()).sum().backward()
    for name, g, x in zip("q k v slope".split(), got, (q, k, v, slopes)):
        assert g.shape == x.shape and g.dtype == x.dtype, name
        err = (g.double() - x.grad.double()).abs().max().item()
        assert err < 1e-5, (name, err)


def test_autograd_structure_with_int_buffer_and_no_params(monkeypatch):
    """Backward through an op call with no parameters (empty lists), an
    int32 buffer (no gradient) and an f32 one, compiled with inductor."""
    def zero_backward(self, q, k, v, o, lse, d_o, *, grads=(), buffers=None,
                      **_):
        out = (torch.zeros_like(q), torch.ones_like(k), torch.zeros_like(v))
        if not grads:
            return out
        return out + ({n: torch.full_like(buffers[n], 2.0) for n in grads},)

    monkeypatch.setattr(flashjit.Kernel, "backward", zero_backward)
    q, k, v = (x.requires_grad_()
               for x in make("cpu", torch.float32, hq=2, hkv=2))
    doc = torch.zeros(45, dtype=torch.int32)
    bias = torch.zeros(2, requires_grad=True)

    def f(q, k, v, bias):
        return flashjit.attention(
            q, k, v, mask="buffer<i32>(doc)[q_idx] == buffer<i32>(doc)[kv_idx]",
            score="score + buffer<f32>(bias)[head]",
            buffers={"doc": doc, "bias": bias})

    torch.compile(f, fullgraph=True)(q, k, v, bias).sum().backward()
    assert torch.equal(k.grad, torch.ones_like(k))
    assert torch.equal(bias.grad, torch.full_like(bias, 2.0))
    assert torch.equal(q.grad, torch.zeros_like(q))
