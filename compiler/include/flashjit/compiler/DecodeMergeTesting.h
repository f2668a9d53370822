//===- DecodeMergeTesting.h - The serial decode merge, for timing -*- C++
//-*-===//
//
// A testing hook, not an API: the decode benchmarks ([.decodesplitbench],
// [.decodebench] in tests/gpu, the `_serialmerge` ids of gen_decode_kernels)
// time the split-KV merge kernel `<name>_decode_merge` in its old form (each
// CTA's threads walk all splits in order) beside the default one (groups of
// threads take slices of the splits, reduced through shared memory), so
// they need modules built both ways. Kept out of GpuCompiler.h on purpose.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_DECODEMERGETESTING_H
#define FLASHJIT_COMPILER_DECODEMERGETESTING_H

namespace flashjit {

/// Testing only: whether decode modules compiled from now on in this process
/// get the serial merge kernel of sessions 16-18 (on; byte-identical to
/// main 1604b72's) or the parallel one (off, the default). Same entry
/// name, arguments and launch (abi::gpu::mergeArgTypes, kMergeThreads
/// threads, one CTA per row) and the same results up to the order of the
/// fp32 sums. No cache key holds it: only tools that write kernels without
/// a cache (gen_decode_kernels' `_serialmerge` ids) may turn it on.
void setDecodeSerialMergeForTesting(bool on);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_DECODEMERGETESTING_H
