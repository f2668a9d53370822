//===- DecodeMergeAbi.h - The decode merge kernel's serial twin -*- C++ -*-===//
//
// The entry name of the merge kernel's serial twin, shared by the compiler
// (which emits it beside `<name>_decode_merge`) and the runtime (which
// launches it for few splits over many rows). Its own header so that adding
// it did not touch KernelAbi.h, which most of the tree includes; the
// merge's arguments and launch are KernelAbi.h's (mergeArgTypes,
// kMergeThreads).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_DECODEMERGEABI_H
#define FLASHJIT_RUNTIME_DECODEMERGEABI_H

namespace flashjit::abi::gpu {

/// The suffix of `<name>_decode_merge_serial`: the serial merge walk (every
/// thread of a row's CTA takes two columns over all splits in order), with
/// the arguments and launch of `<name>_decode_merge`
/// (runtime::decodeSerialMerge picks it).
inline constexpr const char *kDecodeMergeSerialSuffix = "_decode_merge_serial";

} // namespace flashjit::abi::gpu

#endif // FLASHJIT_RUNTIME_DECODEMERGEABI_H
