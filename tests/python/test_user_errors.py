"""Bad input through the Python package gets flashjit.UserError naming the
field and the value (issue 21; the new-user findings of session 10): the
backward's outputs, run_paged / merge_states overlaps, page-table lengths,
grads lists, f32 overflow, unknown keywords, non-int sizes, and torch
inputs that require grad on a path without autograd. Each refusal has a
positive control that runs (so the test can fail) and, where it computes,
is checked against the float64 reference."""

import sys
import types

import numpy as np
import pytest

import flashjit
import reference as ref


def _kernel(**kw):
    return flashjit.compile(target="cpu", dtype="fp32", **kw)


def _qkvo(rng, b=1, h=2, s=6, d=16):
    q, k, v, do = (rng.uniform(-1, 1, (b, h, s, d)).astype(np.float32)
                   for _ in range(4))
    return q, k, v, do


def test_backward_outputs_must_not_overlap_inputs_or_each_other():
    rng = ref.rng()
    q, k, v, do = _qkvo(rng)
    kern = _kernel(head_dim=16, heads_q=2, heads_kv=2)
    o, lse = kern.run(q, k, v)
    dq, dk, dv = kern.backward(q, k, v, o, lse, do)
    # The new user's dk = k: dQ came back wrong by 5.38.
    k2 = k.copy()
    with pytest.raises(flashjit.UserError, match="dk overlaps k"):
        kern.backward(q, k2, v, o, lse, do, dk=k2)
    np.testing.assert_array_equal(k2, k)  # nothing written
    # One array as dk and dv: dK came back wrong by 4.19.
    both = np.zeros_like(k)
    with pytest.raises(flashjit.UserError, match="dv overlaps dk"):
        kern.backward(q, k, v, o, lse, do, dk=both, dv=both)
    # Inputs may alias: o given as q was refused ("outputs must not alias
    # inputs"); the result equals the same values in separate memory.
    a = kern.backward(o, k, v, o, lse, do)
    b = kern.backward(o.copy(), k, v, o.copy(), lse, do)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    # The positive control of the disjoint call: finite, matches itself.
    ok = kern.backward(q, k, v, o, lse, do, dk=np.empty_like(k))
    np.testing.assert_array_equal(ok[1], dk)


def test_grads_names_are_checked_in_python():
    rng = ref.rng()
    q, _, _, _ = _qkvo(rng, h=2, s=8)
    o, lse = flashjit.attention(q, q, q, score="score * param<f32>(c)",
                                params={"c": 1.0}, return_lse=True)
    common = dict(score="score * param<f32>(c)", params={"c": 1.0})
    # Once an IndexError.
    with pytest.raises(flashjit.UserError, match=r"grads\[1\] = 'c' repeats"):
        flashjit.attention_backward(q, q, q, o, lse, q, grads=["c", "c"],
                                    **common)
    # Once read letter by letter.
    with pytest.raises(flashjit.UserError, match=r"grads = 'c' is a str"):
        flashjit.attention_backward(q, q, q, o, lse, q, grads="c", **common)
    with pytest.raises(flashjit.UserError, match=r"grads\[0\] = 3 is not"):
        flashjit.attention_backward(q, q, q, o, lse, q, grads=[3], **common)
    dq, dk, dv, g = flashjit.attention_backward(q, q, q, o, lse, q,
                                                grads=["c"], **common)
    assert np.isfinite(g["c"])


def _paged(rng):
    h, d, page = 2, 16, 4
    kern = _kernel(causal="bottom_right", head_dim=d, heads_q=h, heads_kv=h,
                   varlen=True)
    kc = rng.uniform(-1, 1, (8, h, page, d)).astype(np.float32)
    vc = rng.uniform(-1, 1, (8, h, page, d)).astype(np.float32)
    q = rng.uniform(-1, 1, (2, h, 1, d)).astype(np.float32)
    table = dict(kv_indptr=np.array([0, 2, 3], np.int32),
                 kv_indices=np.array([5, 1, 7], np.int32),
                 kv_last_page_len=np.array([3, 4], np.int32))
    return kern, q, kc, vc, table


def _paged_reference(q, kc, vc, table):
    """O of each sequence's tokens gathered out of its pages (float64)."""
    ptr, idx, last = (table[n] for n in ("kv_indptr", "kv_indices",
                                         "kv_last_page_len"))
    outs = []
    for b in range(len(ptr) - 1):
        pages = idx[ptr[b]:ptr[b + 1]]
        k = np.concatenate([kc[p] for p in pages], axis=1)
        v = np.concatenate([vc[p] for p in pages], axis=1)
        n = (len(pages) - 1) * kc.shape[2] + last[b]
        o, _ = ref.attention(q[b:b + 1], k[None, :, :n], v[None, :, :n])
        outs.append(o)
    return np.concatenate(outs)


