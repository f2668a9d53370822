//===- MLIRGen.cpp - Frontend expression trees to the attn dialect --------===//
//
// One mlirGen method per expression kind, switch dispatch (as in MLIR's Toy
// tutorial). The DSL's semantics map onto standard ops where they agree
// (wrapping integer arithmetic, IEEE float ops, minimumf/maximumf for the
// NaN-propagating min/max) and onto attn ops where they do not (attn.div and
// attn.rem never trap, attn.fptosi_sat saturates). `&&`, `||` and `select`
// whose lazily evaluated operand reads a buffer become scf.if, so a guarded
// read is not performed, exactly as the interpreter does.
//
// A backward kernel (KernelKind::Backward) is the same attn.attention, built
// by the same code, plus the score_grad region: the symbolic derivatives of
// frontend/Derivative.h emitted by the same mlirGen methods, so the forward
// and the backward cannot evaluate a mask or a modifier differently.
//
//===----------------------------------------------------------------------===//
#include "flashjit/FrontendToMLIR/MLIRGen.h"

#include "flashjit/Dialect/Attn/IR/Attn.h"
#include "flashjit/frontend/Derivative.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

#include "llvm/Support/Casting.h"

using namespace mlir;

namespace flashjit {
namespace {

/// Whether any of \p d's derivatives reads the score.
bool readsScore(const ScoreModDerivative &d) {
  bool reads = flashjit::readsScore(d.score);
  for (const BufferDerivative &b : d.buffers)
    reads = reads || flashjit::readsScore(b.derivative);
  for (const ParamDerivative &p : d.params)
    reads = reads || flashjit::readsScore(p.derivative);
  return reads;
}

class MLIRGenImpl {
public:
  explicit MLIRGenImpl(MLIRContext &ctx) : b(&ctx) {}

  OwningOpRef<ModuleOp> gen(const AttentionSpec &spec, KernelKind kind,
                            bool gradOfOutput) {
    const Expr &mask = spec.effectiveMask();
    Location l = loc(mask.get());
    OwningOpRef<ModuleOp> module = ModuleOp::create(l);
    b.setInsertionPointToEnd(module->getBody());

    SmallVector<NamedAttribute> params, buffers;
    for (const ParamDecl &p : spec.variant.params())
      params.emplace_back(b.getStringAttr(p.name),
                          TypeAttr::get(scalarType(p.type)));
    for (const BufferDecl &d : spec.variant.buffers())
      buffers.emplace_back(b.getStringAttr(d.name),
                           TypeAttr::get(scalarType(d.elementType)));
    auto op = attn::AttentionOp::create(
        b, l, b.getStringAttr(spec.variant.name()),
        b.getI64IntegerAttr(spec.headDimQK), b.getI64IntegerAttr(spec.headDimV),
        TypeAttr::get(dtype(spec.dtypeQ)), TypeAttr::get(dtype(spec.dtypeK)),
        TypeAttr::get(dtype(spec.dtypeV)), TypeAttr::get(dtype(spec.dtypeO)),
        b.getI64IntegerAttr(spec.headsQ), b.getI64IntegerAttr(spec.headsKV),
        b.getF32FloatAttr(spec.effectiveScale()), b.getBoolAttr(spec.returnLse),
        b.getDictionaryAttr(params), b.getDictionaryAttr(buffers),
        spec.sink ? b.getUnitAttr() : UnitAttr(), UnitAttr());

    Type i32 = b.getI32Type();
    SmallVector<Type> idx(6, i32);
    SmallVector<Location> idxLocs(6, l);
    // mask(batch, head, q_idx, kv_idx, seqlen_q, seqlen_k) -> i1
    Block *maskBlock = b.createBlock(&op.getMask(), {}, idx, idxLocs);
    bindIndices(maskBlock->getArguments());
    Value m = mlirGen(mask);
    attn::YieldOp::create(b, l, m);

    // score(score, batch, head, q_idx, kv_idx, seqlen_q, seqlen_k) -> f32
    const Expr &mod = spec.variant.scoreExpr();
    SmallVector<Type> scoreArgs{b.getF32Type()};
    scoreArgs.append(idx);
    SmallVector<Location> scoreLocs(7, loc(mod.get()));
    Block *scoreBlock = b.createBlock(&op.getScore(), {}, scoreArgs, scoreLocs);
    score_ = scoreBlock->getArgument(0);
    bindIndices(scoreBlock->getArguments().drop_front());
    Value s = mlirGen(mod);
    attn::YieldOp::create(b, loc(mod.get()), s);

    if (kind == KernelKind::Backward)
      genScoreGrad(op, mod, scoreArgs, scoreLocs, gradOfOutput);

    if (failed(verify(*module)))
      return nullptr;
    return module;
  }

private:
  OpBuilder b;
  Value indices_[6];
  Value score_;

