"""bench/run_bwd_bench.py and bwd_bench_common.py (issue 15's forward + backward benchmark beside
the peers) without a GPU: argument parsing and its errors, the allowed-pair
counts of every variant against brute-force counting with the same
predicate the reference and Flex use (odd N on both sides of the window,
random document layouts), the FLOP rule, the JSON / markdown outputs, the
variants' DSL text through the C library; with torch, a small CPU run end
to end (flashjit's CPU kernels through autograd beside sdpa's math backend
and eager Flex) and a deliberately wrong flashjit variant that the
correctness check must catch."""

import json
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "bench"))
import bwd_bench_common as rb  # noqa: E402
import run_bwd_bench as runner  # noqa: E402
import reference  # noqa: E402

RNG = reference.rng()


def test_parse_args_defaults_and_lists():
    a = rb.parse_args([])
    assert a.n == [1024, 2048, 4096, 8192, 16384]
    assert a.d == [64, 128, 256]
    assert a.variants == list(rb.VARIANTS)
    assert a.impls == list(rb.IMPLS)
    assert (a.device, a.dtype, a.flex_compile) == ("cuda", "bf16", 1)
    assert a.tag == "d64-128-256_n1024-2048-4096-8192-16384"
    b = rb.parse_args(["--n", "4096, 77", "--d", "128", "--variants",
                       "doc,alibi", "--impls", "flashjit,flex", "--device",
                       "cpu"])
    assert (b.n, b.d, b.variants, b.impls) == (
        [4096, 77], [128], ["doc", "alibi"], ["flashjit", "flex"])
    assert (b.dtype, b.flex_compile) == ("fp32", 0)
    assert rb.parse_args(["--variants", "all"]).variants == list(rb.VARIANTS)


@pytest.mark.parametrize("argv, words", [
    (["--n", "0"], ["--n", "positive"]),
    (["--n", "12,x"], ["--n", "'12,x'"]),
    (["--d", "96", "--hidden", "2048"], ["--d 96", "--hidden 2048"]),
    (["--variants", "dense,sliding"], ["--variants", "'sliding'"]),
    (["--impls", "fa3"], ["--impls", "'fa3'"]),
    (["--reps", "0"], ["--reps 0"]),
    (["--check-heads", "-1"], ["--check-heads -1"]),
    (["--warmup", "-2"], ["--warmup -2"]),
])
def test_parse_args_errors_name_the_option(argv, words):
    with pytest.raises(rb.UserError) as e:
        rb.parse_args(argv)
    for w in words:
        assert w in str(e.value)


def test_main_reports_a_bad_option(capsys):
    assert runner.main(["--variants", "nope"]) == 2
    assert "--variants" in capsys.readouterr().err


def test_flex_on_the_cpu_is_a_skipped_row_not_a_failure():
    with pytest.raises(runner.Unsupported) as e:
        runner.build(None, "flex", None, (None,) * 4, {"device": "cpu"})
    assert str(e.value) == "skipped: no CPU backward in FlexAttention"
    # Under the table's 80-character cut.
    assert len(runner.FLEX_CPU_SKIP) <= 80


