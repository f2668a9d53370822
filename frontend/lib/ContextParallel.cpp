//===- ContextParallel.cpp - Sequence sharding for ring attention ---------===//
//
// The spec rewrite to global indices, the chunk-pair classifier that lets a
// ring skip empty steps, and the host helpers that cut a global tensor into
// rank slices and put them back (tests and host applications use them).
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/ContextParallel.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Fp8.h"

#include "llvm/Support/Casting.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>

namespace flashjit {
namespace {

[[noreturn]] void fail(const std::string &message) {
  throw UserError(message, std::source_location());
}

/// The four leaf replacements of contextParallelSpec.
struct GlobalIndices {
  Expr q, kv, seqlenQ, seqlenK;
};

/// \p e with every q_idx / kv_idx / seqlen_q / seqlen_k leaf replaced by
/// its global form; node kinds, types and locations are kept (the
/// replacements are i32 like the leaves, so every type rule still holds).
Expr globalize(const Expr &e, const GlobalIndices &g) {
  const ExprNode *n = e.get();
  if (auto *ix = llvm::dyn_cast<IndexExpr>(n)) {
    switch (ix->var()) {
    case IndexVar::QIdx:
      return g.q;
    case IndexVar::KvIdx:
      return g.kv;
    case IndexVar::SeqlenQ:
      return g.seqlenQ;
    case IndexVar::SeqlenK:
      return g.seqlenK;
    default:
      return e;
    }
  }
  if (n->operands().empty())
    return e;
  std::vector<Expr> ops;
  bool changed = false;
  for (const Expr &op : n->operands()) {
    ops.push_back(globalize(op, g));
    changed |= ops.back().get() != op.get();
  }
  if (!changed)
    return e;
  auto loc = n->loc();
  auto type = n->type();
  if (auto *b = llvm::dyn_cast<BufferLoadExpr>(n))
    return Expr(
        std::make_shared<const BufferLoadExpr>(b->name(), type, ops[0], loc));
  if (auto *u = llvm::dyn_cast<UnaryExpr>(n))
    return Expr(std::make_shared<const UnaryExpr>(u->op(), type, ops[0], loc));
  if (auto *b = llvm::dyn_cast<BinaryExpr>(n))
    return Expr(
        std::make_shared<const BinaryExpr>(b->op(), type, ops[0], ops[1], loc));
  if (llvm::isa<SelectExpr>(n))
    return Expr(
        std::make_shared<const SelectExpr>(type, ops[0], ops[1], ops[2], loc));
  if (llvm::isa<CastExpr>(n))
    return Expr(std::make_shared<const CastExpr>(type, ops[0], loc));
  throw InternalError("contextParallelSpec: unknown expression kind");
}

bool readsAnyPosition(const Expr &e) {
  return readsIndex(e, IndexVar::QIdx) || readsIndex(e, IndexVar::KvIdx) ||
         readsIndex(e, IndexVar::SeqlenQ) || readsIndex(e, IndexVar::SeqlenK);
}

int64_t checkedChunkLen(const char *what, int64_t len, int ranks,
                        Sharding sharding) {
  int64_t n = numChunks(ranks, sharding);
  if (len % n != 0)
    fail(fmt::format("{} {} is not divisible by {}, the {} chunks of {} "
                     "rank(s)",
                     what, len, n, toString(sharding), ranks));
  return len / n;
}

/// Copies between the global sequence dim \p dim of \p global and rank
/// \p rank's part of it in \p local (both already sliced to one sequence
/// for varlen); \p toLocal picks the direction.
void copyRankPart(const TensorRef &global, const TensorRef &local, int dim,
                  int64_t chunkLen, int rank, int ranks, Sharding sharding,
                  bool toLocal) {
  std::vector<int64_t> chunks = rankChunks(rank, ranks, sharding);
  for (size_t i = 0; i < chunks.size(); ++i) {
    TensorRef g = sliceDim(global, dim, chunks[i] * chunkLen, chunkLen);
    TensorRef l =
        sliceDim(local, dim, static_cast<int64_t>(i) * chunkLen, chunkLen);
    if (toLocal)
      copyTensor(g, l);
    else
      copyTensor(l, g);
  }
}

void checkShardShapes(const TensorRef &global, const TensorRef &local, int dim,
                      int ranks) {
  if (global.rank != local.rank)
    fail(fmt::format("local.rank = {}, expected global.rank = {}", local.rank,
                     global.rank));
  if (global.dtype != local.dtype)
    fail(fmt::format("local.dtype = {}, expected global.dtype = {}",
                     toString(local.dtype), toString(global.dtype)));
  for (int d = 0; d < global.rank; ++d) {
    int64_t want = d == dim ? global.shape[d] / ranks : global.shape[d];
    if (local.shape[d] != want)
      fail(fmt::format("local.shape[{}] = {}, expected {}", d, local.shape[d],
                       want));
  }
}

void shardDense(const TensorRef &global, const TensorRef &local, int rank,
                int ranks, Sharding sharding, bool toLocal) {
  checkRingRank(rank, ranks);
  if (global.rank < 3)
    fail(fmt::format("global.rank = {}, expected 3 or 4 ([batch, heads, "
                     "seqlen(, head_dim)])",
                     global.rank));
  int64_t len = checkedChunkLen("seqlen", global.shape[2], ranks, sharding);
  checkShardShapes(global, local, 2, ranks);
  copyRankPart(global, local, 2, len, rank, ranks, sharding, toLocal);
}

void shardPacked(const TensorRef &global, const TensorRef &local,
                 std::span<const int32_t> cu, int rank, int ranks,
                 Sharding sharding, bool toLocal) {
  checkRingRank(rank, ranks);
  std::vector<int32_t> localCu = shardCuSeqlens(cu, ranks, sharding);
  // Tokens run along dim 0 of [total, H, D] and dim 1 of an LSE [H, total].
  int dim = global.rank == 2 ? 1 : 0;
  if (global.shape[dim] != cu.back())
    fail(fmt::format("global.shape[{}] = {}, expected cu_seqlens' last "
                     "entry {}",
                     dim, global.shape[dim], cu.back()));
  checkShardShapes(global, local, dim, ranks);
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    int64_t len = cu[b + 1] - cu[b];
    TensorRef g = sliceDim(global, dim, cu[b], len);
    TensorRef l = sliceDim(local, dim, localCu[b], localCu[b + 1] - localCu[b]);
    copyRankPart(g, l, dim, len / numChunks(ranks, sharding), rank, ranks,
                 sharding, toLocal);
  }
}

} // namespace

