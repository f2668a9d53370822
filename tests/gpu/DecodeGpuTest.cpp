//===- DecodeGpuTest.cpp - Split-KV decode kernels on the GPU -------------===//
//
// The decode kernels of DecodeKernels.h (compiled ahead of time by
// gen_decode_kernels into $FLASHJIT_DECODE_KERNELS, else the matrix
// directory's decode/) against referencePagedAttention: random page order,
// a page shared by two sequences, both page-table layouts, the [pages,
// page_size, heads, dim] cache layout, NaN in every unused slot and page,
// forced split counts (1, 2, odd, 33 and 64: the kernel writes O itself
// with one; with more, the last CTA of each group merges (DecodeMerge::
// Fused) or the merge kernel does (Separate), both tested; empty splits),
// q_len 1..64, a contiguous cache; decode kernels with an attention sink (1
// split = many splits = the reference, empty sequences LSE = sink); calls
// back to back on one stream over pool memory left dirty (the arrival
// counters start at 0 every call); GpuPagedOps' merge_states (2-way, n-way,
// sink) and append against the host versions; NaN and Inf at masked keys
// (issue 21 section 3, [masked]). The [.decodebench] case times K+V
// bandwidth (GQA 32/8, MQA 32/1; the sliding window also over the keys it
// reads); [.decodesplit] runs a few decode calls for ncu.
//
//===----------------------------------------------------------------------===//
#include "DecodeKernels.h"
#include "GpuTestSupport.h"
#include "PagedTestSupport.h"

#include "flashjit/frontend/Paged.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/DecodeKernel.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/Launch.h"
#include "flashjit/runtime/Memory.h"
#include "flashjit/runtime/PagedOps.h"

#include <fmt/format.h>

#include <limits>
#include <numeric>
#include <thread>

using namespace flashjit;
using namespace flashjit::runtime;
using test::fillPaged;
using test::GpuTensor;
using test::PagedCase;