def test_run_paged_page_table_lengths_and_overlap():
    rng = ref.rng()
    kern, q, kc, vc, table = _paged(rng)
    o, lse = kern.run_paged(q, kc, vc, **table)
    ref.assert_close(o, _paged_reference(q, kc, vc, table), 1e-5, what="o")
    # kv_last_page_len too short (read past its end) and too long.
    for bad in ([3], [3, 4, 1]):
        t = dict(table, kv_last_page_len=np.array(bad, np.int32))
        with pytest.raises(flashjit.UserError,
                           match=rf"kv_last_page_len has {len(bad)} entries,"
                                 r" expected batch = .* = 2"):
            kern.run_paged(q, kc, vc, **t)
    # lse inside out (O came back wrong by 3.33); out inside v_cache.
    out = np.zeros_like(o)
    with pytest.raises(flashjit.UserError, match="lse overlaps o"):
        kern.run_paged(q, kc, vc, out=out,
                       lse=out.reshape(-1)[:4].reshape(2, 2, 1), **table)
    before = vc.copy()
    with pytest.raises(flashjit.UserError, match="o overlaps v_cache"):
        kern.run_paged(q, kc, vc, out=vc[0:2, :, :1], **table)
    np.testing.assert_array_equal(vc, before)
    # seq_lens of a block table: the C call checks it against q's batch.
    with pytest.raises(flashjit.UserError, match="seq_lens"):
        kern.run_paged(q, kc, vc, block_table=np.array([[5, 1]], np.int32),
                       seq_lens=np.array([5, 3], np.int32))


def test_merge_states_partial_overlap_refused_exact_in_place_runs():
    rng = ref.rng()
    os = [rng.uniform(-1, 1, (1, 2, 3, 4)).astype(np.float32)
          for _ in range(2)]
    lses = [rng.uniform(-1, 1, (1, 2, 3)).astype(np.float32)
            for _ in range(2)]
    want_o, want_lse = flashjit.merge_states(os, lses)
    out = np.zeros((1, 2, 3, 4), np.float32)
    with pytest.raises(flashjit.UserError, match="lse_out overlaps o_out"):
        flashjit.merge_states(os, lses, out=out,
                              lse=out.reshape(-1)[:6].reshape(1, 2, 3))
    a, la = os[0].copy(), lses[0].copy()
    flashjit.merge_states([a, os[1]], [la, lses[1]], out=a, lse=la)
    np.testing.assert_array_equal(a, want_o)
    np.testing.assert_array_equal(la, want_lse)


def test_paged_append_caches_must_not_overlap():
    rng = ref.rng()
    kc = np.zeros((4, 1, 2, 8), np.float32)
    vc = np.zeros_like(kc)
    kn = rng.uniform(-1, 1, (2, 1, 1, 8)).astype(np.float32)
    table = dict(block_table=np.array([[0, 1], [2, 3]], np.int32),
                 seq_lens=np.array([3, 4], np.int32))
    with pytest.raises(flashjit.UserError, match="same memory"):
        flashjit.paged_append(kn, kn, kc, kc, **table)
    flashjit.paged_append(kn, kn, kc, vc, **table)
    np.testing.assert_array_equal(kc[1, 0, 0], kn[0, 0, 0])
    np.testing.assert_array_equal(vc[3, 0, 1], kn[1, 0, 0])


def test_values_and_keywords_get_typed_errors():
    # scale=1e300 once packed as inf: "expected ')' at column 45".
    with pytest.raises(flashjit.UserError,
                       match=r"scale = 1e\+300 overflows f32"):
        flashjit.compile(head_dim=16, dtype="fp32", scale=1e300)
    assert "scale=3.0" in flashjit.spec_text(head_dim=16, scale=3.0)
    # Once Python's TypeError.
    with pytest.raises(flashjit.UserError, match="unknown keyword 'heads'"):
        flashjit.compile(heads=4, head_dim=16)
    kern = _kernel(head_dim=16, block_sparse=True)
    bm, _ = kern.block_size
    # Once ctypes.ArgumentError; -1 was reported as a row_offsets count.
    with pytest.raises(flashjit.UserError, match="seqlen_q = '130' is not"):
        kern.block_mask_from_bsr([0, 1], [0], "130", 10)
    with pytest.raises(flashjit.UserError, match="seqlen_q = -1 is outside"):
        kern.block_mask_from_bsr([0, 1], [0], -1, 10)
    mask = kern.block_mask_from_bsr([0, 1], [0], bm, 10)
    assert mask is not None


