//===- RegionEmitter.cpp - The attn regions inside a GPU kernel -----------===//
//
// A FragmentEmitter that clones the mask and score regions of one
// attn.attention into a kernel: attn.param becomes the kernel argument,
// attn.buffer_load a bounds-checked load (out of range: 0, and the buffer's
// status flag is set); f32 divisions may use the divisor's reciprocal
// (fastmath arcp). attn.div, attn.rem and attn.fptosi_sat remain for
// attn-expand-scalar. Tile classification is buildTileClassifier over the
// mask region, the same code the CPU kernels run.
//
//===----------------------------------------------------------------------===//
#include "RegionEmitter.h"
#include "RegionAnalysis.h"

#include "flashjit/Dialect/Attn/IR/Attn.h"
#include "flashjit/Dialect/Attn/Transforms/TileClassifier.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

using namespace mlir;

namespace flashjit::nvvm {
namespace {

/// A FragmentEmitter that clones the regions of one attn.attention.
class RegionEmitter : public FragmentEmitter {
public:
  explicit RegionEmitter(attn::AttentionOp op) : op_(op) {
    for (NamedAttribute p : op.getParams())
      params_.push_back(
          {p.getName().str(), cast<TypeAttr>(p.getValue()).getValue()});
    for (NamedAttribute b : op.getBuffers())
      buffers_.push_back(
          {b.getName().str(), cast<TypeAttr>(b.getValue()).getValue()});
    // DictionaryAttr keeps its entries sorted by name: the ABI order.
  }

  bool hasScoreMod() const override {
    Block &body = op_.getScore().front();
    auto y = cast<attn::YieldOp>(body.getTerminator());
    return !(body.getOperations().size() == 1 &&
             y.getValue() == body.getArgument(0));
  }

  bool hasMask() const override {
    Block &body = op_.getMask().front();
    auto y = cast<attn::YieldOp>(body.getTerminator());
    auto c = y.getValue().getDefiningOp<arith::ConstantOp>();
    auto i = c ? dyn_cast<IntegerAttr>(c.getValue()) : IntegerAttr();
    return !(i && i.getValue().isAllOnes()); // constant true: no mask
  }

  bool maskReadsBuffers() const override { return readsBuffers(op_.getMask()); }
  bool scoreReadsBuffers() const override {
    return readsBuffers(op_.getScore());
  }

  bool hasScoreGrad() const override {
    if (!op_.hasScoreGrad())
      return false;
    Block &body = op_.getScoreGrad().front();
    auto y = cast<attn::YieldOp>(body.getTerminator());
    return !(body.getOperations().size() == 1 &&
             y.getValue() == body.getArgument(0));
  }

  bool scoreGradOfOutput() const override {
    return op_.hasScoreGrad() && op_.getScoreGradOfOutput();
  }

  SmallVector<DataGradSite> dataGradSites() const override {
    SmallVector<DataGradSite> out;
    if (!op_.hasScoreGrad())
      return out;
    Block &body = op_.getScoreGrad().front();
    // Which of (scores, q_idx, kv_idx) each value depends on: bits 1, 2, 4.
    DenseMap<Value, unsigned> dep;
    dep[body.getArgument(0)] = dep[body.getArgument(1)] = 1;
    dep[body.getArgument(4)] = 2;
    dep[body.getArgument(5)] = 4;
    for (Operation &o : body.without_terminator()) {
      unsigned d = 0;
      o.walk([&](Operation *n) {
        for (Value x : n->getOperands())
          d |= dep.lookup(x);
      });
      for (Value r : o.getResults())
        dep[r] = d;
      if (auto g = dyn_cast<attn::BufferGradOp>(o)) {
        unsigned i = dep.lookup(g.getIndex());
        out.push_back({false, unsigned(bufferIndex(g.getName())), (i & 3) != 0,
                       (i & 5) != 0});
      } else if (auto g = dyn_cast<attn::ParamGradOp>(o)) {
        out.push_back({true, unsigned(paramIndex(g.getName())), false, false});
      }
    }
    return out;
  }