def test_device_cuda_without_a_gpu_is_a_clean_error(tmp_path, monkeypatch,
                                                    capsys):
    import types
    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(is_available=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", fake)
    argv = ["--device", "cuda", "--out", str(tmp_path), "--plot", "0"]
    assert runner.main(argv) == 2
    err = capsys.readouterr().err
    assert "--device cuda: torch sees no GPU" in err
    assert "Traceback" not in err


def test_shape_keeps_tokens_and_hidden():
    assert rb.shape(16384, 128) == (2, 16)
    assert rb.shape(1024, 64) == (32, 32)
    assert rb.shape(4096, 256) == (8, 8)
    assert rb.shape(65536, 128) == (1, 16)  # batch at least 1
    assert rb.shape(100, 32, tokens=1000, hidden=64) == (10, 2)


@pytest.mark.parametrize("n, docs", [(1, 16), (5, 16), (16, 16), (1000, 16),
                                     (4097, 3), (300, 1)])
def test_doc_lengths(n, docs):
    seed = int(RNG.integers(1000))
    lengths = rb.doc_lengths(n, docs, seed)
    assert len(lengths) == min(n, docs)
    assert sum(lengths) == n and min(lengths) >= 1
    assert rb.doc_lengths(n, docs, seed) == lengths  # seeded
    ids = rb.doc_ids(lengths)
    assert len(ids) == n and ids == sorted(ids)
    assert ids[-1] == len(lengths) - 1


def test_doc_lengths_depend_on_seed_and_n():
    assert rb.doc_lengths(4096, 16, 0) != rb.doc_lengths(4096, 16, 1)
    assert sum(rb.doc_lengths(4095, 16, 0)) == 4095


def brute_force(variant, n, lengths):
    """Allowed pairs counted cell by cell with rb.allowed on numpy arrays
    (the predicate the fp32 reference and Flex's mask_mod evaluate)."""
    idx = np.arange(n)
    doc = np.array(rb.doc_ids(lengths)) if lengths else None
    m = rb.allowed(variant, idx[:, None], idx[None, :], doc)
    return int(np.broadcast_to(m, (n, n)).sum())


@pytest.mark.parametrize("variant", rb.VARIANTS)
def test_allowed_pairs_match_brute_force(variant):
    ns = [1, 2, 7, 64, rb.WINDOW - 1, rb.WINDOW, rb.WINDOW + 1,
          int(RNG.integers(3, 2500))]
    for n in ns:
        lengths = rb.doc_lengths(n, int(RNG.integers(1, 40)),
                                 int(RNG.integers(100)))
        want = brute_force(variant, n, lengths)
        assert rb.allowed_pairs(variant, n, lengths) == want, (variant, n)


def test_allowed_pairs_closed_forms():
    n = 16384
    assert rb.allowed_pairs("dense", n) == n * n
    assert rb.allowed_pairs("alibi", n) == n * n
    assert rb.allowed_pairs("causal", n) == n * (n + 1) // 2
    assert rb.allowed_pairs("softcap30", n) == n * (n + 1) // 2
    # swa1024: 1024 keys per row once past the first 1024 rows.
    assert rb.allowed_pairs("swa1024", n) == 1024 * 1025 // 2 + \
        (n - 1024) * 1024
    assert rb.allowed_pairs("doc", 10, [3, 7]) == 6 + 28
    with pytest.raises(rb.UserError, match="sum"):
        rb.allowed_pairs("doc", 10, [3, 6])
    with pytest.raises(rb.UserError, match="variant"):
        rb.allowed_pairs("prefix", 10)


def test_flops_rule():
    # Issue 15: forward 4 B H N^2 D over allowed pairs, backward 2.5x.
    b, h = rb.shape(16384, 128)
    f = rb.flops(b, h, 128, rb.allowed_pairs("dense", 16384))
    assert f["fwd"] == 4.0 * 2 * 16 * 16384 ** 2 * 128
    assert f["bwd"] == 2.5 * f["fwd"] and f["total"] == 3.5 * f["fwd"]
    fc = rb.flops(b, h, 128, rb.allowed_pairs("causal", 16384))
    assert math.isclose(fc["fwd"] / f["fwd"], 16385 / 32768)
    assert math.isclose(rb.tflops(1e12, 1.0), 1000.0)
    assert math.isnan(rb.tflops(1e12, None))
    assert math.isnan(rb.tflops(1e12, 0.0))


def test_check_heads():
    assert rb.check_heads(16, 2) == [0, 15]
    assert rb.check_heads(16, 3) == [0, 8, 15]
    assert rb.check_heads(2, 5) == [0, 1]
    assert rb.check_heads(7, 1) == [0]


def test_median():
    assert rb.median([3.0, 1.0, 2.0]) == 2.0
    assert rb.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError):
        rb.median([])


def _timing(fwd, bwd):
    return {"fwd_ms": fwd, "bwd_ms": bwd, "total_ms": fwd + bwd}


