//===- PagedTestSupport.h - Random paged caches, [gpu] tests ---*- C++ -*-===//
//
// A random paged KV cache (pages in random order, a shared page, NaN in
// every unused slot) for the decode tests of DecodeGpuTest.cpp and
// DecodeCApiGpuTest.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_GPU_PAGEDTESTSUPPORT_H
#define FLASHJIT_TESTS_GPU_PAGEDTESTSUPPORT_H

#include "GpuTestSupport.h"

#include "flashjit/frontend/Paged.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace flashjit::test {

/// A random paged cache on the device: sequence lengths \p lens, pages in
/// random order, sequence 1 sharing sequence 0's first page when both have
/// a full one, every unused slot and page NaN (0xFFFF).
struct PagedCase {
  int64_t pageSize;
  std::vector<int64_t> lens;
  std::vector<std::vector<int32_t>> pagesOf;
  int64_t numPages = 0, maxPages = 0;
  std::vector<int32_t> indptr, indices, lastLen, table, seqLens;

  PagedCase(std::mt19937_64 &rng, int64_t ps, std::vector<int64_t> l)
      : pageSize(ps), lens(std::move(l)) {
    for (int64_t n : lens)
      numPages += (n + ps - 1) / ps;
    numPages += 2;
    std::vector<int32_t> perm(static_cast<size_t>(numPages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    size_t next = 0;
    for (int64_t n : lens) {
      std::vector<int32_t> p;
      for (int64_t i = 0; i < (n + ps - 1) / ps; ++i)
        p.push_back(perm[next++]);
      maxPages = std::max<int64_t>(maxPages, static_cast<int64_t>(p.size()));
      pagesOf.push_back(p);
    }
    if (lens.size() > 1 && lens[0] >= ps && lens[1] >= ps)
      pagesOf[1][0] = pagesOf[0][0];
    indptr.push_back(0);
    for (size_t b = 0; b < lens.size(); ++b) {
      indices.insert(indices.end(), pagesOf[b].begin(), pagesOf[b].end());
      indptr.push_back(static_cast<int32_t>(indices.size()));
      lastLen.push_back(lens[b] ? static_cast<int32_t>((lens[b] - 1) % ps + 1)
                                : 0);
      for (int64_t c = 0; c < maxPages; ++c)
        table.push_back(
            c < static_cast<int64_t>(pagesOf[b].size()) ? pagesOf[b][c] : -1);
      seqLens.push_back(static_cast<int32_t>(lens[b]));
    }
  }
  PageList list(bool csr) const {
    int64_t batch = static_cast<int64_t>(lens.size());
    return csr ? checkPagedCsr({indptr, indices, lastLen}, batch, numPages,
                               pageSize)
               : checkBlockTable({table, maxPages, seqLens}, batch, numPages,
                                 pageSize);
  }
};

/// Fills the used slots of \p c with random values (shared pages once) and
/// every other element with NaN, then uploads.
inline void fillPaged(GpuTensor &c, const PagedCase &pc, std::mt19937_64 &rng) {
  std::fill(c.host.begin(), c.host.end(), uint8_t(0xFF));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const TensorRef &r = c.hostRef;
  for (size_t b = 0; b < pc.lens.size(); ++b)
    for (int64_t j = 0; j < pc.lens[b]; ++j)
      for (int64_t h = 0; h < r.shape[1]; ++h)
        for (int64_t d = 0; d < r.shape[3]; ++d) {
          int64_t at =
              r.offset(pc.pagesOf[b][j / pc.pageSize], h, j % pc.pageSize, d);
          if (std::isnan(loadAsFloat(r.data, r.dtype, at)))
            storeFromFloat(r.data, r.dtype, at, u(rng));
        }
  c.device.copyFromHost(c.host.data(), c.host.size());
}

} // namespace flashjit::test

#endif // FLASHJIT_TESTS_GPU_PAGEDTESTSUPPORT_H