  Value emitScoreGrad(OpBuilder &ob, Location loc, const IndexValues &idx,
                      Value dScore, Value score,
                      SmallVectorImpl<DataGradValue> &grads) override {
    Block &body = op_.getScoreGrad().front();
    IRMapping map;
    map.map(body.getArgument(0), dScore);
    map.map(body.getArgument(1), score);
    mapIndices(map, body, 2, idx);
    // The gradient ops are reported, not cloned; the rest as cloneBody.
    Value out = cloneBody(ob, loc, body, map, [&](Operation &o) {
      if (auto g = dyn_cast<attn::BufferGradOp>(o)) {
        grads.push_back({map.lookup(g.getIndex()), map.lookup(g.getValue())});
        return false;
      }
      if (auto g = dyn_cast<attn::ParamGradOp>(o)) {
        grads.push_back({Value(), map.lookup(g.getValue())});
        return false;
      }
      return true;
    });
    return out;
  }

  unsigned numParams() const override { return params_.size(); }
  unsigned numBuffers() const override { return buffers_.size(); }

  SmallVector<Type> extraArgumentTypes(MLIRContext *ctx) const override {
    SmallVector<Type> out;
    for (auto &p : params_)
      out.push_back(p.second);
    for (size_t i = 0; i < buffers_.size(); ++i) {
      out.push_back(LLVM::LLVMPointerType::get(ctx, 1));
      out.push_back(IntegerType::get(ctx, 64));
    }
    return out;
  }

  void setArguments(ValueRange args) override {
    args_.assign(args.begin(), args.end());
  }
  void setStatus(Value status) override { status_ = status; }

  Value emitScore(OpBuilder &b, Location loc, const IndexValues &idx,
                  Value score) override {
    Block &body = op_.getScore().front();
    IRMapping map;
    map.map(body.getArgument(0), score);
    mapIndices(map, body, 1, idx);
    // q_idx and kv_idx are arguments 3 and 4.
    DistanceScope ds(*this, idx.distF, body.getArgument(3),
                     body.getArgument(4));
    auto row = scoreRows_.find({idx.head, idx.qIdx});
    if (row == scoreRows_.end())
      return cloneBody(b, loc, body, map);
    // Only the ops that vary along the row; the others are the row's.
    for (auto [v, f] : llvm::zip(scoreRowOut_, row->second))
      map.map(v, f);
    return cloneBody(b, loc, body, map,
                     [&](Operation &o) { return scoreVaries_.lookup(&o); });
  }

  void beginScoreRowFactors(OpBuilder &ob, Location loc,
                            const IndexValues &base, ArrayRef<Value> heads,
                            ArrayRef<Value> qIdx) override {
    Block &body = op_.getScore().front();
    analyzeScore(body);
    ImplicitLocOpBuilder b(loc, ob);
    auto rowOnly = [&](Operation &o) { return !scoreVaries_.lookup(&o); };
    scoreRowOut_.clear();
    bool reads = false;
    for (Operation &o : body.without_terminator()) {
      if (!rowOnly(o))
        continue;
      reads |= readsBuffers(o);
      // Users inside a nested region count as their top-level op.
      for (Value r : o.getResults())
        if (llvm::any_of(r.getUsers(), [&](Operation *u) {
              Operation *top = body.findAncestorOpInBlock(*u);
              return isa<attn::YieldOp>(top) || scoreVaries_.lookup(top);
            }))
          scoreRowOut_.push_back(r);
    }
    for (auto [h, q] : llvm::zip(heads, qIdx)) {
      if (scoreRows_.count({h, q}))
        continue;
      IndexValues idx = base;
      idx.head = h;
      idx.qIdx = q;
      auto compute = [&] {
        IRMapping map;
        mapIndices(map, body, 1, idx, /*skip=kv_idx*/ 3);
        cloneBody(b, loc, body, map, rowOnly);
        SmallVector<Value> vals;
        for (Value v : scoreRowOut_)
          vals.push_back(map.lookup(v));
        return vals;
      };
      SmallVector<Value> vals;
      if (!reads || scoreRowOut_.empty()) {
        vals = compute();
      } else {
        SmallVector<Type> types;
        for (Value v : scoreRowOut_)
          types.push_back(v.getType());
        Value inRange = arith::CmpIOp::create(b, arith::CmpIPredicate::slt, q,
                                              base.seqlenQ);
        auto ifOp = scf::IfOp::create(b, types, inRange, /*withElse=*/true);
        {
          OpBuilder::InsertionGuard g(b);
          b.setInsertionPointToStart(ifOp.thenBlock());
          scf::YieldOp::create(b, compute());
          b.setInsertionPointToStart(ifOp.elseBlock());
          SmallVector<Value> zeros;
          for (Type t : types)
            zeros.push_back(zeroOf(b, t));
          scf::YieldOp::create(b, zeros);
        }
        vals.assign(ifOp.getResults().begin(), ifOp.getResults().end());
      }
      scoreRows_[{h, q}] = vals;
    }
    ob.setInsertionPoint(b.getInsertionBlock(), b.getInsertionPoint());
  }

