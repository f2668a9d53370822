//===- RingSupport.h - Pieces shared by the ring's forward and backward ---===//
//
// Private to runtime/lib: the header every ring buffer carries (source
// rank, ring size, a hash of the layout every rank must share), the hash
// itself, and the rule that a failing rank aborts its ring.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_LIB_RINGSUPPORT_H
#define FLASHJIT_RUNTIME_LIB_RINGSUPPORT_H

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Ring.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace flashjit::runtime::ring {

/// Runs \p f; if it throws, aborts \p transport with the message first, so
/// that the other ranks' waits throw instead of hanging, and rethrows.
template <class F>
auto abortOnError(RingTransport &transport, F &&f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception &e) {
    transport.abort(e.what());
    throw;
  }
}

[[noreturn]] inline void fail(const std::string &message) {
  throw UserError(message, std::source_location());
}

inline constexpr uint64_t kRingMagic = 0x666a5f72696e6731ull; // "fj_ring1"

/// What travels in front of a ring buffer's tensors.
struct Header {
  uint64_t magic, source, ranks, layout;
};

/// FNV-1a over 64-bit values (the layout hash).
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
};

inline void writeHeader(std::vector<char> &buf, int source, int ranks,
                        uint64_t layout) {
  Header h{kRingMagic, static_cast<uint64_t>(source),
           static_cast<uint64_t>(ranks), layout};
  std::memcpy(buf.data(), &h, sizeof h);
}

/// Throws UserError unless \p buf's header is \p source's in a ring of
/// \p ranks with \p layout; \p what names the buffer ("K/V", "dK/dV").
inline void checkHeader(const std::vector<char> &buf, int rank, int source,
                        int ranks, uint64_t layout, const char *what) {
  Header h;
  std::memcpy(&h, buf.data(), sizeof h);
  if (h.magic != kRingMagic || h.source != static_cast<uint64_t>(source) ||
      h.ranks != static_cast<uint64_t>(ranks))
    fail(fmt::format("rank {} received a buffer that is not rank {}'s {} "
                     "of a ring of {} (source {}, ranks {})",
                     rank, source, what, ranks, h.source, h.ranks));
  if (h.layout != layout)
    fail(fmt::format("rank {} received the {} of rank {} with a different "
                     "layout: batch, heads, head dims, local seqlens or "
                     "cu_seqlens differ between the ranks",
                     rank, what, source));
}

/// A packed varlen O [T, H, D] as the [1, H, T, D] view mergeStates takes
/// (an LSE [H, T] as [1, H, T]).
inline TensorRef asMergeView(const TensorRef &t) {
  TensorRef out = t;
  if (t.rank == 3) {
    out.rank = 4;
    out.shape = {1, t.shape[1], t.shape[0], t.shape[2]};
    out.strides = {0, t.strides[1], t.strides[0], t.strides[2]};
  } else {
    out.rank = 3;
    out.shape = {1, t.shape[0], t.shape[1], 1};
    out.strides = {0, t.strides[0], t.strides[1], 0};
  }
  return out;
}

/// RingSchedule::Auto's rule (Ring.h), the same on the CPU and the GPU:
/// the all-gather schedule when the K/V of all \p ranks ranks take no more
/// bytes per token than this rank's Q and O (GQA with few K/V heads, or a
/// short ring, gathers cheaply and saves the R - 1 merges of the ring's
/// partial states).
inline bool preferAllGather(const AttentionSpec &spec, int ranks,
                            int64_t headsQ, int64_t headsKV, int64_t dqk,
                            int64_t dv) {
  int64_t gathered = ranks * headsKV *
                     (dqk * byteSize(spec.dtypeK) + dv * byteSize(spec.dtypeV));
  int64_t local =
      headsQ * (dqk * byteSize(spec.dtypeQ) + dv * byteSize(spec.dtypeO));
  return gathered <= local;
}

/// Whether \p options pick the all-gather schedule (Auto: the rule above).
inline bool useAllGather(const RingOptions &options, const AttentionSpec &spec,
                         int ranks, int64_t headsQ, int64_t headsKV,
                         int64_t dqk, int64_t dv) {
  return options.schedule == RingSchedule::AllGather ||
         (options.schedule == RingSchedule::Auto &&
          preferAllGather(spec, ranks, headsQ, headsKV, dqk, dv));
}

} // namespace flashjit::runtime::ring

#endif // FLASHJIT_RUNTIME_LIB_RINGSUPPORT_H
