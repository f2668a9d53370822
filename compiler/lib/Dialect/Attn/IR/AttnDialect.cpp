//===- AttnDialect.cpp - attn dialect and op verifiers --------------------===//
//
// Registers the dialect and checks each op's invariants (region signatures,
// tile shapes, element types). Passes may rely on everything checked here.
//
//===----------------------------------------------------------------------===//
#include "flashjit/Dialect/Attn/IR/Attn.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace flashjit::attn;

#include "flashjit/Dialect/Attn/IR/AttnDialect.cpp.inc"

void AttnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "flashjit/Dialect/Attn/IR/AttnOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static bool isMemoryElementType(Type t) {
  return t.isF16() || t.isBF16() || t.isF32();
}

/// Checks that \p region has one block whose arguments are \p leading
/// followed by six i32 indices, ended by an attn.yield of \p yieldType.
static LogicalResult verifyIndexRegion(Operation *op, Region &region,
                                       StringRef name, ArrayRef<Type> leading,
                                       Type yieldType) {
  if (!region.hasOneBlock())
    return op->emitOpError() << "'" << name << "' region needs one block";
  Block &block = region.front();
  unsigned expected = leading.size() + 6;
  if (block.getNumArguments() != expected)
    return op->emitOpError() << "'" << name << "' region takes " << expected
                             << " arguments, has " << block.getNumArguments();
  for (auto [i, arg] : llvm::enumerate(block.getArguments())) {
    Type want = i < leading.size() ? leading[i]
                                   : IntegerType::get(op->getContext(), 32);
    if (arg.getType() != want)
      return op->emitOpError()
             << "'" << name << "' region argument #" << i << " must be " << want
             << ", got " << arg.getType();
  }
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield)
    return op->emitOpError()
           << "'" << name << "' region must end with attn.yield";
  if (yield.getValue().getType() != yieldType)
    return op->emitOpError()
           << "'" << name << "' region must yield " << yieldType << ", yields "
           << yield.getValue().getType();
  return success();
}

static int64_t dim(Value v, unsigned i) {
  return cast<MemRefType>(v.getType()).getDimSize(i);
}

/// Two static sizes that differ (dynamic sizes always agree).
static bool mismatch(int64_t a, int64_t b) {
  return !ShapedType::isDynamic(a) && !ShapedType::isDynamic(b) && a != b;
}

/// Names region arguments after the DSL's leaves (%score, %batch, %head,
/// %q_idx, %kv_idx, %seqlen_q, %seqlen_k) so the IR reads like the user's
/// expression.
static void nameIndexArgs(Region &region, OpAsmSetValueNameFn setName) {
  static const char *const names[] = {"batch",  "head",     "q_idx",
                                      "kv_idx", "seqlen_q", "seqlen_k"};
  if (region.empty())
    return;
  Block &block = region.front();
  unsigned first = block.getNumArguments() == 8   ? 2
                   : block.getNumArguments() == 7 ? 1
                                                  : 0;
  if (first == 2)
    setName(block.getArgument(0), "d_score");
  if (first)
    setName(block.getArgument(first - 1), "score");
  for (unsigned i = 0; i < 6 && first + i < block.getNumArguments(); ++i)
    setName(block.getArgument(first + i), names[i]);
}

void AttentionOp::getAsmBlockArgumentNames(Region &region,
                                           OpAsmSetValueNameFn setName) {
  nameIndexArgs(region, setName);
}
void MaskSelectOp::getAsmBlockArgumentNames(Region &region,
                                            OpAsmSetValueNameFn setName) {
  nameIndexArgs(region, setName);
}
void MaskReduceOp::getAsmBlockArgumentNames(Region &region,
                                            OpAsmSetValueNameFn setName) {
  nameIndexArgs(region, setName);
}
void ScoreModOp::getAsmBlockArgumentNames(Region &region,
                                          OpAsmSetValueNameFn setName) {
  nameIndexArgs(region, setName);
}
void ScoreGradOp::getAsmBlockArgumentNames(Region &region,
                                           OpAsmSetValueNameFn setName) {
  nameIndexArgs(region, setName);
}