  void endScoreRowFactors() override { scoreRows_.clear(); }

  bool scoreElementReadsBuffers() const override {
    if (scoreRows_.empty())
      return scoreReadsBuffers();
    for (Operation &o : op_.getScore().front().without_terminator())
      if (scoreVaries_.lookup(&o) && readsBuffers(o))
        return true;
    return false;
  }

  Value emitMask(OpBuilder &b, Location loc, const IndexValues &idx) override {
    Block &body = op_.getMask().front();
    IRMapping map;
    mapIndices(map, body, 0, idx);
    auto row = rowFactors_.find(idx.qIdx);
    auto col = colFactors_.find(idx.kvIdx);
    if (row == rowFactors_.end() || col == colFactors_.end())
      return cloneBody(b, loc, body, map);
    // Only the ops that depend on both indices (and index-free ones they
    // use); the others come from the row's and the column's values.
    for (auto [v, f] : llvm::zip(factorOut_[0], row->second))
      map.map(v, f);
    for (auto [v, f] : llvm::zip(factorOut_[1], col->second))
      map.map(v, f);
    return cloneBody(b, loc, body, map, [&](Operation &o) {
      unsigned d = dep_.lookup(&o);
      return d == kBoth || d == 0;
    });
  }

  void beginMaskFactors(OpBuilder &ob, Location loc, const IndexValues &base,
                        ArrayRef<Value> qIdx, ArrayRef<Value> kvIdx) override {
    Block &body = op_.getMask().front();
    analyzeDependences(body);
    ImplicitLocOpBuilder b(loc, ob);
    // side 0: rows (ops depending on q_idx only), side 1: columns.
    for (int side = 0; side < 2; ++side) {
      unsigned mine = side == 0 ? kQ : kKV;
      auto inSide = [&](Operation &o) {
        unsigned d = dep_.lookup(&o);
        return d == mine || d == 0;
      };
      // The side's values that the rest of the mask uses.
      SmallVector<Value> &outs = factorOut_[side];
      outs.clear();
      bool reads = false;
      for (Operation &o : body.without_terminator()) {
        if (dep_.lookup(&o) != mine)
          continue;
        reads |= readsBuffers(o);
        for (Value r : o.getResults())
          if (llvm::any_of(r.getUsers(), [&](Operation *u) {
                return isa<attn::YieldOp>(u) || dep_.lookup(u) == kBoth;
              }))
            outs.push_back(r);
      }
      for (Operation &o : body.without_terminator())
        reads |= dep_.lookup(&o) == 0 && readsBuffers(o);
      auto &cache = side == 0 ? rowFactors_ : colFactors_;
      for (Value x : side == 0 ? qIdx : kvIdx) {
        IndexValues idx = base;
        (side == 0 ? idx.qIdx : idx.kvIdx) = x;
        Value limit = side == 0 ? base.seqlenQ : base.seqlenK;
        auto compute = [&]() {
          IRMapping map;
          mapIndices(map, body, 0, idx, side == 0 ? 3u : 2u);
          cloneBody(b, loc, body, map, inSide);
          SmallVector<Value> vals;
          for (Value v : outs)
            vals.push_back(map.lookup(v));
          return vals;
        };
        SmallVector<Value> vals;
        if (!reads || outs.empty()) {
          vals = compute();
        } else {
          // Reads happen only for in-range rows (columns): every in-range
          // element of the row reads them, no out-of-range one does.
          SmallVector<Type> types;
          for (Value v : outs)
            types.push_back(v.getType());
          Value inRange =
              arith::CmpIOp::create(b, arith::CmpIPredicate::slt, x, limit);
          auto ifOp = scf::IfOp::create(b, types, inRange, /*withElse=*/true);
          {
            OpBuilder::InsertionGuard g(b);
            b.setInsertionPointToStart(ifOp.thenBlock());
            scf::YieldOp::create(b, compute());
            b.setInsertionPointToStart(ifOp.elseBlock());
            SmallVector<Value> zeros;
            for (Type t : types)
              zeros.push_back(zeroOf(b, t));
            scf::YieldOp::create(b, zeros);
          }
          vals.assign(ifOp.getResults().begin(), ifOp.getResults().end());
        }
        cache[x] = vals;
      }
    }
    ob.setInsertionPoint(b.getInsertionBlock(), b.getInsertionPoint());
  }

