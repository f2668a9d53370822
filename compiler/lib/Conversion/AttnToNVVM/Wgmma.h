//===- Wgmma.h - wgmma.mma_async, descriptors and fences ---------*- C++
//-*-===//
//
// The sm_90a warpgroup instruction family: shared-memory matrix
// descriptors of 128-byte-swizzled operands, chains of wgmma.mma_async
// (fence, k16 steps, commit, wait in one inline-PTX block) and the proxy
// fence that hands generic-proxy shared-memory writes to wgmma (PTX ISA,
// "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"). Private to
// the AttnToNVVM conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_WGMMA_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_WGMMA_H

#include "KernelOps.h"

#include <string>

namespace flashjit::nvvm {

/// The wgmma matrix descriptor of a 128-byte-swizzled operand at \p addr
/// (shared-memory byte address, i64; 1024-byte aligned up to the k-step
/// offset) with leading / stride byte offsets \p lbo / \p sbo: start
/// address >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45,
/// swizzle mode 1 (128 bytes) in bits 62-63 (PTX ISA, wgmma "Matrix
/// Descriptor Format"). Adding k-step offsets of less than 1024 bytes to
/// the start address stays inside one swizzle atom.
mlir::Value wgmmaDescriptor(KernelOps &ops, mlir::Value addr, int64_t lbo,
                            int64_t sbo);

/// The high word (bits 32-63) of every wgmmaDescriptor with stride byte
/// offset \p sbo: SBO >> 4 and the 128-byte swizzle mode.
constexpr uint32_t wgmmaDescriptorHigh(int64_t sbo) {
  return uint32_t(sbo >> 4) | (uint32_t(1) << 30);
}

/// One warpgroup's wgmma.mma_async chain, issued, committed and waited for
/// in one inline-asm block (so nothing reads the accumulators early): the
/// m64nN accumulator (N / 2 f32 per thread) becomes \p acc + sum over
/// steps of A_s B_s (k16 each), or the sum alone when \p acc is empty and
/// \p n is given (the first step then ignores the registers' contents:
/// scale-d = 0). A_s is a shared-memory descriptor (\p aDesc[s]) or, when
/// \p aRegs is not empty, 4 packed registers (\p aRegs[4 s..]); B_s is
/// the descriptor \p bDesc[s], MN-major when \p transB. Operands are bf16
/// or fp16 (ops.bf16).
llvm::SmallVector<mlir::Value>
wgmmaChain(KernelOps &ops, llvm::ArrayRef<mlir::Value> acc, int n,
           llvm::ArrayRef<mlir::Value> aDesc, llvm::ArrayRef<mlir::Value> aRegs,
           llvm::ArrayRef<mlir::Value> bDesc, bool transB);

/// wgmmaChain for any operand type: each step is
/// `wgmma.mma_async.sync.aligned.m64n<n><\p step> ..., p|z, 1, 1<\p tail>`,
/// \p step the k, accumulator and operand types (e.g. "k32.f32.e4m3.e4m3",
/// whose A registers are 4 per step as for k16) and \p tail the operands
/// after the scales (the transposes of 16-bit types; empty for fp8).
llvm::SmallVector<mlir::Value>
wgmmaChainOf(KernelOps &ops, llvm::ArrayRef<mlir::Value> acc, int n,
             llvm::ArrayRef<mlir::Value> aDesc,
             llvm::ArrayRef<mlir::Value> aRegs,
             llvm::ArrayRef<mlir::Value> bDesc, const std::string &step,
             const std::string &tail);

/// wgmmaChain with each step's descriptors formed inside the asm block:
/// A_s = \p aBase + \p aSteps[s] (unless \p aRegs is given, as in
/// wgmmaChain), B_s = \p bBase + \p bSteps[s] (offsets in the
/// descriptors' 16-byte units). Only the two bases are values, so a loop
/// around the chain keeps two 64-bit registers live instead of one per step
/// (LLVM hoists loop-invariant descriptors out of the loop). A descriptor
/// A is MN-major when \p transA (imm-trans-a = 1; bf16 / f16).
llvm::SmallVector<mlir::Value>
wgmmaChainOffsets(KernelOps &ops, llvm::ArrayRef<mlir::Value> acc, int n,
                  mlir::Value aBase, llvm::ArrayRef<int64_t> aSteps,
                  llvm::ArrayRef<mlir::Value> aRegs, mlir::Value bBase,
                  llvm::ArrayRef<int64_t> bSteps, bool transB, bool transA);

/// wgmmaChainOffsets without the wait: the chain is issued and committed as
/// one wgmma group and the returned accumulators must not be read (nor \p
/// aRegs changed) before a wgmmaWait that covers the group. With \p
/// narrowHi != 0 the bases are the descriptors' low words (i32) and every
/// descriptor's high word is \p narrowHi (wgmmaDescriptorHigh): the asm
/// forms each 64-bit descriptor from the two, so a base held across a loop
/// takes one register instead of two. The steps must not carry out of the
/// low word (the start address field has 14 bits).
llvm::SmallVector<mlir::Value>
wgmmaIssueOffsets(KernelOps &ops, llvm::ArrayRef<mlir::Value> acc, int n,
                  mlir::Value aBase, llvm::ArrayRef<int64_t> aSteps,
                  llvm::ArrayRef<mlir::Value> aRegs, mlir::Value bBase,
                  llvm::ArrayRef<int64_t> bSteps, bool transB, bool transA,
                  uint32_t narrowHi = 0);

/// wgmma.wait_group \p pending: returns \p acc (the accumulators of issued
/// groups, f32) as the values to read once at most \p pending of this
/// warpgroup's groups are still in flight, which must include every group
/// that writes them. \p keep (i32: A operands in registers of groups in
/// flight) stay live up to the wait.
llvm::SmallVector<mlir::Value> wgmmaWait(KernelOps &ops,
                                         llvm::ArrayRef<mlir::Value> acc,
                                         int pending,
                                         llvm::ArrayRef<mlir::Value> keep = {});

/// fence.proxy.async.shared::cta: this thread's shared-memory writes
/// (cp.async) become visible to the async proxy (wgmma's operand reads).
void fenceProxyAsync(KernelOps &ops);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_WGMMA_H
