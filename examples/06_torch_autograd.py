"""06: a flashjit variant in a PyTorch training step.

A causal attention layer with a learned per-head ALiBi slope (a captured f32
buffer that requires grad): flashjit computes the forward and, through
torch.autograd, the backward (dQ, dK, dV and d slopes; on the CPU target
today, the GPU backward is not wired into the Python package yet). The
gradients are checked against float64 torch autograd of the same formula;
the script exits non-zero on a mismatch and with 77 (CTest's skip code) when
torch is not installed.

Run: PYTHONPATH=python FLASHJIT_LIBRARY=build/ci/api/libflashjit_c.so \
     python examples/06_torch_autograd.py
"""

import math
import sys

try:
    import torch
except ImportError:
    print("06_torch_autograd: torch is not installed; skipped")
    sys.exit(77)

import flashjit

MASK = "kv_idx <= q_idx"
SCORE = "score - buffer<f32>(slopes)[head] * cast<f32>(abs(q_idx - kv_idx))"


def reference(q, k, v, slopes):
    """float64 torch: causal, ALiBi bias with the given slopes."""
    q, k, v, slopes = q.double(), k.double(), v.double(), slopes.double()
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    i = torch.arange(q.shape[2])[:, None]
    j = torch.arange(k.shape[2])[None, :]
    s = s - slopes[None, :, None, None] * (i - j).abs()
    s = s.masked_fill(j > i, float("-inf"))
    return torch.softmax(s, -1) @ v


def main():
    torch.manual_seed(0)
    batch, heads, seqlen, head_dim = 2, 4, 77, 32
    q, k, v = (torch.randn(batch, heads, seqlen, head_dim, requires_grad=True)
               for _ in range(3))
    slopes = torch.tensor([2.0 ** -(h + 1) for h in range(heads)],
                          requires_grad=True)
    target = torch.randn(batch, heads, seqlen, head_dim)

    # One training step's forward and backward through flashjit.
    o = flashjit.attention(q, k, v, mask=MASK, score=SCORE,
                           buffers={"slopes": slopes})
    loss = ((o - target) ** 2).mean()
    loss.backward()

    # The same step in float64 torch autograd.
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v, slopes)]
    ref_loss = ((reference(*leaves) - target.double()) ** 2).mean()
    ref_loss.backward()

    worst = 0.0
    for name, got, ref in zip(("dq", "dk", "dv", "dslopes"),
                              (q.grad, k.grad, v.grad, slopes.grad),
                              (t.grad for t in leaves)):
        err = ((got.double() - ref).abs().max() /
               (1 + ref.abs().max())).item()
        worst = max(worst, err)
        print(f"{name:8s} max error {err:.2e} (relative to 1 + max |ref|)")
    print(f"loss {loss.item():.6f}  reference {ref_loss.item():.6f}")
    if worst > 1e-4 or abs(loss.item() - ref_loss.item()) > 1e-5:
        print("06_torch_autograd: MISMATCH")
        return 1
    print("06_torch_autograd: gradients match float64 torch autograd")
    return 0


if __name__ == "__main__":
    sys.exit(main())
