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
  /// Keys per tile as requested (0: backend default).
  int blockN = 0;
  /// GPU warps per CTA as requested (0: backend default).
  int numWarps = 0;
  /// GPU CTAs per SM as requested (0: backend default).
  int minBlocksPerSM = 0;
  /// GPU query rows per warp as requested (0: backend default).
  int rowsPerWarp = 0;
  /// GPU tensor-core instructions as requested: "default", "mma.sync" or
  /// "wgmma" (flashjit::toString(GpuMma)); empty for CPU keys.
  std::string mma;
  /// CPU only: queries per tile.
  int blockM = 0;
  /// CPU only: LLVM opt level (0..3).
  int optLevel = 0;
  /// CPU only: whether the kernel counts tiles.
  bool countTiles = false;
  /// A packed varlen kernel (another ABI), CPU and GPU.
  bool varlen = false;
  /// A block-sparse kernel (another ABI), CPU and GPU.
  bool blockSparse = false;
  /// CPU only: the host CPU's name (hostCpu()).
  std::string cpu;
  /// CPU only: the host CPU's features (hostCpu()).
  std::string cpuFeatures;
  /// flashjitVersion() of the build.
  std::string version = flashjitVersion();
  /// flashjitCommit() of the build.
  std::string commit = flashjitCommit();
  /// llvmVersion() of the build.
  std::string llvm = llvmVersion();
  /// The entry schema (kCacheVersion).
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
  /// Threads per CTA (GPU).
  int threads = 0;
  /// Query rows per CTA (GPU) or per tile (CPU).
  int blockM = 0;
  /// Keys per tile.
  int blockN = 0;
  /// Dynamic shared memory per CTA in bytes.
  int sharedBytes = 0;
  /// Registers per thread from the ptxas report; -1 when unknown.
  int registers = -1;
  /// Spill bytes (stores + loads) from the ptxas report; -1 when unknown.
  int spillBytes = -1;
  /// CPU only: whether the kernel counts tiles.
  bool countTiles = false;
  /// CPU only: the LLVM opt level it was compiled with.
  int optLevel = 0;
  /// A packed varlen kernel.
  bool varlen = false;
  /// A block-sparse kernel (CPU: kernel.so then also has the builder
  /// `<entry>_block_mask_packed`; GPU: the PTX has `<entry>_block_mask`).
  bool blockSparse = false;
  /// GPU only: the tensor-core instructions the kernel uses, "mma.sync" or
  /// "wgmma" (empty for CPU kernels).
  std::string mma;
  /// CPU only: the CPU name it was compiled for (hostCpu() there).
  std::string cpu;
  /// CPU only: the CPU features it was compiled for (hostCpu() there).
  std::string cpuFeatures;
  /// Compile time per stage, in order.
  std::vector<StageTiming> stageSeconds;
  /// File name (e.g. "kernel.ptx") -> bytes. Names are plain file names
  /// ([A-Za-z0-9._-], not starting with '.'), never "meta.json".
  std::map<std::string, std::string> files;

  /// The bytes of file \p name, or nullptr.
  const std::string *file(const std::string &name) const;
};

// Standard artifact file names.
/// The attn dialect with the user's regions (CPU and GPU).
inline constexpr const char *kAttnFile = "kernel.attn.mlir";
/// GPU: the GPU-dialect IR (before PTX generation).
inline constexpr const char *kGpuFile = "kernel.gpu.mlir";
/// GPU: the PTX.
inline constexpr const char *kPtxFile = "kernel.ptx";
/// GPU: the cubin (nvJitLink).
inline constexpr const char *kCubinFile = "kernel.cubin";
/// CPU: the tile program.
inline constexpr const char *kTiledFile = "kernel.tiled.mlir";
/// CPU: the LLVM dialect.
inline constexpr const char *kLLVMDialectFile = "kernel.llvm.mlir";
/// CPU: LLVM IR before optimisation.
inline constexpr const char *kLLVMIRFile = "kernel.ll";
/// CPU: LLVM IR after optimisation.
inline constexpr const char *kLLVMIROptFile = "kernel.opt.ll";
/// CPU: the relocatable PIC object.
inline constexpr const char *kObjectFile = "kernel.o";
/// CPU: the shared object linked from kernel.o (what the runtime loads).
inline constexpr const char *kSharedObjectFile = "kernel.so";
/// The manifest, written last (never an artifact name).
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