def test_bools_are_not_taken_as_ints():
    # newuser12: head_dim=True compiled a head_dim 1 kernel.
    for key in ("head_dim", "head_dim_qk", "head_dim_v", "heads_q",
                "heads_kv"):
        with pytest.raises(flashjit.UserError,
                           match=f"^FLASHJIT_USER_ERROR: {key} = True is a "
                                 f"bool, not an int$"):
            flashjit.spec_text(**{key: True})
        with pytest.raises(ValueError, match=f"{key} = False is a bool"):
            flashjit.compile(target="cpu", **{key: False})
    with pytest.raises(flashjit.UserError, match="head_dim = True is a bool"):
        flashjit.compile(head_dim=True, dtype="fp32")
    # numpy's bool scalar too; its integer scalars are ints.
    with pytest.raises(flashjit.UserError, match="heads_q = .*is a bool"):
        flashjit.spec_text(heads_q=np.bool_(True))
    assert "head_dim=16" in flashjit.spec_text(head_dim=np.int64(16))
    with pytest.raises(flashjit.UserError, match="head_dim = 16.0 is not an"):
        flashjit.spec_text(head_dim=16.0)
    # The same call with an int runs and matches the reference.
    rng = ref.rng()
    q, k, v, _ = _qkvo(rng, d=16)
    o, _ = _kernel(head_dim=16, heads_q=2, heads_kv=2).run(q, k, v)
    ref.assert_close(o, ref.attention(q, k, v)[0], 1e-5, what="o")
    # A stream handle given as a bool is refused too (True was stream 1).
    kern = _kernel(head_dim=16, block_sparse=True)
    with pytest.raises(flashjit.UserError, match="stream = True is a bool"):
        kern.build_block_mask(1, 8, 8, stream=True)


def test_a_dtype_mismatch_is_named_before_outputs_are_allocated():
    kern = flashjit.compile(head_dim=16, dtype="bf16", target="cpu")
    q = np.zeros((1, 1, 4, 16), np.float16)
    # Once "bf16 outputs in numpy need ml_dtypes".
    with pytest.raises(flashjit.UserError,
                       match=r"q: dtype float16, but the kernel's spec says "
                             r"bfloat16"):
        kern.run(q, q, q)
    ok = _kernel(head_dim=16)
    qf = np.zeros((1, 1, 4, 16), np.float32)
    o, _ = ok.run(qf, qf, qf)
    assert o.shape == (1, 1, 4, 16)


def test_num_splits_on_the_cpu_is_refused_not_ignored():
    rng = ref.rng()
    kern, q, kc, vc, table = _paged(rng)
    with pytest.raises(flashjit.UserError,
                       match=r"num_splits = 4 on a CPU kernel"):
        kern.run_paged(q, kc, vc, num_splits=4, **table)
    o, _ = kern.run_paged(q, kc, vc, num_splits=1, **table)
    ref.assert_close(o, _paged_reference(q, kc, vc, table), 1e-5, what="o")


class _FakeTorchTensor:
    """Stands in for a torch tensor (``__module__`` "torch") that
    requires grad: the autograd refusal runs before any data is read."""

    __module__ = "torch"

    def __init__(self, requires_grad):
        self.requires_grad = requires_grad


def test_torch_inputs_requiring_grad_on_a_path_without_autograd(monkeypatch):
    grad = {"on": True}
    fake_torch = types.SimpleNamespace(is_grad_enabled=lambda: grad["on"])
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    q = _FakeTorchTensor(True)
    plain = _FakeTorchTensor(False)
    # (block_mask= is differentiable since flashjit_run_backward_ex:
    # tests/python/test_block_mask_training.py.)
    with pytest.raises(flashjit.UserError,
                       match=r"q requires grad, but attention with "
                             r"out= has no autograd"):
        flashjit.attention(q, plain, plain, out=plain)
    with pytest.raises(flashjit.UserError,
                       match=r"k requires grad, but attention with "
                             r"cu_seqlens_q/cu_seqlens_k"):
        flashjit.attention(plain, q, plain, cu_seqlens_q=[0, 1],
                           cu_seqlens_k=[0, 1])
    # Positive controls: no grad needed, or grad mode off, pass the check
    # (and fail later, on the fake tensor's data, with another error).
    for args, on in (((plain, plain, plain), True), ((q, q, q), False)):
        grad["on"] = on
        with pytest.raises(Exception) as e:
            flashjit.attention(*args, out=plain)
        assert "requires grad" not in str(e.value)


def test_nu26_scale_bools_and_huge_ints_are_named():
    # nu26: scale=True compiled scale 1.0 (float(True)); an int parameter
    # of 10**400 quoted all 401 digits (messages quote at most 200 bytes),
    # one of 10**5000 raised Python's ValueError from str().
    for value in (True, np.bool_(False)):
        with pytest.raises(flashjit.UserError,
                           match=r"scale = .* is a bool, not a number"):
            flashjit.spec_text(head_dim=16, scale=value)
    assert "scale=2.0" in flashjit.spec_text(head_dim=16, scale=2.0)
    q = np.zeros((1, 1, 4, 16), np.float32)
    for value in (10**400, -10**5000):
        with pytest.raises(flashjit.UserError) as e:
            flashjit.attention(q, q, q, mask="q_idx - kv_idx < param<i32>(w)",
                               params={"w": value})
        assert "is outside [-2147483648, 2147483647]" in str(e.value)
        assert len(str(e.value)) < 300
        assert "bits)" in str(e.value)
