//===- Attn.h - The attn dialect ----------------------------------*- C++
//-*-===//
//
// The attn dialect and its operations (see AttnDialect.td and AttnOps.td).
// This header includes MLIR: only compiler-internal code includes it.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_DIALECT_ATTN_IR_ATTN_H
#define FLASHJIT_DIALECT_ATTN_IR_ATTN_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "flashjit/Dialect/Attn/IR/AttnDialect.h.inc"

#define GET_OP_CLASSES
#include "flashjit/Dialect/Attn/IR/AttnOps.h.inc"

#endif // FLASHJIT_DIALECT_ATTN_IR_ATTN_H
