//===- BufferBounds.cpp - Proving buffer reads in range before a call -----===//
//
// The rules and their soundness argument: BufferBounds.h. The intervals
// come from the evaluator of TileClass.cpp (IntervalRange.h), without the
// buffer-range rule: buffer data is never read here.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/BufferBounds.h"

#include "flashjit/frontend/Derivative.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Variant.h"

#include "IntervalRange.h"

#include <llvm/Support/Casting.h>

#include <algorithm>
#include <unordered_set>

namespace flashjit {

void CallPositions::add(int64_t first, int64_t count, int64_t seqlenQ,
                        int64_t seqlenK) {
  if (heads_ <= 0 || count <= 0 || seqlenQ <= 0 || seqlenK <= 0)
    return;
  const IndexRange batch{first, first + count - 1};
  const IndexBox box{batch,
                     {0, heads_ - 1},
                     {0, seqlenQ - 1},
                     {0, seqlenK - 1},
                     {seqlenQ, seqlenQ},
                     {seqlenK, seqlenK}};
  auto widen = [](IndexRange &r, const IndexRange &x) {
    r.lo = std::min(r.lo, x.lo);
    r.hi = std::max(r.hi, x.hi);
  };
  if (sequences_ == 0) {
    hull_ = box;
  } else {
    widen(hull_.batch, box.batch);
    widen(hull_.q, box.q);
    widen(hull_.kv, box.kv);
    widen(hull_.seqlenQ, box.seqlenQ);
    widen(hull_.seqlenK, box.seqlenK);
  }
  sequences_ += count;
  if (overflow_)
    return;
  for (IndexBox &b : boxes_)
    if (b.seqlenQ.lo == seqlenQ && b.seqlenK.lo == seqlenK) {
      widen(b.batch, batch);
      return;
    }
  if (boxes_.size() == kMaxBoxes) {
    overflow_ = true;
    boxes_.clear();
    return;
  }
  boxes_.push_back(box);
}

BufferReads::BufferReads(std::span<const Expr> exprs) {
  std::unordered_set<const ExprNode *> seen;
  // Depth-first; expressions nest at most kMaxExprDepth levels (derivatives
  // a small multiple of that), so the recursion stays shallow.
  auto walk = [&](auto &self, const Expr &e) -> void {
    if (e.isNull() || !seen.insert(e.get()).second)
      return;
    if (auto *l = llvm::dyn_cast<BufferLoadExpr>(e.get()))
      reads_.push_back({l->name(), l->index()});
    for (const Expr &op : e->operands())
      self(self, op);
  };
  for (const Expr &e : exprs)
    walk(walk, e);
}

BufferReads BufferReads::of(const Variant &variant, bool backward) {
  const Expr &score = variant.scoreExpr();
  std::vector<Expr> exprs{variant.maskExpr(), score};
  std::vector<Read> writes;
  bool noDerivative = false;
  if (backward && !score.isNull()) {
    try {
      ScoreModDerivative d =
          differentiateScoreMod(score, differentiableParams(score));
      exprs.push_back(d.score);
      for (const BufferDerivative &b : d.buffers) {
        exprs.push_back(b.derivative);
        writes.push_back({b.buffer, b.index}); // dBuffer[index] +=
      }
      for (const ParamDerivative &p : d.params)
        exprs.push_back(p.derivative);
    } catch (const UserError &) {
      noDerivative = true;
    }
  }
  BufferReads r(exprs);
  r.reads_.insert(r.reads_.end(), writes.begin(), writes.end());
  for (const BufferDecl &b : variant.buffers())
    r.allNames_.push_back(b.name);
  r.allUnproven_ = noDerivative && !r.allNames_.empty();
  return r;
}

bool BufferReads::proven(const Read &read, const IndexBox &box,
                         const Arguments &args) {
  auto it = args.buffers.find(read.buffer);
  if (it == args.buffers.end())
    return false;
  std::optional<IndexRange> r = detail::integerRange(read.index, box, args);
  return r && r->lo >= 0 && r->hi < it->second.size;
}

namespace {
/// Whether \p box holds no position.
bool hasNoPosition(const IndexBox &box) {
  return box.batch.lo > box.batch.hi || box.head.lo > box.head.hi ||
         box.q.lo > box.q.hi || box.kv.lo > box.kv.hi ||
         box.seqlenQ.lo > box.seqlenQ.hi || box.seqlenK.lo > box.seqlenK.hi;
}
} // namespace

std::vector<std::string> BufferReads::unproven(const IndexBox &box,
                                               const Arguments &args) const {
  if (allUnproven_)
    return allNames_;
  std::vector<std::string> out;
  if (hasNoPosition(box))
    return out;
  for (const Read &r : reads_)
    if (std::find(out.begin(), out.end(), r.buffer) == out.end() &&
        !proven(r, box, args))
      out.push_back(r.buffer);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> BufferReads::unproven(const CallPositions &at,
                                               const Arguments &args) const {
  if (allUnproven_)
    return allNames_;
  if (at.empty())
    return {};
  std::vector<std::string> left = unproven(at.hull(), args);
  // With one box the hull is that box; with none, the pairs overflowed.
  if (left.empty() || at.boxes().size() < 2)
    return left;
  std::vector<std::string> out;
  for (const std::string &name : left) {
    bool ok = true;
    for (const IndexBox &box : at.boxes())
      for (const Read &r : reads_)
        ok = ok && (r.buffer != name || proven(r, box, args));
    if (!ok)
      out.push_back(name);
  }
  return out;
}

} // namespace flashjit