def test_rows_json_and_markdown(tmp_path):
    b, h = rb.shape(4096, 128)
    pairs = rb.allowed_pairs("causal", 4096)
    ok = rb.make_row("causal", 128, 4096, b, h, pairs,
                     {"flashjit": _timing(1.0, 3.0),
                      "fa2": _timing(2.0, 5.0),
                      "cudnn": {"error": "cuDNN: CUDA only"}},
                     {"valid": True, "worst": 3.2e-3, "failures": []})
    f = rb.flops(b, h, 128, pairs)
    mine = ok["impls"]["flashjit"]
    assert math.isclose(mine["fwd_tfs"], f["fwd"] / 1.0 / 1e9)
    assert math.isclose(mine["bwd_tfs"], f["bwd"] / 3.0 / 1e9)
    assert math.isclose(mine["total_tfs"], f["total"] / 4.0 / 1e9)
    assert mine["bwd_over_fwd"] == 3.0
    assert ok["ours"] == mine["total_tfs"]  # plot_bench.py's keys
    assert math.isclose(ok["fa2"], f["total"] / 7.0 / 1e9)
    assert math.isnan(ok["cudnn"]) and math.isnan(ok["flex"])
    assert ok["valid"]
    bad = rb.make_row("doc", 64, 1024, 32, 32, 9999,
                      {"flashjit": _timing(1.0, 2.0)},
                      {"valid": False, "worst": 0.5,
                       "failures": ["dK: max 0.5 norm 0.3 NaN 0"]})
    assert not bad["valid"] and math.isnan(bad["ours"])
    assert bad["impls"]["flashjit"]["total_ms"] == 3.0  # kept in the JSON
    meta = {"gpu": "test GPU", "commit": "abc1234", "dtype": "bf16"}
    jpath, mpath = rb.write_outputs(str(tmp_path), "t", meta, [ok, bad])
    data = json.load(open(jpath))
    assert data["meta"]["commit"] == "abc1234"
    assert [r["variant"] for r in data["rows"]] == ["causal", "doc"]
    text = open(mpath).read()
    assert "test GPU" in text and "abc1234" in text
    lines = text.splitlines()
    table = [ln for ln in lines if ln.startswith("| causal") or
             ln.startswith("| doc")]
    # Main table: flashjit's fwd+bwd TF/s; no Flex / cuDNN time: "-".
    main = [c.strip() for c in table[0].split("|")]
    assert main[4] == f"{mine['total_tfs']:.0f}"
    assert main[5] == f"{ok['fa2']:.0f}"
    assert main[9] == main[10] == "-"
    assert "ok (3.2e-03)" in table[0]
    assert "WRONG" in table[1] and "**MISMATCH**" in table[1]
    assert "dK: max 0.5" in text  # the failure is spelled out
    assert "cuDNN: CUDA only" in text
    failed = rb.make_row("alibi", 64, 1024, 32, 32, 1024 * 1024,
                         {"flashjit": {"error": "CompileError: x"}},
                         {"valid": False, "error": "flashjit raised "
                          "CompileError: x", "failures": ["flashjit raised "
                                                          "CompileError: x"]})
    text = rb.markdown(meta, [failed])
    assert "**ERROR** (flashjit failed)" in text and "WRONG" in text
    assert "| alibi | 64 | 1024 | flashjit | CompileError: x |" in text
    # Every row of a table has its header's number of cells.
    widths = {}
    for ln in lines:
        if ln.startswith("|"):
            widths.setdefault(ln.count("|"), 0)
            widths[ln.count("|")] += 1
    assert set(widths) == {16, 12}


def test_flashjit_spec_covers_every_variant():
    for v in rb.VARIANTS:
        kw = rb.flashjit_spec(v)
        assert set(kw) <= {"mask", "score", "causal"}
    assert rb.flashjit_spec("dense") == {}
    assert rb.flashjit_spec("swa1024")["mask"] == \
        "sliding_window(1023, 0, top_left)"
    with pytest.raises(rb.UserError):
        rb.flashjit_spec("nope")


def _library():
    try:
        from flashjit import _capi
        return _capi.default_library()
    except Exception:  # noqa: BLE001 - no C library here
        return None


@pytest.mark.skipif(_library() is None, reason="no flashjit C library")
def test_variant_text_parses():
    import flashjit
    for v in rb.VARIANTS:
        kw = rb.flashjit_spec(v)
        for key in ("mask", "score"):
            if key in kw:
                assert flashjit.canonical_expr(kw[key])
    # The window helper expands to the causal band of 1024 keys.
    text = flashjit.canonical_expr(rb.flashjit_spec("swa1024")["mask"])
    assert "1023" in text or "1024" in text


def _cpu_argv(tmp_path, variants, impls="flashjit,fa2,flex"):
    return ["--device", "cpu", "--tokens", "96", "--hidden", "32", "--n",
            "48", "--d", "16", "--dtype", "fp32", "--variants", variants,
            "--impls", impls, "--reps", "2", "--warmup", "1", "--docs", "3",
            "--check-heads", "2", "--plot", "0", "--out", str(tmp_path)]


def _has_cpu_backward():
    lib = _library()
    return lib is not None and lib.has("flashjit_run_backward")


@pytest.mark.skipif(not _has_cpu_backward(),
                    reason="no flashjit C library with the backward")
