//===- CacheEntry.h - Cache keys, artifacts and manifests -------*- C++ -*-===//
//
// One cache entry: the key that names it (CacheKey, hashed to the entry's
// directory name), the files and launch facts it holds (KernelArtifacts)
// and its manifest meta.json, written last and checked on every read
// (metaJson, readEntry). The disk cache (Cache.h) and bundles (Bundle.h)
// store entries in this form. Needs no MLIR and no CUDA.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_CACHEENTRY_H
#define FLASHJIT_RUNTIME_CACHEENTRY_H

#include "flashjit/runtime/BuildId.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace flashjit::runtime {

/// Schema version of cache entries and bundles; bumped whenever the layout
/// or meta.json changes. Entries of another version are misses.
/// 2: CPU entries (kernel.o, kernel.so) and the CPU key fields.
inline constexpr int kCacheVersion = 2;

/// Everything that determines a cache entry's content.
struct CacheKey {
  /// Canonical spec text (printSpec).
  std::string specText;
  /// Target: "sm_80", "sm_90a" or "cpu".
  std::string arch;
  /// Keys per tile, warps per CTA and CTAs per SM as requested (0: backend
  /// default).
  int blockN = 0;
  int numWarps = 0;
  int minBlocksPerSM = 0;
  /// GPU query rows per warp as requested (0: backend default).
  int rowsPerWarp = 0;
  /// GPU tensor-core instructions as requested: "default", "mma.sync" or
  /// "wgmma" (flashjit::toString(GpuMma)); empty for CPU keys.
  std::string mma;
  /// CPU only: queries per tile, LLVM opt level (0..3), whether the kernel
  /// counts tiles, and the host CPU name and features (see hostCpu()).
  int blockM = 0;
  int optLevel = 0;
  bool countTiles = false;
  /// Packed varlen and block-sparse kernels (different ABIs), CPU and GPU.
  bool varlen = false;
  bool blockSparse = false;
  std::string cpu;
  std::string cpuFeatures;
  std::string version = flashjitVersion();
  std::string commit = flashjitCommit();
  std::string llvm = llvmVersion();
  int schema = kCacheVersion;
  /// Cache-relevant environment variables (name, value; unset ones absent).
  std::vector<std::pair<std::string, std::string>> env;

  /// A key for the current build and process environment.
  static CacheKey make(std::string specText, std::string arch, int blockN = 0,
                       int numWarps = 0, int minBlocksPerSM = 0);
  /// A CPU key ("cpu") for this host, build and environment: \p blockM and
  /// \p blockN are the tile sizes the kernel is compiled with, \p optLevel
  /// LLVM's level (0..3); \p varlen and \p blockSparse the kernel's modes.
  static CacheKey makeCpu(std::string specText, int blockM, int blockN,
                          int optLevel, bool countTiles, bool varlen = false,
                          bool blockSparse = false);
  /// The text that is hashed: one "field=value" line per component.
  std::string canonicalText() const;
  /// Lower-case hex SHA-256 of canonicalText() (64 characters).
  std::string hash() const;
};

/// Wall time of one compile stage: what compilers report (CpuKernel::timings,
/// GpuKernelImage::timings) and meta.json records (KernelArtifacts).
struct StageTiming {
  /// The stage, e.g. "mlirgen" or "cubin (nvJitLink)"; "total" for the sum.
  std::string name;
  /// Wall time in seconds.
  double seconds = 0.0;
};

/// A compiled kernel: its files and launch facts (what meta.json records).
struct KernelArtifacts {
  /// The kernel's entry symbol.
  std::string entry;
  /// Target, e.g. "sm_90a".
  std::string arch;
  /// Canonical spec text.
  std::string specText;
  /// Threads per CTA, query rows per CTA, keys per tile.
  int threads = 0;
  int blockM = 0;
  int blockN = 0;
  /// Dynamic shared memory per CTA in bytes.
  int sharedBytes = 0;
  /// Registers per thread and spill bytes (stores + loads) from the ptxas
  /// report; -1 when unknown.
  int registers = -1;
  int spillBytes = -1;
  /// CPU only: whether the kernel counts tiles, its LLVM opt level, and the
  /// CPU name and features it was compiled for (hostCpu() there).
  bool countTiles = false;
  int optLevel = 0;
  /// A packed varlen kernel; a block-sparse kernel (CPU: kernel.so then
  /// also has the builder `<entry>_block_mask_packed`; GPU: the PTX has
  /// `<entry>_block_mask`).
  bool varlen = false;
  bool blockSparse = false;
  /// GPU only: the tensor-core instructions the kernel uses, "mma.sync" or
  /// "wgmma" (empty for CPU kernels).
  std::string mma;
  std::string cpu;
  std::string cpuFeatures;
  /// Compile time per stage, in order.
  std::vector<CacheStageTime> stageSeconds;
  /// File name (e.g. "kernel.ptx") -> bytes. Names are plain file names
  /// ([A-Za-z0-9._-], not starting with '.'), never "meta.json".
  std::map<std::string, std::string> files;

  /// The bytes of file \p name, or nullptr.
  const std::string *file(const std::string &name) const;
};

/// Standard artifact file names.
inline constexpr const char *kAttnFile = "kernel.attn.mlir";
inline constexpr const char *kGpuFile = "kernel.gpu.mlir";
inline constexpr const char *kPtxFile = "kernel.ptx";
inline constexpr const char *kCubinFile = "kernel.cubin";
/// CPU stages: the tile program, the LLVM dialect, LLVM IR before and after
/// optimisation, the relocatable PIC object and the shared object linked
/// from it (what the runtime loads).
inline constexpr const char *kTiledFile = "kernel.tiled.mlir";
inline constexpr const char *kLLVMDialectFile = "kernel.llvm.mlir";
inline constexpr const char *kLLVMIRFile = "kernel.ll";
inline constexpr const char *kLLVMIROptFile = "kernel.opt.ll";
inline constexpr const char *kObjectFile = "kernel.o";
inline constexpr const char *kSharedObjectFile = "kernel.so";
inline constexpr const char *kMetaFile = "meta.json";

/// Serialises \p a (without file contents, with their checksums) as
/// meta.json text for \p key.
std::string metaJson(const KernelArtifacts &a, const CacheKey &key);

/// Reads and verifies the entry in directory \p entryDir: meta.json parses,
/// its schema is kCacheVersion, its key is \p expectedKey (when not empty)
/// and every file matches its checksum. Returns nullopt with the reason in
/// \p whyNot otherwise. Never throws.
std::optional<KernelArtifacts> readEntry(const std::string &entryDir,
                                         const std::string &expectedKey,
                                         std::string *whyNot = nullptr);

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_CACHEENTRY_H