namespace {

/// The decode kernel of the matrix (testing::decodeKernels()) named \p id;
/// an empty one (id "") when there is none.
testing::DecodeKernel decodeKernelById(const std::string &id) {
  for (const auto &c : testing::decodeKernels())
    if (c.id == id)
      return c;
  testing::DecodeKernel none;
  return none;
}

std::string decodeKernelDir() {
  if (const char *env = std::getenv("FLASHJIT_DECODE_KERNELS"))
    return env;
  return test::matrixKernelDir() + "/decode";
}

std::unique_ptr<GpuDecodeKernel> loadDecode(const testing::DecodeKernel &k,
                                            Device &dev) {
  std::string base = decodeKernelDir() + "/" + k.id;
  std::ifstream infoFile(base + ".info"), ptxFile(base + ".ptx");
  INFO("kernel files " << base << ".{info,ptx} (gen_decode_kernels DIR)");
  REQUIRE(infoFile);
  REQUIRE(ptxFile);
  GpuKernelInfo info = test::readKernelInfo(infoFile);
  REQUIRE(infoFile);
  REQUIRE(info.config.kind == KernelKind::Decode);
  std::stringstream ptx;
  ptx << ptxFile.rdbuf();
  return std::make_unique<GpuDecodeKernel>(k.spec, info, ptx.str(), dev);
}

/// A spec with an attention sink: sink[heads_q] uniform in [-2, 3], head 1
/// -inf (no sink), bound on \p va's host and device arguments.
struct SinkArgs {
  std::vector<float> host;
  std::unique_ptr<DeviceBuffer> device;
  SinkArgs(Device &dev, const AttentionSpec &spec, std::mt19937_64 &rng,
           test::VariantArgs &va) {
    if (!spec.sink)
      return;
    std::uniform_real_distribution<float> u(-2.0f, 3.0f);
    for (int h = 0; h < spec.headsQ; ++h)
      host.push_back(h == 1 ? -INFINITY : u(rng));
    device = std::make_unique<DeviceBuffer>(dev, host.size() * 4);
    device->copyFromHost(host.data(), host.size() * 4);
    va.host.bindSink(host.data(), int64_t(host.size()));
    va.device.bindSink(static_cast<const float *>(device->data()),
                       int64_t(host.size()));
  }
};

const char *mergeName(DecodeMerge m) {
  return m == DecodeMerge::Auto    ? "auto"
         : m == DecodeMerge::Fused ? "fused"
                                   : "separate";
}

/// Runs \p kernel on one paged case and checks O and LSE against the
/// float64 paged reference.
void checkPaged(Device &dev, const GpuDecodeKernel &kernel,
                const AttentionSpec &spec, std::vector<int64_t> lens,
                int64_t pageSize, int64_t qLen, bool csr, bool nhd,
                int numSplits, uint64_t seed,
                DecodeMerge merge = DecodeMerge::Auto) {
  INFO("lens " << lens[0] << (lens.size() > 1 ? "," : "")
               << (lens.size() > 1 ? lens[1] : 0) << " ... page_size "
               << pageSize << " q_len " << qLen << (csr ? " csr" : " table")
               << (nhd ? " [pages, page_size, heads, dim]" : "") << " splits "
               << numSplits << " merge " << mergeName(merge) << " seed "
               << seed);
  std::mt19937_64 rng(seed);
  const int64_t batch = static_cast<int64_t>(lens.size());
  PagedCase pc(rng, pageSize, lens);
  GpuTensor q(dev, spec.dtypeQ, {batch, spec.headsQ, qLen, spec.headDimQK});
  GpuTensor kc(dev, spec.dtypeK,
               {pc.numPages, spec.headsKV, pageSize, spec.headDimQK}, 4, nhd);
  GpuTensor vc(dev, spec.dtypeV,
               {pc.numPages, spec.headsKV, pageSize, spec.headDimV}, 4, nhd);
  GpuTensor o(dev, spec.dtypeO, {batch, spec.headsQ, qLen, spec.headDimV});
  GpuTensor lse(dev, DType::F32, {batch, spec.headsQ, qLen, 1}, 3);
  q.randomize(rng);
  fillPaged(kc, pc, rng);
  fillPaged(vc, pc, rng);
  o.poison();
  lse.poison();
  PageList list = pc.list(csr);
  DevicePageTable table(list, dev);
  test::VariantArgs va(dev, spec, qLen, list.maxSeqLen());
  SinkArgs sink(dev, spec, rng, va);
  kernel.run(q.deviceRef, kc.deviceRef, vc.deviceRef, table, o.deviceRef,
             &lse.deviceRef, va.device, numSplits, nullptr, merge);
  o.download();
  lse.download();
  ReferenceOutput want = referencePagedAttention(spec, q.hostRef, kc.hostRef,
                                                 vc.hostRef, list, va.host);
  test::compareOutputs(spec, o, lse, want, batch, qLen);
}

/// (do_bench-style ms, synchronous ms) of \p call, medians of 20: each
/// queued call after a memset of \p flush (the L2) between CUDA events, no
/// host wait between calls; then each call alone (events, then a wait).
template <class Call>
std::pair<float, float> benchMs(Device &dev, DeviceBuffer &flush, Call &&call) {
  auto median = [](std::vector<float> ms) {
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  call(); // warm-up
  const int reps = 20;
  std::vector<CUevent> ev(2 * reps);
  for (CUevent &e : ev)
    REQUIRE(Driver::get().cuEventCreate(&e, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
  REQUIRE(Driver::get().cuCtxSynchronize() == CUDA_SUCCESS);
  for (int r = 0; r < reps; ++r) {
    REQUIRE(Driver::get().cuMemsetD8Async(flush.ptr(), 0, flush.size(),
                                          nullptr) == CUDA_SUCCESS);
    REQUIRE(Driver::get().cuEventRecord(ev[2 * r], nullptr) == CUDA_SUCCESS);
    call();
    REQUIRE(Driver::get().cuEventRecord(ev[2 * r + 1], nullptr) ==
            CUDA_SUCCESS);
  }
  REQUIRE(Driver::get().cuCtxSynchronize() == CUDA_SUCCESS);
  std::vector<float> queued;
  for (int r = 0; r < reps; ++r) {
    float ms = 0;
    REQUIRE(Driver::get().cuEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]) ==
            CUDA_SUCCESS);
    queued.push_back(ms);
  }
  for (CUevent e : ev)
    Driver::get().cuEventDestroy(e);
  std::vector<float> alone;
  EventTimer timer(dev);
  for (int r = 0; r < reps; ++r) {
    timer.start();
    call();
    alone.push_back(timer.stopMs());
  }
  return std::pair{median(queued), median(alone)};
}

bool selected(const std::string &id) { return test::matrixIdSelected(id); }

} // namespace

TEST_CASE("decode kernels match the float64 paged reference", "[gpu][decode]") {
  Device &dev = Device::get(0);
  uint64_t seed = std::random_device{}();
  int i = 0;
  for (const testing::DecodeKernel &k : testing::decodeKernels()) {
    if (!selected(k.id))
      continue;
    INFO(k.id << ": " << printSpec(k.spec));
    auto kernel = loadDecode(k, dev);
    CHECK(kernel->function().localBytes() == 0);
    const std::vector<int64_t> lens[] = {
        {700, 300, 1, 0}, {1037}, {65, 64, 63, 1, 2, 129}};
    const int64_t qLens[] = {1, 4, 16, 64};
    for (int r = 0; r < 4; ++r, ++i) {
      const int64_t ps = i % 2 ? 64 : 16;
      // 0: the heuristic; 33: more splits than the longest sequence has
      // key tiles (at most 17 here): empty splits in every group.
      const int splits = r == 0   ? 0
                         : r == 1 ? 1
                         : r == 2 ? (i % 2 ? 2 : 3)
                                  : (i % 2 ? 33 : 9);
      // Several splits: the fused merge and the merge kernel in turn.
      const DecodeMerge merge =
          r < 2 ? DecodeMerge::Auto
                : ((i + r) % 2 ? DecodeMerge::Fused : DecodeMerge::Separate);
      checkPaged(dev, *kernel, k.spec, lens[i % 3], ps, qLens[(i + r) % 4],
                 r % 2 == 0, i % 3 == 1, splits, seed + i, merge);
    }
    // ALiBi's slopes[head] with heads_q slopes: proven, no call waited.
    CHECK(kernel->bufferCheckSyncs() == 0);
  }
}

TEST_CASE("decode: a proven call skips the status check, a buffer too short "
          "is still reported",
          "[gpu][decode][buffer_bounds]") {
  Device &dev = Device::get(0);
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  testing::DecodeKernel k;
  for (const testing::DecodeKernel &d : testing::decodeKernels())
    if (d.id == "dec_alibi_g4")
      k = d;
  REQUIRE(k.id == "dec_alibi_g4");
  const AttentionSpec &a = k.spec;
  auto kernel = loadDecode(k, dev);
  checkPaged(dev, *kernel, a, {300, 5}, 16, 4, true, false, 0, seed);
  CHECK(kernel->bufferCheckSyncs() == 0);
  std::mt19937_64 rng(seed);
  PagedCase pc(rng, 16, {300, 5});
  DevicePageTable table(pc.list(true), dev);
  GpuTensor q(dev, a.dtypeQ, {2, a.headsQ, 4, a.headDimQK}),
      kc(dev, a.dtypeK, {pc.numPages, a.headsKV, 16, a.headDimQK}),
      vc(dev, a.dtypeV, {pc.numPages, a.headsKV, 16, a.headDimV}),
      o(dev, a.dtypeO, {2, a.headsQ, 4, a.headDimV});
  test::VariantArgs va(dev, a, 4, 300);
  Arguments shortArgs = va.device;
  shortArgs.buffers.at("slopes").size = a.headsQ - 1;
  CHECK_THROWS_WITH(kernel->run(q.deviceRef, kc.deviceRef, vc.deviceRef, table,
                                o.deviceRef, nullptr, shortArgs),
                    Catch::Contains("buffer 'slopes' was read outside [0, " +
                                    std::to_string(a.headsQ - 1) + ")"));
  CHECK(kernel->bufferCheckSyncs() == 1);
  // Proven again: no wait, the flag the short call left is not reported.
  checkPaged(dev, *kernel, a, {300, 5}, 16, 4, true, false, 3, seed + 1);
  CHECK(kernel->bufferCheckSyncs() == 1);
}

TEST_CASE("decode over a contiguous cache and with many empty splits",
          "[gpu][decode]") {
  Device &dev = Device::get(0);
  // Causal, then the sliding window (300 back: its splits divide keys
  // [198, 500) of the first sequence, all of the second).
  for (size_t which : {1, 2}) {
    const testing::DecodeKernel k = testing::decodeKernels().at(which);
    INFO(k.id);
    auto kernel = loadDecode(k, dev);
    const AttentionSpec &spec = k.spec;
    std::mt19937_64 rng(std::random_device{}());
    const int64_t batch = 3, cap = 500, qLen = 2;
    std::vector<int32_t> lens{500, 77, 0};
    GpuTensor q(dev, DType::BF16, {batch, spec.headsQ, qLen, 128});
    GpuTensor kt(dev, DType::BF16, {batch, spec.headsKV, cap, 128}, 4, true);
    GpuTensor vt(dev, DType::BF16, {batch, spec.headsKV, cap, 128}, 4, true);
    GpuTensor o(dev, DType::BF16, {batch, spec.headsQ, qLen, 128});
    GpuTensor lse(dev, DType::F32, {batch, spec.headsQ, qLen, 1}, 3);
    q.randomize(rng);
    kt.randomize(rng);
    vt.randomize(rng);
    DevicePageTable table = DevicePageTable::contiguous(lens, cap, dev);
    // The paged reference of the same cache: one page per sequence, read as
    // pages of 1 token (page b * cap + t).
    std::vector<int32_t> ids, indptr{0}, last;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < lens[b]; ++t)
        ids.push_back(static_cast<int32_t>(b * cap + t));
      indptr.push_back(static_cast<int32_t>(ids.size()));
      last.push_back(lens[b] ? 1 : 0);
    }
    auto asPages = [&](const TensorRef &t) {
      TensorRef r = t;
      r.shape = {batch * cap, spec.headsKV, 1, 128};
      r.strides = {t.strides[2], t.strides[1], t.strides[2], 1};
      return r;
    };
    PageList list = checkPagedCsr({indptr, ids, last}, batch, batch * cap, 1);
    ReferenceOutput want = referencePagedAttention(
        spec, q.hostRef, asPages(kt.hostRef), asPages(vt.hostRef), list);
    // 128 and 244: the merge kernel's groups each take several splits,
    // most of them empty (500 keys: 8 tiles).
    for (int splits : {0, 1, 40, 64, 128, 244})
      for (DecodeMerge merge : {DecodeMerge::Fused, DecodeMerge::Separate}) {
        INFO("splits " << splits << " merge " << mergeName(merge));
        o.poison();
        lse.poison();
        kernel->run(q.deviceRef, kt.deviceRef, vt.deviceRef, table, o.deviceRef,
                    &lse.deviceRef, {}, splits, nullptr, merge);
        o.download();
        lse.download();
        test::compareOutputs(spec, o, lse, want, batch, qLen);
      }
  }
}

TEST_CASE("decode: few splits over many rows take the merge kernel's "
          "serial twin",
          "[gpu][decode][merge]") {
  // runtime::decodeSerialMerge: at most 8 splits over more rows than the
  // parallel merge kernel's one wave (6 CTAs per SM) go to
  // `<name>_decode_merge_serial`; 9 splits over the same rows to the
  // parallel kernel. MQA 32/1 (32 rows per sequence and query), q_len 2,
  // random lengths (one empty sequence), page 16, against the float64
  // paged reference.
  Device &dev = Device::get(0);
  const testing::DecodeKernel k = decodeKernelById("dec_dense_mqa32");
  auto kernel = loadDecode(k, dev);
  const int sms = dev.properties().smCount;
  const int64_t qLen = 2, rowsPer = k.spec.headsQ * qLen;
  const int64_t batch = 6 * sms / rowsPer + 2;
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> lenD(1, 700);
  std::vector<int64_t> lens;
  for (int64_t b = 0; b < batch; ++b)
    lens.push_back(b == 3 ? 0 : lenD(rng));
  for (int splits : {2, 5, 8, 9}) {
    REQUIRE(decodeSerialMerge(splits, batch * rowsPer, sms) == (splits <= 8));
    checkPaged(dev, *kernel, k.spec, lens, 16, qLen, splits % 2 == 0, false,
               splits, seed + uint64_t(splits), DecodeMerge::Separate);
  }
}