  /// The score_grad region: (d_score, score, indices...) -> dS = d_score *
  /// d s'/d score, with dBuffer[idx] += d_score * d s'/d buffer[idx] for
  /// each f32 buffer read and dParam += d_score * d s'/d param for each f32
  /// parameter the modifier reads (frontend/Derivative.h derives them).
  /// The buffer and parameter terms are located at the modifier's line.
  /// \p ofOutput: in the modifier's output where that applies (mlirGen).
  void genScoreGrad(attn::AttentionOp op, const Expr &mod,
                    SmallVector<Type> scoreArgs,
                    SmallVector<Location> scoreLocs, bool ofOutput) {
    ScoreModDerivative d =
        differentiateScoreMod(mod, differentiableParams(mod));
    if (ofOutput && readsScore(d))
      if (std::optional<ScoreModDerivative> y = derivativeInOutput(d, mod)) {
        d = std::move(*y);
        op.setScoreGradOfOutput(true);
      }
    Location l = loc(mod.get());
    scoreArgs.insert(scoreArgs.begin(), b.getF32Type());
    scoreLocs.insert(scoreLocs.begin(), l);
    Block *blk = b.createBlock(&op.getScoreGrad(), {}, scoreArgs, scoreLocs);
    Value dScore = blk->getArgument(0);
    score_ = blk->getArgument(1);
    bindIndices(blk->getArguments().drop_front(2));
    auto isLiteral = [](const Expr &e, float v) {
      auto *c = llvm::dyn_cast<ConstantExpr>(e.get());
      return c && c->type() == ScalarType::Float32 && c->floatValue() == v;
    };
    Value dS =
        isLiteral(d.score, 1.0f)
            ? dScore
            : arith::MulFOp::create(b, l, dScore, mlirGen(d.score)).getResult();
    for (const BufferDerivative &bd : d.buffers) {
      Value g = arith::MulFOp::create(b, l, dScore, mlirGen(bd.derivative));
      attn::BufferGradOp::create(b, loc(bd.index.get()), bd.buffer,
                                 mlirGen(bd.index), g);
    }
    for (const ParamDerivative &pd : d.params) {
      if (isLiteral(pd.derivative, 0.0f))
        continue;
      Value g = arith::MulFOp::create(b, l, dScore, mlirGen(pd.derivative));
      attn::ParamGradOp::create(b, l, pd.param, g);
    }
    attn::YieldOp::create(b, l, dS);
  }

  void bindIndices(ValueRange args) {
    for (unsigned i = 0; i < 6; ++i)
      indices_[i] = args[i];
  }

  Location loc(const ExprNode *n) {
    const std::source_location &s = n->loc();
    return FileLineColLoc::get(b.getStringAttr(s.file_name()), s.line(),
                               s.column());
  }

  Type scalarType(ScalarType t) {
    switch (t) {
    case ScalarType::Bool:
      return b.getI1Type();
    case ScalarType::Int32:
      return b.getI32Type();
    case ScalarType::Int64:
      return b.getI64Type();
    case ScalarType::Float32:
      return b.getF32Type();
    }
    llvm_unreachable("unknown ScalarType");
  }

  Type dtype(DType t) {
    switch (t) {
    case DType::F16:
      return b.getF16Type();
    case DType::BF16:
      return b.getBF16Type();
    case DType::F32:
      return b.getF32Type();
    // The memory types of fp8 inputs. No lowering takes them yet: the CPU
    // backend compiles fp8ComputeSpec (f32) and validateForGpu refuses fp8.
    case DType::E4M3:
      return b.getType<Float8E4M3FNType>();
    case DType::E5M2:
      return b.getType<Float8E5M2Type>();
    }
    llvm_unreachable("unknown DType");
  }

  Value mlirGen(const Expr &e) {
    const ExprNode *n = e.get();
    switch (n->kind()) {
    case ExprKind::Constant:
      return mlirGen(*llvm::cast<ConstantExpr>(n));
    case ExprKind::Index:
      return indices_[static_cast<unsigned>(llvm::cast<IndexExpr>(n)->var())];
    case ExprKind::Score:
      return score_;
    case ExprKind::Param: {
      auto *p = llvm::cast<ParamExpr>(n);
      return attn::ParamOp::create(b, loc(n), scalarType(p->type()), p->name());
    }
    case ExprKind::BufferLoad: {
      auto *l = llvm::cast<BufferLoadExpr>(n);
      return attn::BufferLoadOp::create(b, loc(n), scalarType(l->type()),
                                        l->name(), mlirGen(l->index()));
    }
    case ExprKind::Unary:
      return mlirGen(*llvm::cast<UnaryExpr>(n));
    case ExprKind::Binary:
      return mlirGen(*llvm::cast<BinaryExpr>(n));
    case ExprKind::Select:
      return mlirGen(*llvm::cast<SelectExpr>(n));
    case ExprKind::Cast:
      return mlirGen(*llvm::cast<CastExpr>(n));
    }
    llvm_unreachable("unknown ExprKind");
  }

