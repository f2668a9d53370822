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
#include "flashjit/runtime/KernelAbi.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace flashjit::runtime {

/// Schema version of cache entries and bundles; bumped whenever the layout
/// or meta.json changes. Entries of another version are misses.
/// 2: CPU entries (kernel.o, kernel.so) and the CPU key fields.
/// 3: one "config" object (KernelConfig) in keys, manifests and bundle
///    indexes, the kernel kind, and the manifest's own digest.
inline constexpr int kCacheVersion = 3;

/// Everything that determines a cache entry's content.
struct CacheKey {
  /// Canonical spec text (printSpec).
  std::string specText;
  /// The kernel configuration as requested: config.arch is the target
  /// ("sm_80", "sm_90a" or "cpu"), config.kind the kernel kind; GPU tile
  /// fields that are 0 mean "the tile policy picks". config.wgmma is not
  /// part of a GPU request (mma is).
  KernelConfig config;
  /// GPU tensor-core instructions as requested: "default", "mma.sync" or
  /// "wgmma" (flashjit::toString(GpuMma)); empty for CPU keys.
  std::string mma;
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

  /// A GPU key for \p requested (the tile fields as asked, 0: pick) with
  /// tensor-core request \p mma, for the current build and process
  /// environment.
  static CacheKey make(std::string specText, KernelConfig requested,
                       std::string mma = "default");
  /// make() for target \p arch with the tile fields \p blockN, \p numWarps
  /// and \p minBlocksPerSM as requested (0: pick) and mma "default".
  static CacheKey make(std::string specText, std::string arch, int blockN = 0,
                       int numWarps = 0, int minBlocksPerSM = 0);
  /// A CPU key for this host (hostCpu()), build and environment:
  /// \p config is the resolved CPU configuration (arch "cpu"; cpuBlockM,
  /// blockN, optLevel, countTiles, varlen, blockSparse, kind).
  static CacheKey makeCpu(std::string specText, KernelConfig config);
  /// The target, config.arch.
  const std::string &arch() const { return config.arch; }
  /// The text that is hashed: one "field=value" line per component.
  std::string canonicalText() const;
  /// Lower-case hex SHA-256 of canonicalText() (64 characters).
  std::string hash() const;
  bool operator==(const CacheKey &) const = default;
};

/// Wall time of one compile stage: what compilers report (CpuKernel::timings,
/// GpuKernelImage::timings) and meta.json records (KernelArtifacts).
struct StageTiming {
  /// The stage, e.g. "mlirgen" or "cubin (ptxas)" / "cubin (nvJitLink)";
  /// "total" for the sum.
  std::string name;
  /// Wall time in seconds.
  double seconds = 0.0;
};

/// A compiled kernel: its files and launch facts (what meta.json records).
struct KernelArtifacts {
  /// The kernel's entry symbol.
  std::string entry;
  /// Canonical spec text.
  std::string specText;
  /// The resolved kernel configuration: target (config.arch), kind, tiles
  /// and modes, every field chosen.
  KernelConfig config;
  /// GPU: dynamic shared memory per CTA in bytes
  /// (config.sharedBytes(head dims)).
  int sharedBytes = 0;
  /// Registers per thread from the ptxas report; -1 when unknown.
  int registers = -1;
  /// Spill bytes (stores + loads) from the ptxas report; -1 when unknown.
  int spillBytes = -1;
  /// CPU only: the CPU name it was compiled for (hostCpu() there).
  std::string cpu;
  /// CPU only: the CPU features it was compiled for (hostCpu() there).
  std::string cpuFeatures;
  /// Compile time per stage, in order.
  std::vector<StageTiming> stageSeconds;
  /// File name (e.g. "kernel.ptx") -> bytes. Names are plain file names
  /// ([A-Za-z0-9._-], not starting with '.'), never "meta.json".
  std::map<std::string, std::string> files;

  /// The target, config.arch.
  const std::string &arch() const { return config.arch; }
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
/// meta.json text for \p key: the key's inputs (with the requested
/// KernelConfig), the resolved KernelConfig, and "manifest_sha256", the
/// SHA-256 of the text itself with that value written as 64 zeros.
std::string metaJson(const KernelArtifacts &a, const CacheKey &key);

/// Reads and verifies the entry in directory \p entryDir: meta.json parses,
/// its schema is kCacheVersion, its own digest (manifest_sha256) holds, its
/// key inputs hash to its key, that key is \p expectedKey (when not empty),
/// the recorded spec and target are those of the key, and every file
/// matches its checksum. Returns nullopt with the reason in \p whyNot
/// otherwise; on success \p keyInputs (if given) receives the key the
/// manifest records. Never throws.
std::optional<KernelArtifacts> readEntry(const std::string &entryDir,
                                         const std::string &expectedKey,
                                         std::string *whyNot = nullptr,
                                         CacheKey *keyInputs = nullptr);

/// readEntry() for the request \p expected: also fails unless the key
/// inputs recorded in the manifest are exactly \p expected's (spec text,
/// target, kind, requested configuration, build, host CPU, environment).
std::optional<KernelArtifacts> readEntry(const std::string &entryDir,
                                         const CacheKey &expected,
                                         std::string *whyNot = nullptr);

/// Empty when the resolved configuration \p a.config can be what \p key
/// asked for (same target and kind and modes; every non-zero requested
/// tile field equal; CPU: the whole configuration), else why not. Bundles
/// run it on every lookup; the compile-or-load layer checks hits more
/// strictly (the configuration the request resolves to).
std::string configMismatch(const CacheKey &key, const KernelArtifacts &a);

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_CACHEENTRY_H