TEST_CASE("decode: a sliding window's splits divide the keys it sees",
          "[gpu][decode]") {
  // The window kernel (300 keys back) on sequences much longer than the
  // window, q_len 1..64: every forced split count gives the reference, and
  // the heuristic counts the window's tiles, not the sequence's.
  Device &dev = Device::get(0);
  const testing::DecodeKernel k = testing::decodeKernels().at(2);
  REQUIRE(k.id == "dec_window_g4");
  auto kernel = loadDecode(k, dev);
  // B = 1, Nk = 128k: the rows see 301 keys (6 tiles of 64 at most), so
  // one split (at most one per 4 tiles), not the 32 of a dense call.
  CHECK(kernel->defaultNumSplits(1, 1, 131072) == 1);
  // q_len 64: 364 keys, 7 tiles: still one split; 40 such sequences x 8 KV
  // heads fill the SMs alone.
  CHECK(kernel->defaultNumSplits(1, 64, 131072) == 1);
  uint64_t seed = std::random_device{}();
  int i = 0;
  for (int64_t qLen : {1, 5, 16, 64})
    for (int splits : {0, 1, 3, 8, 33}) {
      const DecodeMerge merge =
          i % 2 ? DecodeMerge::Fused : DecodeMerge::Separate;
      checkPaged(dev, *kernel, k.spec, {5000, 301, 0, 64, 2000},
                 i % 3 ? 64 : 16, qLen, i % 2 == 0, i % 4 == 1, splits,
                 seed + i, merge);
      ++i;
    }
}