  Value mlirGen(const ConstantExpr &c) {
    Location l = loc(&c);
    switch (c.type()) {
    case ScalarType::Bool:
      return arith::ConstantOp::create(b, l, b.getBoolAttr(c.boolValue()));
    case ScalarType::Int32:
      return arith::ConstantOp::create(
          b, l, b.getI32IntegerAttr(static_cast<int32_t>(c.intValue())));
    case ScalarType::Int64:
      return arith::ConstantOp::create(b, l, b.getI64IntegerAttr(c.intValue()));
    case ScalarType::Float32:
      return arith::ConstantOp::create(b, l, b.getF32FloatAttr(c.floatValue()));
    }
    llvm_unreachable("unknown ScalarType");
  }

  Value constF32(Location l, float v) {
    return arith::ConstantOp::create(b, l, b.getF32FloatAttr(v));
  }

  Value mlirGen(const UnaryExpr &u) {
    Location l = loc(&u);
    Value a = mlirGen(u.operand());
    bool isFloat = u.type() == ScalarType::Float32;
    switch (u.op()) {
    case UnaryOp::Neg:
      if (isFloat)
        return arith::NegFOp::create(b, l, a);
      return arith::SubIOp::create(
          b, l,
          arith::ConstantOp::create(b, l, b.getIntegerAttr(a.getType(), 0)), a);
    case UnaryOp::Not:
      return arith::XOrIOp::create(
          b, l, a, arith::ConstantOp::create(b, l, b.getBoolAttr(true)));
    case UnaryOp::Abs:
      if (isFloat)
        return math::AbsFOp::create(b, l, a);
      return math::AbsIOp::create(b, l, a);
    case UnaryOp::Exp:
      return math::ExpOp::create(b, l, a);
    case UnaryOp::Exp2:
      return math::Exp2Op::create(b, l, a);
    case UnaryOp::Log:
      return math::LogOp::create(b, l, a);
    case UnaryOp::Tanh:
      return math::TanhOp::create(b, l, a);
    case UnaryOp::Sigmoid: { // 1 / (1 + e^-a)
      Value e = math::ExpOp::create(b, l, arith::NegFOp::create(b, l, a));
      Value one = constF32(l, 1.0f);
      return arith::DivFOp::create(b, l, one,
                                   arith::AddFOp::create(b, l, one, e));
    }
    case UnaryOp::Sqrt:
      return math::SqrtOp::create(b, l, a);
    }
    llvm_unreachable("unknown UnaryOp");
  }