std::string_view toString(Sharding s) {
  return s == Sharding::Zigzag ? "zigzag" : "contiguous";
}

void checkRingRank(int rank, int ranks) {
  if (ranks < 1 || ranks > kMaxRingRanks)
    fail(fmt::format("ranks = {}, outside [1, {}]", ranks, kMaxRingRanks));
  if (rank < 0 || rank >= ranks)
    fail(fmt::format("rank = {} outside [0, {})", rank, ranks));
}

int64_t numChunks(int ranks, Sharding sharding) {
  checkRingRank(0, ranks);
  return sharding == Sharding::Zigzag ? 2 * int64_t(ranks) : ranks;
}

std::vector<int64_t> rankChunks(int rank, int ranks, Sharding sharding) {
  checkRingRank(rank, ranks);
  if (sharding == Sharding::Contiguous)
    return {rank};
  return {rank, 2 * int64_t(ranks) - 1 - rank};
}

AttentionSpec contextParallelSpec(const AttentionSpec &spec,
                                  DType partialDtype) {
  spec.validate();
  rejectFp8(spec, "context parallelism (ring attention)");
  for (const ParamDecl &p : spec.variant.params())
    for (std::string_view reserved :
         {kCpQChunkParam, kCpKvChunkParam, kCpQChunksParam, kCpKvChunksParam})
      if (p.name == reserved)
        fail(fmt::format("parameter '{}' is reserved for context "
                         "parallelism (contextParallelSpec adds it)",
                         p.name));
  Expr cq = param(kCpQChunkParam, ScalarType::Int32);
  Expr ck = param(kCpKvChunkParam, ScalarType::Int32);
  Expr nq = param(kCpQChunksParam, ScalarType::Int32);
  Expr nk = param(kCpKvChunksParam, ScalarType::Int32);
  GlobalIndices g{q_idx + cq * seqlen_q, kv_idx + ck * seqlen_k, nq * seqlen_q,
                  nk * seqlen_k};
  Expr mask = spec.effectiveMask();
  Expr score = spec.variant.scoreExpr();
  AttentionSpec out = spec;
  out.variant = Variant(spec.variant.name());
  out.variant.mask(readsAnyPosition(mask) ? globalize(mask, g) : mask);
  out.variant.scoreMod(readsAnyPosition(score) ? globalize(score, g) : score);
  out.causal = Causal::None;
  out.returnLse = true;
  out.sink = false;
  out.dtypeO = partialDtype;
  return out;
}

Arguments chunkArguments(const AttentionSpec &ringSpec, const Arguments &args,
                         int64_t qChunk, int64_t kvChunk, int64_t qChunks,
                         int64_t kvChunks) {
  Arguments out = args;
  out.sink = {};
  for (const ParamDecl &p : ringSpec.variant.params()) {
    if (p.name == kCpQChunkParam)
      out.set(p.name, Scalar::i32(qChunk));
    else if (p.name == kCpKvChunkParam)
      out.set(p.name, Scalar::i32(kvChunk));
    else if (p.name == kCpQChunksParam)
      out.set(p.name, Scalar::i32(qChunks));
    else if (p.name == kCpKvChunksParam)
      out.set(p.name, Scalar::i32(kvChunks));
  }
  return out;
}