TEST_CASE("decode errors name the field", "[gpu][decode]") {
  Device &dev = Device::get(0);
  const testing::DecodeKernel k = testing::decodeKernels().at(0);
  auto kernel = loadDecode(k, dev);
  std::mt19937_64 rng(1);
  PagedCase pc(rng, 16, {40, 3});
  DevicePageTable table(pc.list(true), dev);
  GpuTensor q(dev, DType::BF16, {2, 32, 65, 128});
  GpuTensor kc(dev, DType::BF16, {pc.numPages, 8, 16, 128});
  GpuTensor o(dev, DType::BF16, {2, 32, 65, 128});
  GpuTensor o1(dev, DType::BF16, {2, 32, 1, 128});
  GpuTensor q1(dev, DType::BF16, {2, 32, 1, 128});
  GpuTensor kBig(dev, DType::BF16, {pc.numPages + 1, 8, 16, 128});
  auto expectError = [](auto &&f, const char *needle) {
    bool threw = false;
    try {
      f();
    } catch (const UserError &e) {
      threw = true;
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
    CHECK(threw);
  };
  expectError(
      [&] {
        kernel->run(q.deviceRef, kc.deviceRef, kc.deviceRef, table, o.deviceRef,
                    nullptr);
      },
      "q.shape[2] = 65");
  expectError(
      [&] {
        kernel->run(q1.deviceRef, kBig.deviceRef, kBig.deviceRef, table,
                    o1.deviceRef, nullptr);
      },
      "k_cache.shape[0]");
  expectError(
      [&] {
        kernel->run(q1.deviceRef, kc.deviceRef, kc.deviceRef, table,
                    o1.deviceRef, nullptr, {}, 5000);
      },
      "num_splits = 5000");
  // The aliasing rule: an output over an input, or over the table's device
  // arrays, is refused before anything launches.
  TensorRef overK = o1.deviceRef;
  overK.data = kc.deviceRef.data;
  expectError(
      [&] {
        kernel->run(q1.deviceRef, kc.deviceRef, kc.deviceRef, table, overK,
                    nullptr);
      },
      "overlaps k_cache");
  TensorRef overTable = o1.deviceRef;
  overTable.data = reinterpret_cast<void *>(table.pages());
  expectError(
      [&] {
        kernel->run(q1.deviceRef, kc.deviceRef, kc.deviceRef, table, overTable,
                    nullptr);
      },
      "page ids");
}

namespace {

/// One paged decode problem with its own inputs, outputs and reference,
/// launched asynchronously (no synchronisation) and checked later.
struct StreamCase {
  PagedCase pc;
  PageList list;
  GpuTensor q, kc, vc, o, lse;
  std::unique_ptr<DevicePageTable> table;
  std::unique_ptr<test::VariantArgs> va;
  std::unique_ptr<SinkArgs> sink;
  int64_t qLen;
  int splits;
  DecodeMerge merge;

  StreamCase(Device &dev, const AttentionSpec &spec, std::mt19937_64 &rng,
             std::vector<int64_t> lens, int64_t pageSize, int64_t qLen,
             int splits, DecodeMerge merge = DecodeMerge::Auto)
      : pc(rng, pageSize, lens), list(pc.list(true)),
        q(dev, spec.dtypeQ,
          {int64_t(lens.size()), spec.headsQ, qLen, spec.headDimQK}),
        kc(dev, spec.dtypeK,
           {pc.numPages, spec.headsKV, pageSize, spec.headDimQK}),
        vc(dev, spec.dtypeV,
           {pc.numPages, spec.headsKV, pageSize, spec.headDimV}),
        o(dev, spec.dtypeO,
          {int64_t(lens.size()), spec.headsQ, qLen, spec.headDimV}),
        lse(dev, DType::F32, {int64_t(lens.size()), spec.headsQ, qLen, 1}, 3),
        qLen(qLen), splits(splits), merge(merge) {
    q.randomize(rng);
    fillPaged(kc, pc, rng);
    fillPaged(vc, pc, rng);
    o.poison();
    lse.poison();
    table = std::make_unique<DevicePageTable>(list, dev);
    va = std::make_unique<test::VariantArgs>(dev, spec, qLen, list.maxSeqLen());
    sink = std::make_unique<SinkArgs>(dev, spec, rng, *va);
  }
  void launch(const GpuDecodeKernel &kernel, CUstream stream) {
    kernel.run(q.deviceRef, kc.deviceRef, vc.deviceRef, *table, o.deviceRef,
               &lse.deviceRef, va->device, splits, stream, merge);
  }
  void check(const AttentionSpec &spec) {
    o.download();
    lse.download();
    ReferenceOutput want = referencePagedAttention(spec, q.hostRef, kc.hostRef,
                                                   vc.hostRef, list, va->host);
    test::compareOutputs(spec, o, lse, want, int64_t(pc.lens.size()), qLen);
  }
};

} // namespace

TEST_CASE("one decode kernel object on several streams and threads at once",
          "[gpu][decode][concurrency]") {
  // Every call must have its own partial O / LSE workspace: four calls on
  // one GpuDecodeKernel, on four non-blocking streams, with different
  // inputs, split counts and q_len, all held behind one gate (an event
  // after a long memset) so their split and merge kernels overlap on the
  // GPU; then the same from four threads at once. Each output is checked
  // against the float64 paged reference. Shared workspaces would mix the
  // calls' partial results.
  Device &dev = Device::get(0);
  for (const char *id : {"dec_causal_g4", "dec_alibi_g4"}) {
    testing::DecodeKernel k = decodeKernelById(id);
    INFO(k.id);
    auto kernel = loadDecode(k, dev);
    const uint64_t seed = std::random_device{}();
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    auto makeCases = [&] {
      std::vector<std::unique_ptr<StreamCase>> cases;
      cases.push_back(std::make_unique<StreamCase>(
          dev, k.spec, rng, std::vector<int64_t>{3000, 1700, 2500}, 16, 1, 8,
          DecodeMerge::Fused));
      cases.push_back(std::make_unique<StreamCase>(
          dev, k.spec, rng, std::vector<int64_t>{4100, 64}, 64, 4, 5,
          DecodeMerge::Separate));
      cases.push_back(std::make_unique<StreamCase>(
          dev, k.spec, rng, std::vector<int64_t>{900, 2000, 1, 3333}, 16, 2,
          0));
      cases.push_back(std::make_unique<StreamCase>(
          dev, k.spec, rng, std::vector<int64_t>{5000}, 64, 1, 37,
          DecodeMerge::Fused));
      return cases;
    };
    std::vector<Stream> streams;
    for (int i = 0; i < 4; ++i)
      streams.emplace_back(dev);
    Driver &drv = Driver::get();
    {
      // Streams: one gate holds all four launches until they are queued.
      auto cases = makeCases();
      Stream gate(dev);
      DeviceBuffer big(dev, size_t(2) << 30);
      CUevent opened = nullptr;
      REQUIRE(drv.cuEventCreate(&opened, CU_EVENT_DISABLE_TIMING) ==
              CUDA_SUCCESS);
      REQUIRE(drv.cuMemsetD8Async(big.ptr(), 0, big.size(), gate.handle()) ==
              CUDA_SUCCESS);
      REQUIRE(drv.cuEventRecord(opened, gate.handle()) == CUDA_SUCCESS);
      for (size_t i = 0; i < cases.size(); ++i) {
        REQUIRE(drv.cuStreamWaitEvent(streams[i].handle(), opened, 0) ==
                CUDA_SUCCESS);
        cases[i]->launch(*kernel, streams[i].handle());
      }
      // And a second round on the same streams, reversed: stream-ordered
      // reuse of the first round's workspaces.
      auto again = makeCases();
      for (size_t i = 0; i < again.size(); ++i)
        again[i]->launch(*kernel, streams[3 - i].handle());
      for (const Stream &st : streams)
        st.synchronize();
      gate.synchronize();
      (void)drv.cuEventDestroy(opened);
      for (size_t i = 0; i < cases.size(); ++i) {
        INFO("stream case " << i);
        cases[i]->check(k.spec);
        again[i]->check(k.spec);
      }
    }
    {
      // Threads: each calls run() on its own stream, three times, at once.
      auto cases = makeCases();
      std::vector<std::string> errors(cases.size());
      std::vector<std::thread> threads;
      for (size_t i = 0; i < cases.size(); ++i)
        threads.emplace_back([&, i] {
          try {
            for (int r = 0; r < 3; ++r)
              cases[i]->launch(*kernel, streams[i].handle());
            streams[i].synchronize();
          } catch (const std::exception &e) {
            errors[i] = e.what();
          }
        });
      for (std::thread &t : threads)
        t.join();
      for (size_t i = 0; i < cases.size(); ++i) {
        INFO("thread case " << i);
        CHECK(errors[i] == "");
        cases[i]->check(k.spec);
      }
    }
  }
}

TEST_CASE("decode calls back to back over dirty workspaces",
          "[gpu][decode][merge]") {
  // The split groups' arrival counters live in each call's stream-ordered
  // workspace, which the pool hands out as the last user left it. Here the
  // pool's memory is first filled with 0x7f bytes (a counter at 0x7f7f7f7f
  // never reaches num_splits - 1, so a call that did not zero its counters
  // would leave O unwritten), then calls with 33, 2, 1 and 64 splits run
  // back to back on one stream with no wait, twice, each reusing the
  // memory of the ones before; every output against the float64 reference.
  // The merge kernel runs as the split kernel's programmatic dependent
  // (sm_90: it may start before the split kernel ends, its
  // griddepcontrol.wait orders its reads), then, on the same inputs, with
  // plain launches: the same kernels and sums, so the same bits.
  Device &dev = Device::get(0);
  for (const char *id : {"dec_causal_g4", "dec_sink_g4", "dec_dense_mqa32"}) {
    testing::DecodeKernel k = decodeKernelById(id);
    if (!selected(k.id))
      continue;
    INFO(k.id);
    auto kernel = loadDecode(k, dev);
    const uint64_t seed = std::random_device{}();
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    Stream stream(dev);
    std::vector<std::unique_ptr<StreamCase>> cases;
    for (DecodeMerge merge : {DecodeMerge::Fused, DecodeMerge::Separate})
      for (int64_t qLen : {1, 4})
        for (int splits : {33, 2, 1, 64})
          cases.push_back(std::make_unique<StreamCase>(
              dev, k.spec, rng, std::vector<int64_t>{2500, 700, 1}, 16, qLen,
              splits, merge));
    std::vector<std::vector<uint8_t>> first;
    for (bool pdl : {true, false}) {
      INFO((pdl ? "programmatic" : "plain") << " merge launch");
      kernel->setProgrammaticMerge(pdl);
      // Every sm_90a module's merges wait on the grid dependency; the
      // switch is what decides on an sm_90 device with a CUDA 12.3 driver.
      CHECK(kernel->programmaticMerge() ==
            (pdl && programmaticLaunchAvailable(dev)));
      {
        StreamBuffer dirty(dev, size_t(64) << 20, stream.handle());
        REQUIRE(Driver::get().cuMemsetD8Async(dirty.ptr(), 0x7f, dirty.size(),
                                              stream.handle()) == CUDA_SUCCESS);
      }
      for (auto &c : cases) {
        c->o.poison();
        c->lse.poison();
      }
      REQUIRE(Driver::get().cuCtxSynchronize() == CUDA_SUCCESS);
      for (auto &c : cases)
        c->launch(*kernel, stream.handle());
      stream.synchronize();
      for (size_t i = 0; i < cases.size(); ++i) {
        INFO("call " << i << ": q_len " << cases[i]->qLen << ", splits "
                     << cases[i]->splits << ", merge "
                     << mergeName(cases[i]->merge));
        cases[i]->check(k.spec);
        std::vector<uint8_t> bits = cases[i]->o.host;
        bits.insert(bits.end(), cases[i]->lse.host.begin(),
                    cases[i]->lse.host.end());
        if (pdl)
          first.push_back(std::move(bits));
        else
          CHECK(bits == first[i]);
      }
    }
  }
}

TEST_CASE("decode bandwidth", "[.decodebench]") {
  // bf16, D = 128, GQA 32/8 (and MQA 32/1: dec_dense_mqa32), q_len 1 (and
  // 4, 16): TB/s of K + V bytes read (B * Nk * heads_kv * 128 * 2 bytes *
  // 2), median of 20 runs timed as the peers' triton.testing.do_bench
  // times them (bench/decode_peers.py): a 256 MiB memset flushes the L2
  // before each call, CUDA events around the call, no host wait between
  // calls, so the host's launch work overlaps the GPU's and the time is the
  // GPU's. The last column is the same call timed alone (events, then a
  // wait: the host's work before the first launch counts too, ~10 us at
  // B = 1). The sliding window (300 keys back) reads only
  // its window: its rows also give TB/s over the window's 301 keys, and a
  // dense row over Nk = 320 (the five 64-key tiles the window spans) is
  // the "same bytes" dense time to compare it with.
  Device &dev = Device::get(0);
  std::mt19937_64 rng(7);
  auto find = [](const std::string &id) {
    for (const auto &k : testing::decodeKernels())
      if (k.id == id)
        return k;
    throw std::runtime_error(id);
  };
  struct Shape {
    int64_t batch, nk;
  };
  const Shape shapes[] = {{8, 32768}, {1, 131072}, {64, 4096}};
  // Random bf16 from one 64 MiB host block, copied to fill big caches.
  std::vector<uint16_t> block(32u << 20);
  {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto &x : block)
      x = floatToBf16(u(rng));
  }
  auto fillRandom = [&](DeviceBuffer &buf) {
    const size_t chunk = block.size() * 2;
    for (size_t off = 0; off < buf.size(); off += chunk)
      if (Driver::get().cuMemcpyHtoD(buf.ptr() + off, block.data(),
                                     std::min(chunk, buf.size() - off)) !=
          CUDA_SUCCESS)
        FAIL("cuMemcpyHtoD");
  };
  DeviceBuffer flush(dev, size_t(256) << 20);
  auto time = [&](auto &&call) { return benchMs(dev, flush, call); };
  // One row: kernel \p k over batch x nk keys (page size ps, 0: the
  // contiguous [B, Nk, Hkv, D] cache), TB/s over the bytes of
  // countedKeys keys per sequence (nk unless given).
  auto measure = [&](const testing::DecodeKernel &k,
                     const GpuDecodeKernel &kernel, const test::VariantArgs &va,
                     int64_t batch, int64_t nk, int64_t qLen, int64_t ps,
                     int64_t countedKeys = 0,
                     DecodeMerge merge = DecodeMerge::Auto,
                     int forcedSplits = 0) {
    const int64_t hq = k.spec.headsQ, hk = k.spec.headsKV, d = 128;
    // ps = -1: contiguous and head-major, [B, Hkv, Nk, D] (the peers'
    // layout: each CTA reads one run of memory, not 256-byte rows 2 KiB
    // apart).
    const bool hnd = ps < 0;
    ps = std::max<int64_t>(ps, 0);
    GpuTensor q(dev, DType::BF16, {batch, hq, qLen, d});
    GpuTensor o(dev, DType::BF16, {batch, hq, qLen, d});
    q.randomize(rng);
    const int64_t pages = ps ? batch * nk / ps : batch;
    const int64_t pageLen = ps ? ps : nk;
    DeviceBuffer kb(dev, size_t(pages * pageLen * hk * d * 2)),
        vb(dev, size_t(pages * pageLen * hk * d * 2));
    fillRandom(kb);
    fillRandom(vb);
    auto view = [&](DeviceBuffer &buf) {
      TensorRef t;
      t.data = buf.data();
      t.dtype = DType::BF16;
      t.shape = {pages, hk, pageLen, d};
      if (hnd)
        t.strides = {hk * pageLen * d, pageLen * d, d, 1};
      else
        t.strides = {pageLen * hk * d, d, hk * d, 1};
      return t;
    };
    std::vector<int32_t> lens(static_cast<size_t>(batch),
                              static_cast<int32_t>(nk));
    std::unique_ptr<DevicePageTable> table;
    if (ps) {
      std::vector<int32_t> perm(static_cast<size_t>(pages));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      PageList list = checkBlockTable({perm, nk / ps, lens}, batch, pages, ps);
      table = std::make_unique<DevicePageTable>(list, dev);
    } else {
      table = std::make_unique<DevicePageTable>(
          DevicePageTable::contiguous(lens, nk, dev));
    }
    TensorRef kv = view(kb), vv = view(vb);
    int splits =
        forcedSplits ? forcedSplits : kernel.defaultNumSplits(batch, qLen, nk);
    auto [ms, msAlone] = time([&] {
      kernel.run(q.deviceRef, kv, vv, *table, o.deviceRef, nullptr, va.device,
                 forcedSplits, nullptr, merge);
    });
    const bool fused =
        merge == DecodeMerge::Fused ||
        (merge == DecodeMerge::Auto && kernel.fusesMerge(qLen, splits));
    const std::string how = splits == 1 ? "none" : fused ? "fused" : "separate";
    const int64_t keys = countedKeys ? countedKeys : nk;
    const double kvBytes = double(batch) * keys * hk * d * 2 * 2;
    const double flops = 4.0 * batch * hq * qLen * double(keys) * d;
    std::printf("DECODE %-18s B=%-3lld Nk=%-6lld q_len=%-2lld %-10s "
                "splits=%-3d%s merge=%-8s%s %8.3f ms %6.2f TB/s %7.1f TF/s "
                "h=%lld/%lld%s (alone %.3f ms %.2f TB/s)\n",
                k.id.c_str(), (long long)batch, (long long)nk, (long long)qLen,
                hnd  ? "contig-hnd"
                : ps ? fmt::format("page {}", ps).c_str()
                     : "contiguous",
                splits, forcedSplits ? " (forced)" : "", how.c_str(),
                merge == DecodeMerge::Auto ? "" : " (forced)", ms,
                kvBytes / (ms * 1e-3) / 1e12, flops / (ms * 1e-3) / 1e12,
                (long long)hq, (long long)hk,
                countedKeys
                    ? fmt::format(" (over the {} keys read)", keys).c_str()
                    : "",
                msAlone, kvBytes / (msAlone * 1e-3) / 1e12);
  };
  // The "_s3" ids: the same kernels with three K/V stages (session 17's
  // experiment), their rows beside the two-stage default's.
  // "_serialmerge": the merge kernel before session 19 (each CTA walks
  // all splits in order), its MQA rows beside the default's.
  for (const char *id : {"dec_dense_g4", "dec_dense_g4_s3", "dec_softcap_g4",
                         "dec_alibi_g4", "dec_window_g4", "dec_dense_mqa32",
                         "dec_dense_mqa32_s3", "dec_dense_mqa32_serialmerge"}) {
    testing::DecodeKernel k = find(id);
    if (!selected(k.id))
      continue;
    auto kernel = loadDecode(k, dev);
    test::VariantArgs va(dev, k.spec, 1, 1);
    const std::string name = id;
    const bool dense = name.rfind("dec_dense_g4", 0) == 0,
               mqa = name.rfind("dec_dense_mqa32", 0) == 0,
               window = name == "dec_window_g4";
    for (Shape s : shapes) {
      for (int64_t qLen : {1, 4, 16}) {
        if (qLen > 1 && (s.batch != 8 || !dense))
          continue;
        // 0: contiguous [B, Nk, Hkv, D]; -1: [B, Hkv, Nk, D] (q_len 1).
        for (int64_t ps : {0, -1, 16, 64}) {
          if ((ps == 16 && !dense) || (ps <= 0 && !dense && !mqa) ||
              (ps < 0 && qLen > 1))
            continue;
          measure(k, *kernel, va, s.batch, s.nk, qLen, ps,
                  window ? std::min<int64_t>(s.nk, 301) : 0);
          // The merge Auto did not pick, where there is one to pick
          // (dense page 64 and MQA, q_len 1): the threshold's evidence.
          const int splits = kernel->defaultNumSplits(s.batch, qLen, s.nk);
          if (splits > 1 && qLen == 1 && (mqa || (dense && ps == 64)))
            measure(k, *kernel, va, s.batch, s.nk, qLen, ps, 0,
                    kernel->fusesMerge(qLen, splits) ? DecodeMerge::Separate
                                                     : DecodeMerge::Fused);
        }
      }
      // MQA at B = 1 (one KV head: the splits are the whole grid; session
      // 16's default of 244 left each CTA ~9 key tiles and the merge
      // kernel a walk over 244 splits; decodeNumSplits now takes 128, and
      // [.decodesplitbench] sweeps around it): fewer splits, each merge,
      // contiguous.
      if (mqa && s.batch == 1)
        for (int n : {33, 66, 132, 176})
          for (DecodeMerge m : {DecodeMerge::Separate, DecodeMerge::Fused})
            measure(k, *kernel, va, s.batch, s.nk, 1, 0, 0, m, n);
    }
    if (window && selected("dec_dense_g4")) {
      // Dense decode over the window's tiles (Nk = 320), page 64: the time
      // the window's rows compare with.
      testing::DecodeKernel dk = find("dec_dense_g4");
      auto dkernel = loadDecode(dk, dev);
      test::VariantArgs dva(dev, dk.spec, 1, 1);
      for (Shape s : shapes)
        measure(dk, *dkernel, dva, s.batch, 320, 1, 64);
    }
  }
}