  void endMaskFactors() override {
    rowFactors_.clear();
    colFactors_.clear();
  }

  bool maskElementReadsBuffers() const override {
    if (rowFactors_.empty())
      return maskReadsBuffers();
    for (Operation &o : op_.getMask().front().without_terminator())
      if (readsBuffers(o)) {
        unsigned d = dep_.lookup(&o);
        if (d == kBoth || d == 0)
          return true;
      }
    return false;
  }

  std::pair<Value, Value> emitClassify(OpBuilder &b, Location loc,
                                       const IndexValues &lo,
                                       const IndexValues &hi,
                                       bool bufferRanges) override {
    auto x64 = [&](Value v) {
      return arith::ExtSIOp::create(b, loc, b.getI64Type(), v).getResult();
    };
    attn::TileBoxValues box{x64(lo.batch),   x64(hi.batch),  x64(lo.qIdx),
                            x64(hi.qIdx),    x64(lo.kvIdx),  x64(hi.kvIdx),
                            x64(lo.seqlenQ), x64(lo.seqlenK)};
    // Buffer ranges: plain loads from the kernel's global pointers (the
    // classifier only reads indices inside [0, size)).
    attn::BufferReader reader{
        [this](OpBuilder &, Location, attn::BufferLoadOp load) {
          return args_[params_.size() + 2 * bufferIndex(load.getName()) + 1];
        },
        [this](OpBuilder &ob, Location l, attn::BufferLoadOp load,
               Value index) -> Value {
          Value ptr = args_[params_.size() + 2 * bufferIndex(load.getName())];
          Value p = LLVM::GEPOp::create(ob, l, ptr.getType(), load.getType(),
                                        ptr, ValueRange{index});
          return LLVM::LoadOp::create(ob, l, load.getType(), p, 4);
        }};
    attn::TileClassValues v = attn::buildTileClassifier(
        b, loc, op_.getMask(), box,
        [&](Operation *p) {
          return paramValue(cast<attn::ParamOp>(p).getName());
        },
        bufferRanges ? &reader : nullptr);
    return {v.canBeFalse, v.canBeTrue};
  }

private:
  /// Maps the six index arguments of \p body (from \p first) to \p idx,
  /// except argument \p skip (relative; 6: none), whose value is absent.
  static void mapIndices(IRMapping &map, Block &body, unsigned first,
                         const IndexValues &idx, unsigned skip = 6) {
    Value v[] = {idx.batch, idx.head,    idx.qIdx,
                 idx.kvIdx, idx.seqlenQ, idx.seqlenK};
    for (unsigned i = 0; i < 6; ++i)
      if (i != skip)
        map.map(body.getArgument(first + i), v[i]);
  }

