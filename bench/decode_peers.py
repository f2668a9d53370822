"""Decode peers on the GPU machine: torch sdpa (FlashAttention-2, cuDNN) at
the decode shapes of issue 17 (bf16, D = 128, GQA 32/8, one query token),
TB/s of K + V bytes read. K/V are expanded to 32 heads for the backends
without GQA (the bytes counted stay those of the 8 KV heads, as for
flashjit). Prints one line per (shape, backend)."""
import torch
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa


def main():
    for b, nk in [(8, 32768), (1, 131072), (64, 4096)]:
        q = torch.randn(b, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, 8, nk, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        kv_bytes = b * nk * 8 * 128 * 2 * 2
        for name, backend in [("FA2", SDPBackend.FLASH_ATTENTION),
                              ("cuDNN", SDPBackend.CUDNN_ATTENTION)]:
            try:
                with sdpa_kernel(backend):
                    f = lambda: sdpa(q, k, v, enable_gqa=True)
                    f()
                    ms = triton.testing.do_bench(f, return_mode="median")
                print(f"PEER {name:6s} B={b:<3d} Nk={nk:<6d} {ms:8.3f} ms "
                      f"{kv_bytes / (ms * 1e-3) / 1e12:6.2f} TB/s", flush=True)
            except Exception as e:  # backend refuses the shape
                print(f"PEER {name:6s} B={b:<3d} Nk={nk:<6d} unavailable: "
                      f"{str(e).splitlines()[0][:100]}", flush=True)
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
