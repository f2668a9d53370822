//===- DecodeCApiGpuTest.cpp - GPU decoding through the C API -------------===//
//
// flashjit_run_paged / flashjit_run_paged_ex on device memory through the
// runtime-only C library (flashjit_c_runtime, no compiler): the decode
// kernels of DecodeKernels.h (compiled ahead of time by gen_decode_kernels)
// are put in a bundle (runtime::Bundle::add, kind decode), found by
// flashjit_load (alone and beside a forward), and run against the float64
// paged reference with the page table in device and in host memory, both
// layouts, forced and automatic split counts, a sink; bad input gives
// FLASHJIT_USER_ERROR naming the field and value.
//
//===----------------------------------------------------------------------===//
#include "DecodeKernels.h"
#include "GpuTestSupport.h"
#include "PagedTestSupport.h"

#include "flashjit-c/flashjit.h"

#include "flashjit/frontend/Paged.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/Bundle.h"
#include "flashjit/runtime/CacheEntry.h"

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace flashjit;
using namespace flashjit::runtime;
using test::GpuTensor;
using test::PagedCase;

namespace {

std::string decodeKernelDir() {
  if (const char *env = std::getenv("FLASHJIT_DECODE_KERNELS"))
    return env;
  return test::matrixKernelDir() + "/decode";
}

const testing::DecodeKernel &findDecode(const std::string &id) {
  static const std::vector<testing::DecodeKernel> all =
      testing::decodeKernels();
  for (const testing::DecodeKernel &k : all)
    if (k.id == id)
      return k;
  throw std::runtime_error("no decode kernel " + id);
}

/// Adds the ahead-of-time decode kernel \p id to the bundle in \p dir as
/// `flashjit bundle --kernel decode` would (kind decode, requested tiles
/// 0, mma default).
void bundleDecode(const std::string &dir, const testing::DecodeKernel &k) {
  std::string base = decodeKernelDir() + "/" + k.id;
  std::ifstream infoFile(base + ".info"), ptxFile(base + ".ptx");
  INFO("kernel files " << base << ".{info,ptx} (gen_decode_kernels DIR)");
  REQUIRE(infoFile);
  REQUIRE(ptxFile);
  GpuKernelInfo info = test::readKernelInfo(infoFile);
  std::stringstream ptx;
  ptx << ptxFile.rdbuf();
  KernelArtifacts a;
  a.entry = info.name;
  a.specText = printSpec(k.spec);
  a.config = info.config;
  a.sharedBytes = info.sharedBytes;
  a.files[kPtxFile] = ptx.str();
  KernelConfig requested;
  requested.arch = info.config.arch;
  requested.kind = KernelKind::Decode;
  Bundle::add(dir, CacheKey::make(a.specText, requested), a);
}

flashjit_tensor cTensor(const TensorRef &t) {
  flashjit_tensor c{};
  c.data = t.data;
  c.dtype = t.dtype == DType::F16    ? FLASHJIT_FP16
            : t.dtype == DType::BF16 ? FLASHJIT_BF16
                                     : FLASHJIT_FP32;
  c.rank = t.rank;
  for (int i = 0; i < 4; ++i) {
    c.shape[i] = t.shape[i];
    c.strides[i] = t.strides[i];
  }
  return c;
}

/// A temporary bundle directory.
struct TempBundle {
  std::string path;
  TempBundle() {
    namespace fs = std::filesystem;
    path =
        (fs::temp_directory_path() /
         ("flashjit-decode-bundle-" + std::to_string(std::random_device{}())))
            .string();
    fs::remove_all(path);
  }
  ~TempBundle() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

/// Device copies of a table's int32 arrays.
struct DeviceInts {
  std::vector<std::unique_ptr<DeviceBuffer>> keep;
  const int32_t *up(Device &dev, const std::vector<int32_t> &v) {
    keep.push_back(std::make_unique<DeviceBuffer>(
        dev, std::max<size_t>(v.size(), 1) * sizeof(int32_t)));
    if (!v.empty())
      keep.back()->copyFromHost(v.data(), v.size() * sizeof(int32_t));
    return static_cast<const int32_t *>(keep.back()->data());
  }
};

/// Runs the bundled decode of \p kernel through flashjit_run_paged_ex on a
/// random paged cache and checks O and LSE against the float64 paged
/// reference.
void checkCApi(Device &dev, const flashjit_kernel *kernel,
               const AttentionSpec &spec, std::vector<int64_t> lens,
               int64_t pageSize, int64_t qLen, bool csr, bool tableOnDevice,
               int numSplits, uint64_t seed) {
  INFO("page_size " << pageSize << " q_len " << qLen
                    << (csr ? " csr" : " block table")
                    << (tableOnDevice ? " (device)" : " (host)") << " splits "
                    << numSplits << " seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t batch = static_cast<int64_t>(lens.size());
  PagedCase pc(rng, pageSize, lens);
  GpuTensor q(dev, spec.dtypeQ, {batch, spec.headsQ, qLen, spec.headDimQK});
  GpuTensor kc(dev, spec.dtypeK,
               {pc.numPages, spec.headsKV, pageSize, spec.headDimQK});
  GpuTensor vc(dev, spec.dtypeV,
               {pc.numPages, spec.headsKV, pageSize, spec.headDimV});
  GpuTensor o(dev, spec.dtypeO, {batch, spec.headsQ, qLen, spec.headDimV});
  GpuTensor lse(dev, DType::F32, {batch, spec.headsQ, qLen, 1}, 3);
  q.randomize(rng);
  test::fillPaged(kc, pc, rng);
  test::fillPaged(vc, pc, rng);
  o.poison();
  lse.poison();
  DeviceInts ints;
  auto arr = [&](const std::vector<int32_t> &v) {
    return tableOnDevice ? ints.up(dev, v) : v.data();
  };
  flashjit_page_table t{};
  t.batch = batch;
  if (csr) {
    t.layout = FLASHJIT_PAGED_CSR;
    t.kv_indptr = arr(pc.indptr);
    t.kv_indices = arr(pc.indices);
    t.num_indices = static_cast<int64_t>(pc.indices.size());
    t.kv_last_page_len = arr(pc.lastLen);
  } else {
    t.layout = FLASHJIT_PAGED_BLOCK_TABLE;
    t.block_table = arr(pc.table);
    t.max_pages = pc.maxPages;
    t.seq_lens = arr(pc.seqLens);
  }
  std::vector<float> sinkHost;
  std::unique_ptr<DeviceBuffer> sinkDev;
  std::vector<flashjit_arg> args;
  Arguments hostArgs;
  if (spec.sink) {
    std::uniform_real_distribution<float> u(-2.0f, 3.0f);
    for (int h = 0; h < spec.headsQ; ++h)
      sinkHost.push_back(u(rng));
    sinkDev = std::make_unique<DeviceBuffer>(dev, sinkHost.size() * 4);
    sinkDev->copyFromHost(sinkHost.data(), sinkHost.size() * 4);
    flashjit_arg a{};
    a.name = FLASHJIT_SINK;
    a.kind = FLASHJIT_ARG_BUFFER_F32;
    a.data = sinkDev->data();
    a.size = spec.headsQ;
    args.push_back(a);
    hostArgs.bindSink(sinkHost.data(), spec.headsQ);
  }
  flashjit_tensor cq = cTensor(q.deviceRef), ck = cTensor(kc.deviceRef),
                  cv = cTensor(vc.deviceRef), co = cTensor(o.deviceRef),
                  cl = cTensor(lse.deviceRef);
  flashjit_status st =
      numSplits < 0 ? flashjit_run_paged(kernel, &cq, &ck, &cv, &t, &co, &cl,
                                         args.data(), int(args.size()))
                    : flashjit_run_paged_ex(kernel, &cq, &ck, &cv, &t, &co, &cl,
                                            args.data(), int(args.size()),
                                            numSplits, nullptr);
  INFO(flashjit_last_error());
  REQUIRE(st == FLASHJIT_OK);
  o.download();
  lse.download();
  ReferenceOutput want = referencePagedAttention(
      spec, q.hostRef, kc.hostRef, vc.hostRef, pc.list(csr), hostArgs);
  test::compareOutputs(spec, o, lse, want, batch, qLen);
}

} // namespace

TEST_CASE("the C API decodes on the GPU with a bundled decode kernel",
          "[gpu][decode]") {
  Device &dev = Device::get(0);
  uint64_t seed = std::random_device{}();
  TempBundle bundle;
  const testing::DecodeKernel &causal = findDecode("dec_causal_g4");
  const testing::DecodeKernel &sink = findDecode("dec_sink_g4");
  const testing::DecodeKernel &fp16 = findDecode("dec_causal_mha_d64_f16");
  for (const testing::DecodeKernel *k : {&causal, &sink, &fp16})
    bundleDecode(bundle.path, *k);
  for (const testing::DecodeKernel *k : {&causal, &sink, &fp16}) {
    INFO(k->id << ": " << printSpec(k->spec));
    flashjit_kernel *kernel = nullptr;
    std::string text = printSpec(k->spec);
    REQUIRE(flashjit_load(bundle.path.c_str(), text.c_str(), "sm_90a",
                          &kernel) == FLASHJIT_OK);
    // Automatic splits, device CSR table; forced splits with empty ones,
    // host block table; page sizes 16 and 64; q_len 1, 4 and 64.
    checkCApi(dev, kernel, k->spec, {700, 300, 1, 0}, 16, 1, true, true, -1,
              seed);
    checkCApi(dev, kernel, k->spec, {1037, 65}, 64, 4, false, false, 9,
              seed + 1);
    checkCApi(dev, kernel, k->spec, {129, 64, 2}, 16, 64, false, true, 1,
              seed + 2);
    // A bundle with only decode kernels: the forward entry points refuse.
    const AttentionSpec &s = k->spec;
    GpuTensor q1(dev, s.dtypeQ, {1, s.headsQ, 1, s.headDimQK});
    GpuTensor k1(dev, s.dtypeK, {1, s.headsKV, 16, s.headDimQK});
    GpuTensor v1(dev, s.dtypeV, {1, s.headsKV, 16, s.headDimV});
    GpuTensor o1(dev, s.dtypeO, {1, s.headsQ, 1, s.headDimV});
    flashjit_tensor cq = cTensor(q1.deviceRef), ck = cTensor(k1.deviceRef),
                    cv = cTensor(v1.deviceRef), co = cTensor(o1.deviceRef);
    CHECK(flashjit_run(kernel, &cq, &ck, &cv, &co, nullptr, nullptr, 0,
                       nullptr) == FLASHJIT_USER_ERROR);
    CHECK(std::string(flashjit_last_error()).find("only its decode kernels") !=
          std::string::npos);
    flashjit_kernel_destroy(kernel);
  }
}

TEST_CASE("GPU flashjit_run_paged errors name the field", "[gpu][decode]") {
  Device &dev = Device::get(0);
  TempBundle bundle;
  const testing::DecodeKernel &k = findDecode("dec_causal_g4");
  bundleDecode(bundle.path, k);
  flashjit_kernel *kernel = nullptr;
  std::string text = printSpec(k.spec);
  REQUIRE(flashjit_load(bundle.path.c_str(), text.c_str(), "sm_90a", &kernel) ==
          FLASHJIT_OK);
  std::mt19937_64 rng(3);
  PagedCase pc(rng, 16, {40, 3});
  GpuTensor q(dev, DType::BF16, {2, 32, 1, 128});
  GpuTensor q65(dev, DType::BF16, {2, 32, 65, 128});
  GpuTensor kc(dev, DType::BF16, {pc.numPages, 8, 16, 128});
  GpuTensor o(dev, DType::BF16, {2, 32, 1, 128});
  GpuTensor o65(dev, DType::BF16, {2, 32, 65, 128});
  flashjit_tensor cq = cTensor(q.deviceRef), cq65 = cTensor(q65.deviceRef),
                  ck = cTensor(kc.deviceRef), co = cTensor(o.deviceRef),
                  co65 = cTensor(o65.deviceRef);
  std::vector<int32_t> indices = pc.indices;
  flashjit_page_table t{};
  t.layout = FLASHJIT_PAGED_CSR;
  t.batch = 2;
  t.kv_indptr = pc.indptr.data();
  t.kv_indices = indices.data();
  t.num_indices = static_cast<int64_t>(indices.size());
  t.kv_last_page_len = pc.lastLen.data();
  auto expect = [&](flashjit_status st, const char *needle) {
    CHECK(st == FLASHJIT_USER_ERROR);
    INFO(flashjit_last_error());
    CHECK(std::string(flashjit_last_error()).find(needle) != std::string::npos);
  };
  expect(flashjit_run_paged(kernel, &cq65, &ck, &ck, &t, &co65, nullptr,
                            nullptr, 0),
         "q.shape[2] = 65");
  expect(flashjit_run_paged_ex(kernel, &cq, &ck, &ck, &t, &co, nullptr, nullptr,
                               0, 5000, nullptr),
         "num_splits = 5000");
  indices[1] = static_cast<int32_t>(pc.numPages + 7);
  expect(
      flashjit_run_paged(kernel, &cq, &ck, &ck, &t, &co, nullptr, nullptr, 0),
      "kv_indices[1]");
  // The same bad entry in a device-memory table is found on its host copy.
  DeviceInts ints;
  t.kv_indices = ints.up(dev, indices);
  expect(
      flashjit_run_paged(kernel, &cq, &ck, &ck, &t, &co, nullptr, nullptr, 0),
      "kv_indices[1]");
  flashjit_kernel_destroy(kernel);
}
