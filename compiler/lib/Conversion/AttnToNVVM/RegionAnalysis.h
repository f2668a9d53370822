//===- RegionAnalysis.h - What the ops of an attn region read --*- C++ -*-===//
//
// The analyses RegionEmitter factors the mask and score regions with:
// which block arguments each top-level op depends on, whether an op reads
// a buffer, and the index distance sitofp(q_idx - kv_idx) recognised so it
// can come from one f32 value per row and key tile. Private to the
// AttnToNVVM conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_REGIONANALYSIS_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_REGIONANALYSIS_H

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/ADT/DenseMap.h"

#include <utility>

namespace flashjit::nvvm {

/// For each top-level op of \p body (its terminator excluded), the OR of
/// the bits \p seeds gives its block arguments ({argument number, bit})
/// over every value it reads, directly, through an earlier op or from an
/// op nested in its regions (a short-circuit && / || / select keeps its
/// right side in scf.if regions that read the arguments directly).
llvm::DenseMap<mlir::Operation *, unsigned>
argumentDependences(mlir::Block &body,
                    llvm::ArrayRef<std::pair<unsigned, unsigned>> seeds);

/// Whether \p o is or contains an attn.buffer_load.
bool readsBuffers(mlir::Operation &o);
/// Whether \p r contains an attn.buffer_load.
bool readsBuffers(mlir::Region &r);

/// Where \p o is sitofp to f32 of \p q - \p kv, \p kv - \p q or math.absi
/// of either: that value built from \p distF (the exact float(q - kv));
/// else null (also when \p distF is null).
mlir::Value floatIndexDistance(mlir::ImplicitLocOpBuilder &b,
                               mlir::Operation &o, mlir::Value distF,
                               mlir::Value q, mlir::Value kv);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_REGIONANALYSIS_H