TEST_CASE("decode split counts: the model's pick beside the old rule's",
          "[.decodesplitbench]") {
  // Issue 17, the split rule (decodeNumSplits, DecodeSplitModel.cpp): GQA
  // 32/8 and MQA 32/1, bf16, D = 128, q_len 1, the contiguous [B, Nk, Hkv,
  // D] cache, at B = 1 (Nk 32k, 128k), B = 8 (32k), B = 64 (4k): TB/s of
  // K + V for the new pick ("new"), session 16's (decodeNumSplitsWaves,
  // "old") and forced counts around them (1/2, 3/4 and 5/4 of the new pick
  // and one more, one and two CTAs per SM), timed as [.decodebench] times
  // (benchMs, the merge Auto picks). One DECODESWEEP line per count, with
  // the model's time (decodeSplitTimeUs: its order, not its scale, is what
  // the rule uses); where the merge kernel runs, the same call with the
  // serial merge kernel (the `_serialmerge` id, before session 19) and
  // the same call with the merge kernel launched plainly after the split
  // kernel (`plain`: setProgrammaticMerge(false), before session 21; the
  // default launches it as the split kernel's programmatic dependent on
  // sm_90) at the end of the line. (Session 20's `_s3` column, three K/V
  // stages, won nowhere and is gone.) ~20 s on an H100.
  Device &dev = Device::get(0);
  DeviceBuffer flush(dev, size_t(256) << 20);
  std::mt19937_64 rng(17);
  const int sms = dev.properties().smCount;
  struct Shape {
    int64_t batch, nk;
  };
  for (const char *id : {"dec_dense_g4", "dec_dense_mqa32"}) {
    testing::DecodeKernel k = decodeKernelById(id);
    if (!selected(k.id))
      continue;
    auto kernel = loadDecode(k, dev);
    auto serial = loadDecode(decodeKernelById(k.id + "_serialmerge"), dev);
    auto plain = loadDecode(k, dev);
    plain->setProgrammaticMerge(false);
    kernel->setProgrammaticMerge(true);
    test::VariantArgs va(dev, k.spec, 1, 1);
    const int64_t hq = k.spec.headsQ, hk = k.spec.headsKV, d = 128;
    const int64_t rowTiles = (hq / hk + kernel->info().config.blockM() - 1) /
                             kernel->info().config.blockM();
    for (Shape s : {Shape{1, 32768}, Shape{1, 131072}, Shape{8, 32768},
                    Shape{64, 4096}}) {
      GpuTensor q(dev, DType::BF16, {s.batch, hq, 1, d});
      GpuTensor o(dev, DType::BF16, {s.batch, hq, 1, d});
      q.randomize(rng);
      const size_t bytes = size_t(s.batch * s.nk * hk * d * 2);
      DeviceBuffer kb(dev, bytes), vb(dev, bytes);
      // Zeros time as any values do (the same loads and instructions).
      REQUIRE(Driver::get().cuMemsetD8(kb.ptr(), 0, bytes) == CUDA_SUCCESS);
      REQUIRE(Driver::get().cuMemsetD8(vb.ptr(), 0, bytes) == CUDA_SUCCESS);
      TensorRef kv, vv;
      for (auto [t, buf] : {std::pair{&kv, &kb}, std::pair{&vv, &vb}}) {
        t->data = buf->data();
        t->dtype = DType::BF16;
        t->shape = {s.batch, hk, s.nk, d};
        t->strides = {s.nk * hk * d, d, hk * d, 1};
      }
      std::vector<int32_t> lens(size_t(s.batch), int32_t(s.nk));
      DevicePageTable table = DevicePageTable::contiguous(lens, s.nk, dev);
      const int fresh = kernel->defaultNumSplits(s.batch, 1, s.nk);
      const int old = decodeNumSplitsWaves(s.batch, hk, rowTiles, s.nk,
                                           kernel->info().config.blockN, sms);
      const int64_t groups = s.batch * hk * rowTiles;
      std::vector<int> counts = {fresh,
                                 old,
                                 std::max(1, fresh / 2),
                                 std::max(1, fresh * 3 / 4),
                                 fresh * 5 / 4,
                                 fresh + 1,
                                 int((sms + groups - 1) / groups),
                                 int((2 * sms + groups - 1) / groups)};
      std::sort(counts.begin(), counts.end());
      counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
      for (int n : counts) {
        if (n < 1 || n > 256)
          continue;
        auto timeWith = [&](const GpuDecodeKernel &kk) {
          return benchMs(dev, flush, [&] {
            kk.run(q.deviceRef, kv, vv, table, o.deviceRef, nullptr, va.device,
                   n);
          });
        };
        auto [ms, msAlone] = timeWith(*kernel);
        const bool separate = n > 1 && !kernel->fusesMerge(1, n);
        const float msSerial = separate ? timeWith(*serial).first : 0.0f;
        const float msPlain = separate ? timeWith(*plain).first : 0.0f;
        const double kvBytes = double(s.batch) * s.nk * hk * d * 2 * 2;
        const std::string tag = n == fresh && n == old ? "new,old"
                                : n == fresh           ? "new"
                                : n == old             ? "old"
                                                       : "forced";
        std::printf(
            "DECODESWEEP %-15s B=%-3lld Nk=%-6lld splits=%-3d %-7s "
            "merge=%-8s %8.4f ms %5.2f TB/s (alone %.4f ms) model %.1f us%s"
            "%s\n",
            k.id.c_str(), (long long)s.batch, (long long)s.nk, n, tag.c_str(),
            n == 1     ? "none"
            : separate ? "separate"
                       : "fused",
            ms, kvBytes / (ms * 1e-3) / 1e12, msAlone,
            decodeSplitTimeUs(kernel->splitShape(s.batch, 1, s.nk), n),
            separate ? fmt::format(" | serialmerge {:.4f} ms {:.2f} TB/s",
                                   msSerial, kvBytes / (msSerial * 1e-3) / 1e12)
                           .c_str()
                     : "",
            separate
                ? fmt::format(" | plain {:.4f} ms {:.2f} TB/s{}", msPlain,
                              kvBytes / (msPlain * 1e-3) / 1e12,
                              kernel->programmaticMerge() ? "" : " (no PDL)")
                      .c_str()
                : "");
      }
    }
  }
}

