//===- BufferBounds.h - Proving buffer reads in range before a call -*- C++
//-*-===//
//
// A GPU kernel reads a captured buffer through a bounds check: an index
// outside [0, size) reads 0 and sets the buffer's status flag, and the host
// turns a set flag into a UserError ("buffer 'x' was read outside [0, n)")
// after the call, which means waiting for the GPU (cuStreamSynchronize and a
// copy) on every call. This file proves on the host, before a call, that no
// read can leave its buffer, so that the runtime may skip that wait:
//
//  - BufferReads collects, once per kernel, every buffer read a variant's
//    kernels make: each BufferLoadExpr of the mask and the score modifier
//    (and for the backward, of the modifier's derivatives and the buffer
//    gradients it writes, at the same indices);
//  - CallPositions describes, per call, every (batch, head, q_idx, kv_idx,
//    seqlen_q, seqlen_k) at which the variant is evaluated: every query head,
//    and per sequence q_idx in [0, seqlen_q) and kv_idx in [0, seqlen_k) with
//    that sequence's lengths (README, "Semantics"; varlen and decode count
//    positions from the sequence's first token);
//  - BufferReads::unproven() evaluates each read's index by interval
//    arithmetic (the rules of classifyTile, TileClass.h) over those
//    positions: a buffer is proven when every read's index interval lies in
//    [0, size). An index that depends on a buffer's value (`table[doc[q]]`),
//    the score, a float or a parameter not given, or an interval reaching
//    outside the buffer, leaves its buffer unproven.
//
// Sound, not complete: leaves range independently (a box), so a proof
// never misses a position, but a relation between leaves the box forgets
// (kv_idx < seqlen_k with seqlen_k varying across sequences) may leave an
// in-range read unproven, and so does a read that a condition guards
// (`q_idx < n && buf[q_idx]`): every read is bounded as if always made.
// The position set must cover every position at which a kernel evaluates a
// flag-setting read; the GPU kernels evaluate reads only at in-range
// positions (VariantTile.h, BlockMaskKernel.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_BUFFERBOUNDS_H
#define FLASHJIT_FRONTEND_BUFFERBOUNDS_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Expr.h"
#include "flashjit/frontend/TileClass.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace flashjit {

class Variant;

/// The positions of one call: \p heads query heads, and sequences (batch
/// indices) each with its seqlen_q and seqlen_k.
class CallPositions {
public:
  /// The most distinct (seqlen_q, seqlen_k) pairs kept as boxes of their own
  /// (boxes()); a call with more is judged over hull() alone.
  static constexpr size_t kMaxBoxes = 8;

  /// Positions of query heads [0, heads) (none for heads <= 0).
  explicit CallPositions(int64_t heads) : heads_(heads) {}

  /// Adds batch indices [first, first + count), each a sequence with
  /// \p seqlenQ queries and \p seqlenK keys. A sequence with no query or no
  /// key has no position (the variant is never evaluated there).
  void add(int64_t first, int64_t count, int64_t seqlenQ, int64_t seqlenK);

  /// True when there is no position.
  bool empty() const { return heads_ <= 0 || sequences_ == 0; }
  /// One box holding every position, the seqlens as ranges (meaningful only
  /// when !empty()).
  IndexBox hull() const { return hull_; }
  /// One box per distinct (seqlen_q, seqlen_k) pair, the batch range being
  /// that of its sequences; empty when there are more than kMaxBoxes pairs.
  const std::vector<IndexBox> &boxes() const { return boxes_; }

private:
  int64_t heads_;
  IndexBox hull_;
  std::vector<IndexBox> boxes_;
  int64_t sequences_ = 0; // with at least one position
  bool overflow_ = false; // more than kMaxBoxes pairs: boxes_ cleared
};

/// Every buffer read the kernels of a variant make, as (buffer, index
/// expression); the index expressions are bounded per call by unproven().
class BufferReads {
public:
  /// No reads.
  BufferReads() = default;
  /// The reads in \p exprs (each shared node visited once).
  explicit BufferReads(std::span<const Expr> exprs);
  /// The reads of \p variant's forward kernels (mask and score modifier);
  /// with \p backward also those of the score modifier's derivatives and
  /// the buffer gradient writes (frontend/Derivative.h). A modifier that is
  /// not differentiable (no backward kernel exists for it) leaves every
  /// buffer unproven rather than throw.
  static BufferReads of(const Variant &variant, bool backward = false);

  /// True when there is no read.
  bool empty() const { return reads_.empty() && !allUnproven_; }

  /// The names (sorted, unique) of the buffers with a read whose index is
  /// not proven inside [0, size) at every position of \p box; a buffer
  /// missing from \p args is unproven. Buffer data is never read (it may be
  /// device memory).
  std::vector<std::string> unproven(const IndexBox &box,
                                    const Arguments &args) const;
  /// The same over every position of a call: the buffers unproven over
  /// at.hull() are tried again over each of at.boxes() (sorted, unique; none
  /// when the call has no position).
  std::vector<std::string> unproven(const CallPositions &at,
                                    const Arguments &args) const;

private:
  struct Read {
    std::string buffer;
    Expr index;
  };
  /// Whether \p read's index lies in its buffer at every position of
  /// \p box (which holds one).
  static bool proven(const Read &read, const IndexBox &box,
                     const Arguments &args);
  std::vector<Read> reads_;
  /// Every buffer unproven, always (a modifier with no derivative).
  bool allUnproven_ = false;
  std::vector<std::string> allNames_;
};

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_BUFFERBOUNDS_H