def test_cpu_run_end_to_end(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    # A window of 8 keys, so that it differs from causal at N = 48.
    monkeypatch.setattr(rb, "WINDOW", 8)
    assert runner.main(_cpu_argv(tmp_path, "all")) == 0
    data = json.load(open(tmp_path / "bwd_d16_n48.json"))
    rows = data["rows"]
    assert len(rows) == len(rb.VARIANTS)
    for r in rows:
        assert r["valid"], r["check"]
        assert r["B"] == 96 // r["N"] and r["H"] == 2
        ours = r["impls"]["flashjit"]
        assert ours["fwd_ms"] > 0 and ours["bwd_ms"] > 0
        assert ours["total_tfs"] > 0
        # The check compared against the reference (fp32 on both sides:
        # close to rounding) and, for dense / causal, against sdpa (Flex
        # has no backward on the CPU); ALiBi also the slope gradients.
        errs = r["check"]["errors"]["flashjit"]
        assert set(errs) == {"O", "dQ", "dK", "dV"} | (
            {"dslopes"} if r["variant"] == "alibi" else set())
        assert all(e[1] < 1e-4 and e[2] == 0 for e in errs.values()), errs
        if r["variant"] in ("dense", "causal"):
            assert r["check"]["peer"] == "fa2"
            assert "error" not in r["impls"]["fa2"]
        else:
            assert r["check"]["peer"] is None
            assert "dense and causal only" in r["impls"]["fa2"]["error"]
        assert r["impls"]["flex"]["error"] == runner.FLEX_CPU_SKIP
    assert (tmp_path / "bwd_d16_n48.md").exists()
    assert runner.FLEX_CPU_SKIP in open(tmp_path / "bwd_d16_n48.md").read()


@pytest.mark.skipif(not _has_cpu_backward(),
                    reason="no flashjit C library with the backward")
def test_a_wrong_flashjit_variant_is_caught(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    monkeypatch.setattr(rb, "WINDOW", 8)
    real = rb.flashjit_spec

    def wrong(variant):
        kw = real(variant)
        if variant == "swa1024":  # a window one key wider than the peers'
            kw["mask"] = "sliding_window(8, 0, top_left)"
        return kw
    monkeypatch.setattr(runner, "flashjit_spec", wrong)
    assert runner.main(_cpu_argv(tmp_path, "causal,swa1024", "flashjit")) == 1
    out = capsys.readouterr().out
    assert "MISMATCH swa1024" in out and "MISMATCH causal" not in out
    rows = json.load(open(tmp_path / "bwd_d16_n48.json"))["rows"]
    assert [(r["variant"], r["valid"]) for r in rows] == [
        ("causal", True), ("swa1024", False)]
    text = open(tmp_path / "bwd_d16_n48.md").read()
    assert text.count("WRONG") == 1


def test_plot_takes_the_rows(tmp_path):
    pytest.importorskip("matplotlib")
    import plot_bench
    rows = [rb.make_row(v, 128, n, *rb.shape(n, 128),
                        rb.allowed_pairs(v, n, [n]),
                        {"flashjit": _timing(1.0, 2.0),
                         "fa4": _timing(0.5, 1.0)},
                        {"valid": v != "alibi"})
            for v in ("causal", "alibi") for n in (1024, 4096)]
    paths = plot_bench.plot(rows, ["causal", "alibi"], str(tmp_path),
                            "bwd_t", ylabel="fwd+bwd TF/s")
    assert [os.path.basename(p) for p in paths] == ["bwd_t_d128.png"]
    assert os.path.getsize(paths[0]) > 1000


@pytest.mark.parametrize("factor, valid", [(1.0, True), (1.02, False)])
def test_check_catches_a_wrong_slope_gradient(factor, valid):
    # check_case on a torch "flashjit" (fp32 ALiBi attention) whose slope
    # gradient is scaled by ``factor`` while O, dQ, dK and dV stay exact:
    # only d slopes may fail, and must at 2%.
    torch = pytest.importorskip("torch")
    args = rb.parse_args(["--device", "cpu", "--tokens", "64", "--hidden",
                          "32", "--d", "16", "--n", "32"])
    case = runner.Case(torch, args, "alibi", 16, 32)
    q, k, v = (t.detach().clone().requires_grad_() for t in
               (case.q, case.k, case.v))
    slopes = case.slopes.detach().clone().requires_grad_()
    idx = torch.arange(32)
    dist = (idx[:, None] - idx[None, :]).abs().float()

    def run():
        s = slopes + (factor - 1.0) * (slopes - slopes.detach())
        z = q @ k.transpose(-1, -2) / 4.0 - s[None, :, None, None] * dist
        return torch.softmax(z, -1) @ v
    impl = runner.Impl(run, [q, k, v, slopes], case.d_o)
    chk = runner.check_case(torch, case, {"flashjit": impl},
                            {"dtype": "fp32", "check_heads": 2})
    assert chk["heads"] == [0, 1] and chk["peer"] is None
    assert chk["valid"] == valid, chk
    errs = chk["errors"]["flashjit"]
    assert all(errs[t][1] < 1e-5 for t in ("O", "dQ", "dK", "dV")), errs
    if not valid:
        assert [f.split(":")[0] for f in chk["failures"]] == ["dslopes"]