  /// Which of q_idx (kQ) and kv_idx (kKV) each op of the mask depends on.
  static constexpr unsigned kQ = 1, kKV = 2, kBoth = 3;
  void analyzeDependences(Block &body) {
    if (dep_.empty())
      dep_ = argumentDependences(body, {{2, kQ}, {3, kKV}});
  }

  /// Which ops of the score modifier depend on the score or kv_idx
  /// (nonzero).
  void analyzeScore(Block &body) {
    if (!scoreAnalyzed_)
      scoreVaries_ = argumentDependences(body, {{0, 1}, {4, 1}});
    scoreAnalyzed_ = true;
  }

  static Value zeroOf(OpBuilder &b, Type t) {
    Location loc = b.getUnknownLoc();
    if (isa<FloatType>(t))
      return arith::ConstantOp::create(b, loc, b.getFloatAttr(t, 0.0));
    return arith::ConstantOp::create(b, loc, b.getIntegerAttr(t, 0));
  }

  Value paramValue(StringRef name) const {
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].first == name)
        return args_[i];
    llvm_unreachable("attn.param not declared in the attention's params");
  }

  size_t paramIndex(StringRef name) const {
    size_t i = 0;
    while (i < params_.size() && params_[i].first != name)
      ++i;
    assert(i < params_.size() && "parameter not declared");
    return i;
  }

  size_t bufferIndex(StringRef name) const {
    size_t i = 0;
    while (i < buffers_.size() && buffers_[i].first != name)
      ++i;
    assert(i < buffers_.size() && "buffer not declared");
    return i;
  }