TileClass classifyChunkPair(const AttentionSpec &ringSpec,
                            const Arguments &chunkArgs, int64_t batch,
                            int64_t chunkLenQ, int64_t chunkLenK,
                            std::span<const int64_t> lensQ,
                            std::span<const int64_t> lensK,
                            const TileClassOptions &options) {
  Expr mask = ringSpec.effectiveMask();
  auto classifyOne = [&](int64_t b0, int64_t b1, int64_t lq, int64_t lk) {
    if (lq == 0 || lk == 0)
      return TileClass::Empty;
    TileBox box{
        {b0, b1}, {0, ringSpec.headsQ - 1}, {0, lq - 1}, {0, lk - 1}, lq, lk};
    return classifyTile(mask, box, chunkArgs, options);
  };
  if (lensQ.empty())
    return batch == 0 ? TileClass::Empty
                      : classifyOne(0, batch - 1, chunkLenQ, chunkLenK);
  bool anyFull = false, anyEmpty = false, anyPartial = false;
  for (size_t b = 0; b < lensQ.size(); ++b) {
    auto bi = static_cast<int64_t>(b);
    TileClass c = classifyOne(bi, bi, lensQ[b], lensK[b]);
    anyFull |= c == TileClass::Full;
    anyEmpty |= c == TileClass::Empty;
    anyPartial |= c == TileClass::Partial;
  }
  if (anyPartial || (anyFull && anyEmpty))
    return TileClass::Partial;
  return anyFull ? TileClass::Full : TileClass::Empty;
}

void shardSequence(const TensorRef &global, const TensorRef &local, int rank,
                   int ranks, Sharding sharding) {
  shardDense(global, local, rank, ranks, sharding, true);
}

void unshardSequence(const TensorRef &local, const TensorRef &global, int rank,
                     int ranks, Sharding sharding) {
  shardDense(global, local, rank, ranks, sharding, false);
}

std::vector<int32_t> shardCuSeqlens(std::span<const int32_t> cuSeqlens,
                                    int ranks, Sharding sharding) {
  checkRingRank(0, ranks);
  if (cuSeqlens.empty())
    fail("cu_seqlens is empty, expected batch + 1 entries");
  checkCuSeqlens("cu_seqlens", cuSeqlens, cuSeqlens.back());
  int64_t n = numChunks(ranks, sharding);
  std::vector<int32_t> out{0};
  for (size_t b = 0; b + 1 < cuSeqlens.size(); ++b) {
    int64_t len = cuSeqlens[b + 1] - cuSeqlens[b];
    if (len % n != 0)
      fail(fmt::format("sequence {} (cu_seqlens[{}] - cu_seqlens[{}] = {}) "
                       "is not divisible by {}, the {} chunks of {} rank(s)",
                       b, b + 1, b, len, n, toString(sharding), ranks));
    out.push_back(static_cast<int32_t>(out.back() + len / ranks));
  }
  return out;
}

void shardVarlen(const TensorRef &global, const TensorRef &local,
                 std::span<const int32_t> cuSeqlens, int rank, int ranks,
                 Sharding sharding) {
  shardPacked(global, local, cuSeqlens, rank, ranks, sharding, true);
}

void unshardVarlen(const TensorRef &local, const TensorRef &global,
                   std::span<const int32_t> cuSeqlens, int rank, int ranks,
                   Sharding sharding) {
  shardPacked(global, local, cuSeqlens, rank, ranks, sharding, false);
}

void copyTensor(const TensorRef &src, const TensorRef &dst) {
  if (src.rank != dst.rank || src.dtype != dst.dtype)
    fail(fmt::format("copy: rank/dtype {}/{} vs {}/{}", src.rank,
                     toString(src.dtype), dst.rank, toString(dst.dtype)));
  std::array<int64_t, 4> shape{1, 1, 1, 1}, ss{}, ds{};
  for (int d = 0; d < src.rank; ++d) {
    if (src.shape[d] != dst.shape[d])
      fail(fmt::format("copy: shape[{}] = {} vs {}", d, src.shape[d],
                       dst.shape[d]));
    shape[d] = src.shape[d];
    ss[d] = src.strides[d];
    ds[d] = dst.strides[d];
  }
  int64_t es = byteSize(src.dtype);
  auto *s = static_cast<const char *>(src.data);
  auto *t = static_cast<char *>(dst.data);
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c)
        for (int64_t d = 0; d < shape[3]; ++d)
          std::memcpy(t + (a * ds[0] + b * ds[1] + c * ds[2] + d * ds[3]) * es,
                      s + (a * ss[0] + b * ss[1] + c * ss[2] + d * ss[3]) * es,
                      es);
}

TensorRef sliceDim(const TensorRef &t, int dim, int64_t start, int64_t len) {
  if (dim < 0 || dim >= t.rank || start < 0 || len < 0 ||
      start + len > t.shape[dim])
    fail(fmt::format("slice [{}, {}) of dim {} outside a tensor of shape[{}] "
                     "= {}",
                     start, start + len, dim, dim,
                     dim >= 0 && dim < 4 ? t.shape[dim] : -1));
  TensorRef out = t;
  out.shape[dim] = len;
  if (t.data)
    out.data = static_cast<char *>(t.data) +
               start * t.strides[dim] * byteSize(t.dtype);
  return out;
}

} // namespace flashjit