TEST_CASE("decode kernels under a profiler", "[.decodesplit]") {
  // For `ncu` (gpu-check step decodesplit): a few calls of the decode
  // kernel (at these shapes its splits merge in the same launch:
  // decodeFusedMerge) at B = 1, Nk = 128k (dense page 64 and contiguous,
  // softcap and ALiBi page 64) and of the sliding window at B = 8,
  // Nk = 32k, so the profiler times the launch and counts the DRAM bytes
  // it reads. Checks nothing; prints the
  // event-timed total.
  Device &dev = Device::get(0);
  std::mt19937_64 rng(11);
  struct Run {
    const char *id;
    int64_t batch, nk, ps;
  };
  for (Run r :
       {Run{"dec_dense_g4", 1, 131072, 64}, Run{"dec_dense_g4", 1, 131072, 0},
        Run{"dec_softcap_g4", 1, 131072, 64},
        Run{"dec_alibi_g4", 1, 131072, 64},
        Run{"dec_window_g4", 8, 32768, 64}}) {
    testing::DecodeKernel k = decodeKernelById(r.id);
    auto kernel = loadDecode(k, dev);
    test::VariantArgs va(dev, k.spec, 1, 1);
    const int64_t hk = k.spec.headsKV, d = 128;
    const int64_t pages = r.ps ? r.batch * r.nk / r.ps : r.batch;
    const int64_t pageLen = r.ps ? r.ps : r.nk;
    GpuTensor q(dev, DType::BF16, {r.batch, k.spec.headsQ, 1, d});
    GpuTensor o(dev, DType::BF16, {r.batch, k.spec.headsQ, 1, d});
    q.randomize(rng);
    DeviceBuffer kb(dev, size_t(pages * pageLen * hk * d * 2)),
        vb(dev, size_t(pages * pageLen * hk * d * 2));
    // Zeros are fine for timing and byte counts (no NaN: memset 0).
    REQUIRE(Driver::get().cuMemsetD8(kb.ptr(), 0, kb.size()) == CUDA_SUCCESS);
    REQUIRE(Driver::get().cuMemsetD8(vb.ptr(), 0, vb.size()) == CUDA_SUCCESS);
    TensorRef kv, vv;
    for (auto [t, buf] : {std::pair{&kv, &kb}, std::pair{&vv, &vb}}) {
      t->data = buf->data();
      t->dtype = DType::BF16;
      t->shape = {pages, hk, pageLen, d};
      t->strides = {pageLen * hk * d, d, hk * d, 1};
    }
    std::vector<int32_t> lens(static_cast<size_t>(r.batch),
                              static_cast<int32_t>(r.nk));
    std::unique_ptr<DevicePageTable> table;
    if (r.ps) {
      std::vector<int32_t> perm(static_cast<size_t>(pages));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      table = std::make_unique<DevicePageTable>(
          checkBlockTable({perm, r.nk / r.ps, lens}, r.batch, pages, r.ps),
          dev);
    } else {
      table = std::make_unique<DevicePageTable>(
          DevicePageTable::contiguous(lens, r.nk, dev));
    }
    EventTimer timer(dev);
    for (int i = 0; i < 3; ++i) {
      timer.start();
      kernel->run(q.deviceRef, kv, vv, *table, o.deviceRef, nullptr, va.device);
      const float ms = timer.stopMs();
      std::printf("DECODESPLIT %-15s B=%-3lld Nk=%-6lld %-10s splits=%-3d "
                  "call %d: %8.3f ms (decode + merge)\n",
                  r.id, (long long)r.batch, (long long)r.nk,
                  r.ps ? fmt::format("page {}", r.ps).c_str() : "contiguous",
                  kernel->defaultNumSplits(r.batch, 1, r.nk), i, ms);
    }
  }
}

