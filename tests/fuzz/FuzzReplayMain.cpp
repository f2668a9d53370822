//===- FuzzReplayMain.cpp - Run a fuzz target on corpus files -------------===//
//
// A main() for the fuzz targets where no libFuzzer is available (the
// project's g++ build): runs LLVMFuzzerTestOneInput once on every file named
// on the command line, or in a directory named there, so the seed corpus
// and every input a fuzzer once found stay regression tests on every
// machine. Prints the number of inputs run; a finding aborts.
//
//===----------------------------------------------------------------------===//
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {
int runFile(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", p.c_str());
    return 1;
  }
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()),
                         bytes.size());
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  int runs = 0, bad = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path p(argv[i]);
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(p)) {
      for (const auto &entry : std::filesystem::directory_iterator(p))
        if (entry.is_regular_file())
          files.push_back(entry.path());
    } else {
      files.push_back(p);
    }
    for (const auto &f : files) {
      bad += runFile(f);
      ++runs;
    }
  }
  std::printf("replayed %d inputs\n", runs);
  return bad || runs == 0 ? 1 : 0;
}