//===----------------------------------------------------------------------===//
// High level
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::verify() {
  if (getHeadDimQk() < 1 || getHeadDimV() < 1)
    return emitOpError() << "head dims must be positive, got head_dim_qk = "
                         << getHeadDimQk()
                         << ", head_dim_v = " << getHeadDimV();
  if (getHeadsQ() < 1 || getHeadsKv() < 1 || getHeadsQ() % getHeadsKv() != 0)
    return emitOpError() << "heads_kv = " << getHeadsKv()
                         << " must be positive and divide heads_q = "
                         << getHeadsQ();
  // Q, K and V may also be fp8 (issue 18: the sm_90a forward reads them;
  // the CPU lowering compiles the f32 spec instead).
  for (Type t : {getDtypeQ(), getDtypeK(), getDtypeV()})
    if (!isMemoryElementType(t) && !isa<Float8E4M3FNType, Float8E5M2Type>(t))
      return emitOpError() << "tensor element type must be f16, bf16, f32 "
                              "or (q, k, v) f8E4M3FN / f8E5M2, got "
                           << t;
  if (!isMemoryElementType(getDtypeO()))
    return emitOpError() << "tensor element type must be f16, bf16 or f32, "
                            "got "
                         << getDtypeO();
  for (NamedAttribute a : getParams())
    if (!isa<TypeAttr>(a.getValue()))
      return emitOpError() << "params entry '" << a.getName().strref()
                           << "' must be a type";
  for (NamedAttribute a : getBuffers())
    if (!isa<TypeAttr>(a.getValue()))
      return emitOpError() << "buffers entry '" << a.getName().strref()
                           << "' must be a type";
  Builder b(getContext());
  if (failed(verifyIndexRegion(*this, getMask(), "mask", {}, b.getI1Type())))
    return failure();
  if (failed(verifyIndexRegion(*this, getScore(), "score", {b.getF32Type()},
                               b.getF32Type())))
    return failure();
  if (getScoreGrad().empty()) {
    if (getScoreGradOfOutput())
      return emitOpError() << "has score_grad_of_output without a score_grad "
                              "region";
    return success();
  }
  // attn.buffer_grad / attn.param_grad check their own placement.
  return verifyIndexRegion(*this, getScoreGrad(), "score_grad",
                           {b.getF32Type(), b.getF32Type()}, b.getF32Type());
}

LogicalResult YieldOp::verify() {
  Operation *parent = (*this)->getParentOp();
  Type want;
  Builder b(getContext());
  if (auto attn = dyn_cast<AttentionOp>(parent))
    want = (*this)->getParentRegion() == &attn.getMask() ? Type(b.getI1Type())
                                                         : Type(b.getF32Type());
  else if (isa<MaskSelectOp, MaskReduceOp>(parent))
    want = b.getI1Type();
  else
    want = b.getF32Type();
  if (getValue().getType() != want)
    return emitOpError() << "must yield " << want << " here, got "
                         << getValue().getType();
  return success();
}

/// The declared type of \p name in the enclosing attn.attention's \p dict
/// attribute ("params" or "buffers"); null when there is no enclosing op.
static FailureOr<Type> declaredType(Operation *op, StringRef dictName,
                                    StringRef name) {
  auto attn = op->getParentOfType<AttentionOp>();
  if (!attn)
    return Type();
  DictionaryAttr dict =
      dictName == "params" ? attn.getParams() : attn.getBuffers();
  auto entry = dyn_cast_or_null<TypeAttr>(dict.get(name));
  if (!entry)
    return op->emitOpError() << "'" << name << "' is not declared in the "
                             << "enclosing attn.attention's " << dictName;
  return entry.getValue();
}

LogicalResult ParamOp::verify() {
  FailureOr<Type> t = declaredType(*this, "params", getName());
  if (failed(t))
    return failure();
  if (*t && *t != getType())
    return emitOpError() << "parameter '" << getName() << "' is declared " << *t
                         << " but read as " << getType();
  return success();
}

LogicalResult BufferLoadOp::verify() {
  if (!getIndex().getType().isInteger(32) &&
      !getIndex().getType().isInteger(64))
    return emitOpError() << "index must be i32 or i64";
  FailureOr<Type> t = declaredType(*this, "buffers", getName());
  if (failed(t))
    return failure();
  if (*t && *t != getType())
    return emitOpError() << "buffer '" << getName() << "' is declared " << *t
                         << " but read as " << getType();
  return success();
}

/// Checks that \p op sits in a score_grad region (of attn.attention or
/// attn.score_grad) and that \p name is declared f32 in \p dictName of the
/// enclosing attn.attention, if any.
static LogicalResult verifyGradTarget(Operation *op, StringRef dictName,
                                      StringRef name) {
  Region *r = op->getParentRegion();
  Operation *parent = op->getParentOp();
  while (parent && !isa<AttentionOp, ScoreGradOp>(parent)) {
    r = parent->getParentRegion();
    parent = parent->getParentOp();
  }
  auto attn = dyn_cast_or_null<AttentionOp>(parent);
  if (!parent || (attn && r != &attn.getScoreGrad()))
    return op->emitOpError() << "must be inside a score_grad region";
  FailureOr<Type> t = declaredType(op, dictName, name);
  if (failed(t))
    return failure();
  if (*t && !(*t).isF32())
    return op->emitOpError()
           << (dictName == "params" ? "parameter '" : "buffer '") << name
           << "' is declared " << *t << "; only f32 ones have gradients";
  return success();
}