TEST_CASE("decode with a sink: 1 split = many splits = the reference, "
          "empty sequences give LSE = sink",
          "[gpu][decode][sink]") {
  // Issue 22: the sink joins the merge once, so every split count gives the
  // same O and LSE (to fp32 rounding), and a sequence with no key gets
  // O = 0, LSE = sink[h] (-inf for head 1, which has none).
  Device &dev = Device::get(0);
  for (const testing::DecodeKernel &k : testing::decodeKernels()) {
    if (!k.spec.sink || !selected(k.id))
      continue;
    INFO(k.id);
    auto kernel = loadDecode(k, dev);
    const AttentionSpec &spec = k.spec;
    std::mt19937_64 rng(std::random_device{}());
    const int64_t qLen = 3, ps = 16;
    PagedCase pc(rng, ps, {613, 0, 2, 129});
    const int64_t batch = 4;
    GpuTensor q(dev, spec.dtypeQ, {batch, spec.headsQ, qLen, spec.headDimQK});
    GpuTensor kc(dev, spec.dtypeK,
                 {pc.numPages, spec.headsKV, ps, spec.headDimQK});
    GpuTensor vc(dev, spec.dtypeV,
                 {pc.numPages, spec.headsKV, ps, spec.headDimV});
    GpuTensor o(dev, spec.dtypeO, {batch, spec.headsQ, qLen, spec.headDimV});
    GpuTensor lse(dev, DType::F32, {batch, spec.headsQ, qLen, 1}, 3);
    q.randomize(rng);
    fillPaged(kc, pc, rng);
    fillPaged(vc, pc, rng);
    PageList list = pc.list(false);
    DevicePageTable table(list, dev);
    test::VariantArgs va(dev, spec, qLen, list.maxSeqLen());
    SinkArgs sink(dev, spec, rng, va);
    ReferenceOutput want = referencePagedAttention(spec, q.hostRef, kc.hostRef,
                                                   vc.hostRef, list, va.host);
    std::vector<float> oneSplit, oneLse;
    const std::pair<int, DecodeMerge> runs[] = {
        {1, DecodeMerge::Auto},      {2, DecodeMerge::Fused},
        {2, DecodeMerge::Separate},  {7, DecodeMerge::Fused},
        {7, DecodeMerge::Separate},  {33, DecodeMerge::Fused},
        {33, DecodeMerge::Separate}, {0, DecodeMerge::Auto}};
    for (auto [splits, merge] : runs) {
      INFO("splits " << splits << " merge " << mergeName(merge));
      o.poison();
      lse.poison();
      kernel->run(q.deviceRef, kc.deviceRef, vc.deviceRef, table, o.deviceRef,
                  &lse.deviceRef, va.device, splits, nullptr, merge);
      o.download();
      lse.download();
      test::compareOutputs(spec, o, lse, want, batch, qLen);
      for (int64_t h = 0; h < spec.headsQ; ++h)
        for (int64_t i = 0; i < qLen; ++i) {
          // The empty sequence: LSE = sink[h] (to fp32 rounding: the
          // merge works in log2 units), -inf for head 1.
          if (std::isinf(sink.host[h]))
            CHECK(lse.at(1, h, i) == sink.host[h]);
          else
            CHECK(std::fabs(lse.at(1, h, i) - sink.host[h]) <=
                  1e-6f * (1 + std::fabs(sink.host[h])));
          CHECK(o.at(1, h, i, 0) == 0.0f);
        }
      std::vector<float> all, lses;
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < spec.headsQ; ++h)
          for (int64_t i = 0; i < qLen; ++i) {
            lses.push_back(lse.at(b, h, i));
            for (int64_t d = 0; d < spec.headDimV; ++d)
              all.push_back(o.at(b, h, i, d));
          }
      if (splits == 1) {
        oneSplit = all;
        oneLse = lses;
        continue;
      }
      double worst = 0, worstLse = 0;
      for (size_t e = 0; e < all.size(); ++e)
        worst = std::max(worst, double(std::fabs(all[e] - oneSplit[e])));
      for (size_t e = 0; e < lses.size(); ++e)
        if (std::isfinite(oneLse[e]))
          worstLse = std::max(worstLse, double(std::fabs(lses[e] - oneLse[e])) /
                                            (1.0 + std::fabs(oneLse[e])));
        else
          CHECK(lses[e] == oneLse[e]);
      INFO("max |O(splits) - O(1 split)| = " << worst << ", LSE " << worstLse);
      CHECK(worst <= test::tolerance(spec.dtypeO));
      CHECK(worstLse <= 1e-5);
    }
  }
}

TEST_CASE("GPU merge_states matches the host merge (2-way, n-way, sink)",
          "[gpu][decode][merge]") {
  Device &dev = Device::get(0);
  GpuPagedOps ops(dev);
  std::mt19937_64 rng(std::random_device{}());
  const int64_t B = 3, H = 5, S = 7, D = 72;
  for (int n : {2, 5})
    for (bool withSink : {false, true}) {
      INFO(n << " states" << (withSink ? " with a sink" : ""));
      std::vector<std::unique_ptr<GpuTensor>> os, lses;
      std::vector<TensorRef> hostO, hostL, devO, devL;
      std::uniform_real_distribution<float> u(-3.0f, 3.0f);
      for (int i = 0; i < n; ++i) {
        DType dt = i % 3 == 0   ? DType::BF16
                   : i % 3 == 1 ? DType::F32
                                : DType::F16;
        os.push_back(std::make_unique<GpuTensor>(
            dev, dt, std::array<int64_t, 4>{B, H, S, D}, 4, i % 2 == 1));
        lses.push_back(std::make_unique<GpuTensor>(
            dev, DType::F32, std::array<int64_t, 4>{B, H, S, 1}, 3));
        os.back()->randomize(rng);
        // LSEs in [-3, 3]; state 1 empty (-inf, O NaN) on every third row,
        // every state empty on row (0, 0, 0).
        GpuTensor &l = *lses.back();
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t s = 0; s < S; ++s) {
              bool empty = (b == 0 && h == 0 && s == 0) ||
                           (i == 1 && (b * H * S + h * S + s) % 3 == 0);
              storeFromFloat(l.hostRef.data, DType::F32,
                             l.hostRef.offset(b, h, s),
                             empty ? -INFINITY : u(rng));
              if (empty)
                for (int64_t d = 0; d < D; ++d)
                  storeFromFloat(os.back()->hostRef.data,
                                 os.back()->hostRef.dtype,
                                 os.back()->hostRef.offset(b, h, s, d), NAN);
            }
        l.device.copyFromHost(l.host.data(), l.host.size());
        os.back()->device.copyFromHost(os.back()->host.data(),
                                       os.back()->host.size());
        hostO.push_back(os.back()->hostRef);
        hostL.push_back(l.hostRef);
        devO.push_back(os.back()->deviceRef);
        devL.push_back(l.deviceRef);
      }
      std::vector<float> sink;
      for (int64_t h = 0; h < H; ++h)
        sink.push_back(h == 2 ? -INFINITY : u(rng));
      DeviceBuffer sinkDev(dev, sink.size() * 4);
      sinkDev.copyFromHost(sink.data(), sink.size() * 4);
      GpuTensor o(dev, DType::BF16, {B, H, S, D}),
          lo(dev, DType::F32, {B, H, S, 1}, 3);
      GpuTensor want(dev, DType::BF16, {B, H, S, D}),
          wantL(dev, DType::F32, {B, H, S, 1}, 3);
      o.poison();
      lo.poison();
      mergeStates(hostO, hostL, want.hostRef, wantL.hostRef,
                  withSink ? std::span<const float>(sink)
                           : std::span<const float>());
      if (n == 2)
        ops.mergeStates(
            devO[0], devL[0], devO[1], devL[1], o.deviceRef, lo.deviceRef,
            withSink ? static_cast<const float *>(sinkDev.data()) : nullptr,
            withSink ? H : 0);
      else
        ops.mergeStates(devO, devL, o.deviceRef, lo.deviceRef,
                        withSink ? static_cast<const float *>(sinkDev.data())
                                 : nullptr,
                        withSink ? H : 0);
      o.download();
      lo.download();
      int64_t mismatches = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t s = 0; s < S; ++s) {
            const float wl = wantL.at(b, h, s), gl = lo.at(b, h, s);
            mismatches += !(wl == gl ||
                            std::fabs(wl - gl) <= 1e-6f * (1 + std::fabs(wl)));
            for (int64_t d = 0; d < D; ++d)
              mismatches += o.at(b, h, s, d) != want.at(b, h, s, d) &&
                            std::fabs(o.at(b, h, s, d) - want.at(b, h, s, d)) >
                                1e-2f * std::fabs(want.at(b, h, s, d));
          }
      CHECK(mismatches == 0);
      // Row (0, 0, 0): every state empty: O = 0, LSE = sink[0] or -inf.
      CHECK(lo.at(0, 0, 0) == (withSink ? sink[0] : -INFINITY));
      CHECK(o.at(0, 0, 0, 5) == 0.0f);
    }
  GpuTensor one(dev, DType::F32, {1, 1, 1, 2});
  std::vector<TensorRef> many(33, one.deviceRef);
  GpuTensor l1(dev, DType::F32, {1, 1, 1, 1}, 3);
  std::vector<TensorRef> manyL(33, l1.deviceRef);
  CHECK_THROWS_WITH(ops.mergeStates(many, manyL, many[0], l1.deviceRef),
                    Catch::Contains("33 states"));
}

