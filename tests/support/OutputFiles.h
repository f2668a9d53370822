//===- OutputFiles.h - Output folders and files of the kernel generators --===//
//
// gen_matrix_kernels, gen_decode_kernels and bench_kernels write PTX and
// manifests into a folder given on the command line; a folder that does not
// exist or a write that fails stops them with a message (they used to
// leave the folder silently empty).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_SUPPORT_OUTPUTFILES_H
#define FLASHJIT_TESTS_SUPPORT_OUTPUTFILES_H

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace flashjit::testing {

/// Creates the folder \p dir and its parents; prints \p tool, the folder
/// and the reason to stderr and exits with status 1 when it cannot.
inline void makeOutputDir(const char *tool, const std::string &dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    std::fprintf(stderr, "%s: cannot create the folder %s: %s\n", tool,
                 dir.c_str(), ec ? ec.message().c_str() : "not a folder");
    std::exit(1);
  }
}

/// Writes \p text to the file \p path (replacing it); prints the path to
/// stderr and exits with status 1 when the file cannot be written whole.
inline void writeOutputFile(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

/// Exits with status 1, naming \p path, when the stream \p out (a manifest
/// written piece by piece) has failed.
inline void checkOutputStream(std::ofstream &out, const std::string &path) {
  out.flush();
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

} // namespace flashjit::testing

#endif // FLASHJIT_TESTS_SUPPORT_OUTPUTFILES_H
