#!/usr/bin/env python3
"""Plots the JSON that run_bench.py writes: one PNG per head dim, one panel
per variant, TF/s against N for flashjit and each peer. Every kernel keeps
one colour and marker in every panel (FlexAttention is never drawn in
FlashAttention-2's colour when FA2 has no kernel for a variant), and every
panel has its own legend naming the kernels it shows.

  python3 bench/plot_bench.py bench/results/DATE/bench_*.json [--out DIR]

Needs matplotlib only (no GPU, no torch), so results can be re-plotted
anywhere; run_bench.py calls plot() after a run.
"""
import argparse, json, math, os

# Kernel key in the JSON rows -> (label, colour, marker). Fixed, so a peer
# that is missing from a panel never shifts the others' colours.
KERNELS = [
    ("ours", "flashjit", "tab:blue", "o"),
    ("fa2", "FlashAttention-2", "tab:orange", "s"),
    ("cudnn", "cuDNN", "tab:green", "^"),
    ("flex", "FlexAttention", "tab:red", "D"),
    ("fa4", "FlashAttention-4", "tab:purple", "v"),
]


def plot(rows, variants, out, prefix="bench", ylabel="TF/s (allowed pairs)"):
    """Writes <out>/<prefix>_d<D>.png for each head dim D in rows; returns the
    paths. rows: run_bench.py's (or run_bwd_bench.py's: fwd+bwd TF/s) JSON
    rows; variants: panel order."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    paths = []
    for D in sorted({r["D"] for r in rows}):
        present = [v for v in variants if any(r["D"] == D and r["variant"] == v for r in rows)]
        fig, axes = plt.subplots(1, len(present), figsize=(4.4 * len(present), 4),
                                 sharey=True, squeeze=False)
        for ax, variant in zip(axes[0], present):
            rs = sorted((r for r in rows if r["D"] == D and r["variant"] == variant),
                        key=lambda r: r["N"])
            for key, label, colour, marker in KERNELS:
                pts = [(r["N"], r[key]) for r in rs
                       if r.get(key) is not None and not math.isnan(r[key])]
                if pts:
                    ax.plot(*zip(*pts), marker=marker, color=colour, label=label)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{variant}, D={D}")
            ax.set_xlabel("N")
            ax.grid(True, alpha=0.3)
            if ax.get_lines():
                ax.legend(fontsize=8, loc="best")
        axes[0][0].set_ylabel(ylabel)
        fig.tight_layout()
        path = os.path.join(out, f"{prefix}_d{D}.png")
        fig.savefig(path, dpi=80)
        plt.close(fig)
        paths.append(path)
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+",
                    help="run_bench.py's bench_*.json or run_bwd_bench.py's "
                         "bwd_*.json")
    ap.add_argument("--out", help="directory for the PNGs (default: beside each JSON)")
    ap.add_argument("--variants",
                    default="dense,causal,swa1024,softcap30,alibi,doc")
    a = ap.parse_args()
    for path in a.json:
        rows = json.load(open(path))["rows"]
        out = a.out or os.path.dirname(os.path.abspath(path))
        os.makedirs(out, exist_ok=True)
        prefix = os.path.splitext(os.path.basename(path))[0]
        ylabel = ("fwd+bwd TF/s (allowed pairs)" if prefix.startswith("bwd_")
                  else "TF/s (allowed pairs)")
        for p in plot(rows, a.variants.split(","), out, prefix, ylabel):
            print(p)


if __name__ == "__main__":
    main()