TEST_CASE("GPU append writes what the host append writes",
          "[gpu][decode][append]") {
  Device &dev = Device::get(0);
  GpuPagedOps ops(dev);
  std::mt19937_64 rng(std::random_device{}());
  for (int64_t ps : {1, 16, 64})
    for (bool nhd : {false, true}) {
      INFO("page_size " << ps
                        << (nhd ? " [pages, page_size, heads, dim]" : ""));
      PagedCase pc(rng, ps, {300, 5, 77});
      // With page size 1, sequence 1 shares sequence 0's first page; the
      // appended tokens (the last 5 of each sequence) never collide.
      GpuTensor kc(dev, DType::BF16, {pc.numPages, 3, ps, 64}, 4, nhd);
      GpuTensor vc(dev, DType::F16, {pc.numPages, 3, ps, 32}, 4, nhd);
      fillPaged(kc, pc, rng);
      fillPaged(vc, pc, rng);
      GpuTensor kn(dev, DType::BF16, {3, 3, 5, 64}),
          vn(dev, DType::F16, {3, 3, 5, 32});
      kn.randomize(rng);
      vn.randomize(rng);
      for (bool csr : {true, false}) {
        PageList list = pc.list(csr);
        DevicePageTable table(list, dev);
        ops.append(kn.deviceRef, vn.deviceRef, kc.deviceRef, vc.deviceRef,
                   table);
        appendPagedKV(kn.hostRef, vn.hostRef, kc.hostRef, vc.hostRef, list);
        std::vector<uint8_t> kh = kc.host, vh = vc.host;
        kc.download();
        vc.download();
        CHECK(kh == kc.host); // bit for bit, NaN slots included
        CHECK(vh == vc.host);
      }
      PageList list = pc.list(true);
      DevicePageTable table(list, dev);
      GpuTensor kn6(dev, DType::BF16, {3, 3, 6, 64}),
          vn6(dev, DType::F16, {3, 3, 6, 32});
      CHECK_THROWS_WITH(ops.append(kn6.deviceRef, vn6.deviceRef, kc.deviceRef,
                                   vc.deviceRef, table),
                        Catch::Contains("seq_lens[1] = 5 < n_new = 6"));
    }
}

TEST_CASE("decode: NaN and Inf at masked keys and in unused page slots reach "
          "no row",
          "[gpu][decode][masked]") {
  // Issue 21 section 3 (and issue 17: unused page slots may hold NaN): a
  // row's result depends only on the keys it attends. Unused slots and
  // pages are NaN (fillPaged); then, per sequence of length L (q_len 16,
  // bottom-right: query i sits at L - 16 + i), V[L - 1] = inf (only query
  // 15 attends it), K[L - 4] = NaN (queries 12.. attend it: their S is NaN,
  // so are their O and LSE, also where they are a split's only content)
  // and, for the window kernel (300 keys back), V[L - 317] = NaN (query 0
  // reaches key L - 316, in the same tile for these lengths: no query
  // attends it). So queries 0..11 of
  // every head are clean and 12..15 poisoned, by construction. Oracle: the
  // float64 paged reference on the same cache.
  Device &dev = Device::get(0);
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int ran = 0;
  for (const testing::DecodeKernel &k : testing::decodeKernels()) {
    if ((k.id != "dec_window_g4" && k.id != "dec_causal_g4" &&
         k.id != "dec_causal_mha_d64_f16") ||
        !selected(k.id))
      continue;
    INFO(k.id << ": " << printSpec(k.spec));
    auto kernel = loadDecode(k, dev);
    ++ran;
    const AttentionSpec &spec = k.spec;
    const bool window = k.id == "dec_window_g4";
    for (int r = 0; r < 3; ++r) {
      const int64_t ps = r == 1 ? 64 : 16, qLen = 16;
      const int splits = r == 0 ? 1 : r == 1 ? 4 : 0; // 0: the heuristic
      INFO("page_size " << ps << ", splits " << splits);
      std::mt19937_64 rng(seed++);
      std::vector<int64_t> lens{701, 333, 129};
      const int64_t batch = static_cast<int64_t>(lens.size());
      PagedCase pc(rng, ps, lens);
      GpuTensor q(dev, spec.dtypeQ, {batch, spec.headsQ, qLen, spec.headDimQK});
      GpuTensor kc(dev, spec.dtypeK,
                   {pc.numPages, spec.headsKV, ps, spec.headDimQK});
      GpuTensor vc(dev, spec.dtypeV,
                   {pc.numPages, spec.headsKV, ps, spec.headDimV});
      GpuTensor o(dev, spec.dtypeO, {batch, spec.headsQ, qLen, spec.headDimV});
      GpuTensor lse(dev, DType::F32, {batch, spec.headsQ, qLen, 1}, 3);
      q.randomize(rng);
      fillPaged(kc, pc, rng);
      fillPaged(vc, pc, rng);
      // Key j of sequence b, every KV head and column, := x.
      auto set = [&](GpuTensor &c, size_t b, int64_t j, float x) {
        if (j < 0)
          return;
        const TensorRef &t = c.hostRef;
        for (int64_t h = 0; h < t.shape[1]; ++h)
          for (int64_t d = 0; d < t.shape[3]; ++d)
            storeFromFloat(t.data, t.dtype,
                           t.offset(pc.pagesOf[b][j / ps], h, j % ps, d), x);
      };
      for (size_t b = 0; b < lens.size(); ++b) {
        set(vc, b, lens[b] - 1, inf);
        set(kc, b, lens[b] - 4, nan);
        if (window)
          set(vc, b, lens[b] - 317, nan);
      }
      kc.device.copyFromHost(kc.host.data(), kc.host.size());
      vc.device.copyFromHost(vc.host.data(), vc.host.size());
      o.poison();
      lse.poison();
      PageList list = pc.list(/*csr=*/r != 1);
      DevicePageTable table(list, dev);
      test::VariantArgs va(dev, spec, qLen, list.maxSeqLen());
      kernel->run(q.deviceRef, kc.deviceRef, vc.deviceRef, table, o.deviceRef,
                  &lse.deviceRef, va.device, splits);
      o.download();
      lse.download();
      ReferenceOutput want = referencePagedAttention(
          spec, q.hostRef, kc.hostRef, vc.hostRef, list, va.host);
      test::AttendedRows rows =
          test::compareAttendedRows(spec, o, lse, want, batch, qLen);
      CHECK(rows.clean == 12 * spec.headsQ * batch);
      CHECK(rows.poisoned == 4 * spec.headsQ * batch);
    }
  }
  // All three unless FLASHJIT_MATRIX_ONLY picks some.
  CHECK(ran > 0);
  if (!std::getenv("FLASHJIT_MATRIX_ONLY"))
    CHECK(ran == 3);
}