  /// A bounds-checked read of element \p index of buffer \p name.
  Value bufferLoad(ImplicitLocOpBuilder &b, StringRef name, Value index,
                   Type type) {
    size_t i = bufferIndex(name);
    Value ptr = args_[params_.size() + 2 * i];
    Value size = args_[params_.size() + 2 * i + 1];
    Type i64 = b.getI64Type();
    if (index.getType() != i64)
      index = arith::ExtSIOp::create(b, i64, index);
    Value zero64 = arith::ConstantOp::create(b, b.getI64IntegerAttr(0));
    Value ok = arith::AndIOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::sge, index, zero64),
        arith::CmpIOp::create(b, arith::CmpIPredicate::slt, index, size));
    auto ifOp = scf::IfOp::create(b, TypeRange{type}, ok, /*withElse=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    Value p =
        LLVM::GEPOp::create(b, ptr.getType(), type, ptr, ValueRange{index});
    scf::YieldOp::create(
        b, LLVM::LoadOp::create(b, type, p, /*alignment=*/4).getResult());
    b.setInsertionPointToStart(ifOp.elseBlock());
    Value flag =
        LLVM::GEPOp::create(b, status_.getType(), b.getI32Type(), status_,
                            ArrayRef<LLVM::GEPArg>{int32_t(i)});
    LLVM::StoreOp::create(
        b, arith::ConstantOp::create(b, b.getI32IntegerAttr(1)), flag, 4);
    Value zero = isa<FloatType>(type)
                     ? arith::ConstantOp::create(b, b.getFloatAttr(type, 0.0))
                     : arith::ConstantOp::create(b, b.getIntegerAttr(type, 0));
    scf::YieldOp::create(b, zero);
    return ifOp.getResult(0);
  }

  /// The attn ops inside the regions of \p cloned (an scf.if of a
  /// short-circuit && / || / select) rewritten as cloneBody rewrites
  /// top-level ones; the clone already maps their operands.
  void lowerNested(Operation *cloned) {
    SmallVector<Operation *> inner;
    cloned->walk([&](Operation *n) {
      if (n != cloned &&
          isa<attn::ParamOp, attn::BufferLoadOp, arith::DivFOp>(n))
        inner.push_back(n);
    });
    for (Operation *n : inner) {
      if (auto p = dyn_cast<attn::ParamOp>(n)) {
        p.getResult().replaceAllUsesWith(paramValue(p.getName()));
        p.erase();
      } else if (auto l = dyn_cast<attn::BufferLoadOp>(n)) {
        OpBuilder at(l);
        ImplicitLocOpBuilder nb(l.getLoc(), at);
        Value v = bufferLoad(nb, l.getName(), l.getIndex(), l.getType());
        l.getResult().replaceAllUsesWith(v);
        l.erase();
      } else {
        cast<arith::DivFOp>(n).setFastmath(arith::FastMathFlags::arcp);
      }
    }
  }

  Value cloneBody(OpBuilder &ob, Location loc, Block &body, IRMapping &map,
                  llvm::function_ref<bool(Operation &)> only = nullptr) {
    ImplicitLocOpBuilder b(loc, ob);
    for (Operation &o : body.without_terminator()) {
      if (only && !only(o))
        continue;
      if (auto p = dyn_cast<attn::ParamOp>(o)) {
        map.map(p.getResult(), paramValue(p.getName()));
      } else if (auto l = dyn_cast<attn::BufferLoadOp>(o)) {
        b.setLoc(l.getLoc());
        map.map(
            l.getResult(),
            bufferLoad(b, l.getName(), map.lookup(l.getIndex()), l.getType()));
      } else if (Value d = floatIndexDistance(b, o, distF_, distQ_, distKV_)) {
        // sitofp of the (absolute) index difference from the exact
        // float(q_idx - kv_idx) the caller gave (IndexValues::distF).
        map.map(o.getResult(0), d);
      } else if (isa<arith::DivFOp>(o)) {
        // f32 division may use the divisor's reciprocal (x / 30.0 becomes
        // one multiply, within 1.5 ulp, where IEEE division costs a dozen
        // instructions per element): Triton's default too. The CPU backend
        // divides exactly.
        cast<arith::DivFOp>(b.clone(o, map))
            .setFastmath(arith::FastMathFlags::arcp);
      } else {
        Operation *c = b.clone(o, map);
        if (c->getNumRegions())
          lowerNested(c);
      }
    }
    ob.setInsertionPoint(b.getInsertionBlock(), b.getInsertionPoint());
    return map.lookupOrNull(
        cast<attn::YieldOp>(body.getTerminator()).getValue());
  }

  /// emitScore's IndexValues::distF and the body's q_idx / kv_idx
  /// arguments while it clones.
  struct DistanceScope {
    DistanceScope(RegionEmitter &e, Value d, Value q, Value kv) : e(e) {
      e.distF_ = d;
      e.distQ_ = q;
      e.distKV_ = kv;
    }
    ~DistanceScope() { e.distF_ = Value(); }
    RegionEmitter &e;
  };

  mutable attn::AttentionOp op_; // accessors are non-const
  Value distF_, distQ_, distKV_;
  SmallVector<std::pair<std::string, Type>> params_, buffers_;
  SmallVector<Value> args_;
  Value status_;
  // Mask factoring (beginMaskFactors): per-op dependences, the row and
  // column values the rest uses, and their emitted values per q_idx / kv_idx.
  DenseMap<Operation *, unsigned> dep_;
  SmallVector<Value> factorOut_[2];
  DenseMap<Value, SmallVector<Value>> rowFactors_, colFactors_;
  // Score row factoring (beginScoreRowFactors): which ops vary along a row,
  // the row values the rest uses, and their emitted values per (head,
  // q_idx).
  bool scoreAnalyzed_ = false;
  DenseMap<Operation *, unsigned> scoreVaries_;
  SmallVector<Value> scoreRowOut_;
  DenseMap<std::pair<Value, Value>, SmallVector<Value>> scoreRows_;
};

} // namespace

std::unique_ptr<FragmentEmitter> createRegionEmitter(attn::AttentionOp op) {
  return std::make_unique<RegionEmitter>(op);
}

} // namespace flashjit::nvvm
