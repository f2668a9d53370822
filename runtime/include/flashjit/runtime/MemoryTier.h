//===- MemoryTier.h - Loaded kernels kept in memory -------------*- C++ -*-===//
//
// The in-memory tier of the kernel cache: a map from (device context, key)
// to a loaded kernel, in front of the disk cache (Cache.h).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_MEMORYTIER_H
#define FLASHJIT_RUNTIME_MEMORYTIER_H

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace flashjit::runtime {

/// The in-memory tier: (device context, key) -> loaded kernel of type T
/// (e.g. GpuAttentionKernel). Thread-safe; a kernel is loaded once per
/// context and key even under concurrent requests.
template <class T> class MemoryTier {
public:
  /// The kernel for (\p context, \p key), made by \p load on first request.
  /// Exceptions from \p load propagate and nothing is remembered.
  std::shared_ptr<const T>
  getOrLoad(const void *context, const std::string &key,
            const std::function<std::shared_ptr<const T>()> &load) {
    std::shared_ptr<Slot> slot;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::shared_ptr<Slot> &s = slots_[{context, key}];
      if (!s)
        s = std::make_shared<Slot>();
      slot = s;
    }
    std::lock_guard<std::mutex> lock(slot->mutex);
    if (!slot->value)
      slot->value = load();
    return slot->value;
  }
  /// The kernel if loaded, else nullptr.
  std::shared_ptr<const T> find(const void *context,
                                const std::string &key) const {
    std::shared_ptr<Slot> slot;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = slots_.find({context, key});
      if (it == slots_.end())
        return nullptr;
      slot = it->second;
    }
    std::lock_guard<std::mutex> lock(slot->mutex);
    return slot->value;
  }
  /// Forgets every kernel of \p context (e.g. before it is destroyed).
  void eraseContext(const void *context) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(slots_,
                  [&](const auto &kv) { return kv.first.first == context; });
  }
  /// Number of (context, key) slots.
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return slots_.size();
  }

private:
  struct Slot {
    std::mutex mutex;
    std::shared_ptr<const T> value;
  };
  mutable std::mutex mutex_;
  std::map<std::pair<const void *, std::string>, std::shared_ptr<Slot>> slots_;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_MEMORYTIER_H