LogicalResult BufferGradOp::verify() {
  if (!getIndex().getType().isInteger(32) &&
      !getIndex().getType().isInteger(64))
    return emitOpError() << "index must be i32 or i64";
  return verifyGradTarget(*this, "buffers", getName());
}

LogicalResult ParamGradOp::verify() {
  return verifyGradTarget(*this, "params", getName());
}

LogicalResult DivOp::verify() { return success(); }
LogicalResult RemOp::verify() { return success(); }
LogicalResult FPToSISatOp::verify() { return success(); }

//===----------------------------------------------------------------------===//
// Tile level
//===----------------------------------------------------------------------===//

LogicalResult FillOp::verify() { return success(); }

LogicalResult LoadTileOp::verify() {
  if (!isMemoryElementType(getElemType()))
    return emitOpError() << "element type must be f16, bf16 or f32, got "
                         << getElemType();
  return success();
}

LogicalResult DotOp::verify() {
  bool tl = getTransposeLhs();
  int64_t m = dim(getLhs(), tl ? 1 : 0), k = dim(getLhs(), tl ? 0 : 1);
  int64_t rk = dim(getRhs(), getTransposeRhs() ? 1 : 0);
  int64_t n = dim(getRhs(), getTransposeRhs() ? 0 : 1);
  if (mismatch(k, rk))
    return emitOpError() << "contraction sizes differ: lhs has " << k
                         << ", rhs has " << rk;
  if (mismatch(m, dim(getAcc(), 0)) || mismatch(n, dim(getAcc(), 1)))
    return emitOpError() << "accumulator must be " << m << "x" << n;
  if (getSkipZeroLhs() && getTransposeRhs())
    return emitOpError() << "skip_zero_lhs is for O += P V and the "
                            "backward's lhs-weighted products; it cannot be "
                            "combined with transpose_rhs";
  return success();
}

LogicalResult MaskSelectOp::verify() {
  return verifyIndexRegion(*this, getMask(), "mask", {},
                           IntegerType::get(getContext(), 1));
}

LogicalResult MaskReduceOp::verify() {
  return verifyIndexRegion(*this, getMask(), "mask", {},
                           IntegerType::get(getContext(), 1));
}

LogicalResult ScoreModOp::verify() {
  Type f32 = Float32Type::get(getContext());
  return verifyIndexRegion(*this, getMod(), "mod", {f32}, f32);
}

LogicalResult RowMaxOp::verify() {
  if (mismatch(dim(getScores(), 0), dim(getInit(), 0)) ||
      mismatch(dim(getScores(), 0), dim(getOut(), 0)))
    return emitOpError() << "row counts differ";
  return success();
}

LogicalResult Exp2Op::verify() {
  if (getIn().getType() != getOut().getType())
    return emitOpError() << "input and output must have one type";
  if (mismatch(dim(getIn(), 0), dim(getMax(), 0)))
    return emitOpError() << "row counts differ";
  return success();
}

LogicalResult RescaleOp::verify() {
  if (mismatch(dim(getX(), 0), dim(getFactor(), 0)))
    return emitOpError() << "row counts differ";
  return success();
}

LogicalResult RowSumOp::verify() {
  if (mismatch(dim(getIn(), 0), dim(getAcc(), 0)))
    return emitOpError() << "row counts differ";
  return success();
}

LogicalResult StoreTileOp::verify() {
  if (!isMemoryElementType(getElemType()))
    return emitOpError() << "element type must be f16, bf16 or f32, got "
                         << getElemType();
  if (mismatch(dim(getAcc(), 0), dim(getSum(), 0)))
    return emitOpError() << "row counts differ";
  return success();
}

LogicalResult StoreLseOp::verify() {
  if (mismatch(dim(getMax(), 0), dim(getSum(), 0)))
    return emitOpError() << "row counts differ";
  return success();
}

LogicalResult LoadElemOp::verify() { return success(); }

LogicalResult LoadLseOp::verify() { return success(); }

LogicalResult RowDotOp::verify() {
  if (getLhs().getType() != getRhs().getType())
    return emitOpError() << "operands must have one type";
  if (mismatch(dim(getLhs(), 0), dim(getOut(), 0)))
    return emitOpError() << "row counts differ";
  return success();
}

LogicalResult SoftmaxGradOp::verify() {
  if (getP().getType() != getDp().getType() ||
      getP().getType() != getOut().getType())
    return emitOpError() << "p, dp and out must have one type";
  if (mismatch(dim(getP(), 0), dim(getD(), 0)))
    return emitOpError() << "row counts differ";
  return success();
}

LogicalResult ScoreGradOp::verify() {
  if (getGrad().getType() != getScores().getType())
    return emitOpError() << "grad and scores must have one type";
  Type f32 = Float32Type::get(getContext());
  return verifyIndexRegion(*this, getBody(), "body", {f32, f32}, f32);
}

#define GET_OP_CLASSES
#include "flashjit/Dialect/Attn/IR/AttnOps.cpp.inc"