  /// `cond ? then() : otherwise()` evaluating only the taken side.
  Value lazySelect(Location l, Value cond, Type type,
                   llvm::function_ref<Value()> thenFn,
                   llvm::function_ref<Value()> elseFn) {
    auto ifOp = scf::IfOp::create(b, l, TypeRange{type}, cond,
                                  /*withElseRegion=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    scf::YieldOp::create(b, l, thenFn());
    b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(b, l, elseFn());
    return ifOp.getResult(0);
  }

  Value mlirGen(const BinaryExpr &e) {
    Location l = loc(&e);
    BinaryOp op = e.op();
    if ((op == BinaryOp::And || op == BinaryOp::Or) && readsBuffer(e.rhs())) {
      Value a = mlirGen(e.lhs());
      Value shortCircuit =
          arith::ConstantOp::create(b, l, b.getBoolAttr(op == BinaryOp::Or));
      if (op == BinaryOp::And)
        return lazySelect(
            l, a, b.getI1Type(), [&] { return mlirGen(e.rhs()); },
            [&] { return shortCircuit; });
      return lazySelect(
          l, a, b.getI1Type(), [&] { return shortCircuit; },
          [&] { return mlirGen(e.rhs()); });
    }
    Value x = mlirGen(e.lhs()), y = mlirGen(e.rhs());
    ScalarType t = e.lhs().type();
    if (t == ScalarType::Float32) {
      switch (op) {
      case BinaryOp::Add:
        return arith::AddFOp::create(b, l, x, y);
      case BinaryOp::Sub:
        return arith::SubFOp::create(b, l, x, y);
      case BinaryOp::Mul:
        return arith::MulFOp::create(b, l, x, y);
      case BinaryOp::Div:
        return arith::DivFOp::create(b, l, x, y);
      case BinaryOp::Min:
        return arith::MinimumFOp::create(b, l, x, y);
      case BinaryOp::Max:
        return arith::MaximumFOp::create(b, l, x, y);
      case BinaryOp::Eq:
        return arith::CmpFOp::create(b, l, arith::CmpFPredicate::OEQ, x, y);
      case BinaryOp::Ne:
        return arith::CmpFOp::create(b, l, arith::CmpFPredicate::UNE, x, y);
      case BinaryOp::Lt:
        return arith::CmpFOp::create(b, l, arith::CmpFPredicate::OLT, x, y);
      case BinaryOp::Le:
        return arith::CmpFOp::create(b, l, arith::CmpFPredicate::OLE, x, y);
      case BinaryOp::Gt:
        return arith::CmpFOp::create(b, l, arith::CmpFPredicate::OGT, x, y);
      case BinaryOp::Ge:
        return arith::CmpFOp::create(b, l, arith::CmpFPredicate::OGE, x, y);
      default:
        llvm_unreachable("not an f32 operator");
      }
    }
    switch (op) {
    case BinaryOp::Add:
      return arith::AddIOp::create(b, l, x, y);
    case BinaryOp::Sub:
      return arith::SubIOp::create(b, l, x, y);
    case BinaryOp::Mul:
      return arith::MulIOp::create(b, l, x, y);
    case BinaryOp::Div:
      return attn::DivOp::create(b, l, x, y);
    case BinaryOp::Rem:
      return attn::RemOp::create(b, l, x, y);
    case BinaryOp::Min:
      return arith::MinSIOp::create(b, l, x, y);
    case BinaryOp::Max:
      return arith::MaxSIOp::create(b, l, x, y);
    case BinaryOp::Eq:
      return arith::CmpIOp::create(b, l, arith::CmpIPredicate::eq, x, y);
    case BinaryOp::Ne:
      return arith::CmpIOp::create(b, l, arith::CmpIPredicate::ne, x, y);
    case BinaryOp::Lt:
      return arith::CmpIOp::create(b, l, arith::CmpIPredicate::slt, x, y);
    case BinaryOp::Le:
      return arith::CmpIOp::create(b, l, arith::CmpIPredicate::sle, x, y);
    case BinaryOp::Gt:
      return arith::CmpIOp::create(b, l, arith::CmpIPredicate::sgt, x, y);
    case BinaryOp::Ge:
      return arith::CmpIOp::create(b, l, arith::CmpIPredicate::sge, x, y);
    case BinaryOp::And:
      return arith::AndIOp::create(b, l, x, y);
    case BinaryOp::Or:
      return arith::OrIOp::create(b, l, x, y);
    }
    llvm_unreachable("unknown BinaryOp");
  }

  Value mlirGen(const SelectExpr &s) {
    Location l = loc(&s);
    Value c = mlirGen(s.condition());
    if (readsBuffer(s.trueValue()) || readsBuffer(s.falseValue()))
      return lazySelect(
          l, c, scalarType(s.type()), [&] { return mlirGen(s.trueValue()); },
          [&] { return mlirGen(s.falseValue()); });
    Value x = mlirGen(s.trueValue()), y = mlirGen(s.falseValue());
    return arith::SelectOp::create(b, l, c, x, y);
  }

  Value mlirGen(const CastExpr &c) {
    Location l = loc(&c);
    Value a = mlirGen(c.operand());
    ScalarType from = c.operand().type(), to = c.type();
    Type toType = scalarType(to);
    if (from == to)
      return a;
    if (to == ScalarType::Float32) {
      if (from == ScalarType::Bool)
        return arith::UIToFPOp::create(b, l, toType, a);
      return arith::SIToFPOp::create(b, l, toType, a);
    }
    if (from == ScalarType::Float32)
      return attn::FPToSISatOp::create(b, l, toType, a);
    if (from == ScalarType::Bool)
      return arith::ExtUIOp::create(b, l, toType, a);
    if (from == ScalarType::Int32) // to i64
      return arith::ExtSIOp::create(b, l, toType, a);
    return arith::TruncIOp::create(b, l, toType, a); // i64 -> i32 wraps
  }
};

} // namespace

OwningOpRef<ModuleOp> mlirGen(MLIRContext &context, const AttentionSpec &spec,
                              KernelKind kind, bool gradOfOutput) {
  context.loadDialect<attn::AttnDialect>();
  return MLIRGenImpl(context).gen(spec, kind, gradOfOutput);
}

} // namespace flashjit
