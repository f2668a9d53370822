//===- CacheFiles.cpp - Atomic files and per-key locks --------------------===//
//
// The file helpers of CacheFiles.h that the disk cache and bundles share:
// file and key name checks, whole-file reads, atomic writes (a unique
// temporary renamed over the target) and KeyLock (a process-wide mutex
// plus a POSIX record lock per key).
//
//===----------------------------------------------------------------------===//
#include "CacheFiles.h"

#include "flashjit/runtime/CacheEntry.h"

#include <llvm/ADT/STLExtras.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/ADT/StringExtras.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>

#include <map>
#include <memory>
#include <mutex>
#include <unistd.h>

namespace fs = llvm::sys::fs;

namespace flashjit::runtime {

bool detail::validFileName(llvm::StringRef name) {
  if (name.empty() || name.starts_with(".") || name == kMetaFile)
    return false;
  return llvm::all_of(name, [](char c) {
    return llvm::isAlnum(c) || c == '.' || c == '_' || c == '-';
  });
}

bool detail::validKey(llvm::StringRef key) {
  return key.size() == 64 && llvm::all_of(key, [](char c) {
           return llvm::isDigit(c) || (c >= 'a' && c <= 'f');
         });
}

std::optional<std::string> detail::readFile(const llvm::Twine &p) {
  auto buf = llvm::MemoryBuffer::getFile(p, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return std::nullopt;
  return (*buf)->getBuffer().str();
}

std::error_code detail::writeFileAtomic(const std::string &p,
                                        std::string_view bytes) {
  int fd = -1;
  llvm::SmallString<256> tmp;
  if (std::error_code ec =
          fs::createUniqueFile(p + ".tmp-%%%%%%%%", fd, tmp, fs::OF_None, 0600))
    return ec;
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << bytes;
    os.close();
    if (os.has_error()) {
      std::error_code ec = os.error();
      os.clear_error();
      fs::remove(tmp);
      return ec;
    }
  }
  if (std::error_code ec = fs::rename(tmp, p)) {
    fs::remove(tmp);
    return ec;
  }
  return {};
}

namespace {

/// A process-wide mutex per lock file: POSIX record locks do not exclude
/// threads of one process from each other.
std::shared_ptr<std::mutex> processMutex(const std::string &lockPath) {
  static std::mutex mapMutex;
  static std::map<std::string, std::shared_ptr<std::mutex>> map;
  std::lock_guard<std::mutex> lock(mapMutex);
  std::shared_ptr<std::mutex> &m = map[lockPath];
  if (!m)
    m = std::make_shared<std::mutex>();
  return m;
}

} // namespace

KeyLock::KeyLock(const std::string &lockPath, std::chrono::milliseconds timeout,
                 bool tryOnly)
    : mutex_(processMutex(lockPath)), guard_(*mutex_, std::defer_lock) {
  if (tryOnly) {
    if (!guard_.try_lock())
      return;
  } else {
    guard_.lock();
  }
  if (fs::openFileForWrite(lockPath, fd_, fs::CD_OpenAlways, fs::OF_None,
                           0600)) {
    fd_ = -1;
    return;
  }
  locked_ =
      !fs::tryLockFile(fd_, tryOnly ? std::chrono::milliseconds(0) : timeout);
}

KeyLock::~KeyLock() {
  if (fd_ >= 0) {
    if (locked_)
      fs::unlockFile(fd_);
    ::close(fd_);
  }
}

} // namespace flashjit::runtime
