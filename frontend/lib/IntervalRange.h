//===- IntervalRange.h - Interval of an integer expression ------*- C++ -*-===//
//
// Private to the frontend library: the interval evaluator of TileClass.cpp
// (classifyTile's), exposed for one integer expression so that
// BufferBounds.cpp bounds buffer indices with the same rules.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_LIB_INTERVALRANGE_H
#define FLASHJIT_FRONTEND_LIB_INTERVALRANGE_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Expr.h"
#include "flashjit/frontend/TileClass.h"

#include <optional>

namespace flashjit::detail {

/// An interval holding every value the i32/i64 expression \p e takes with
/// its index leaves anywhere in \p box (each leaf independently), integer
/// parameters at their values in \p args; nullopt when none is known (a
/// float, the score, a buffer's value, a parameter not in \p args, or an
/// operation that may wrap). Buffer values are never read: their data may
/// be device memory.
std::optional<IndexRange> integerRange(const Expr &e, const IndexBox &box,
                                       const Arguments &args);

} // namespace flashjit::detail

#endif // FLASHJIT_FRONTEND_LIB_INTERVALRANGE_H
