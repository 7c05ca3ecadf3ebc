// A thread-safe least-recently-used cache bounded by the bytes its entries
// are charged. Counts hits, misses and evictions, in its own stats and in
// Prometheus when given a CacheMetrics.
#ifndef ECHO_SERVER_BYTES_LRU_H_
#define ECHO_SERVER_BYTES_LRU_H_

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "server/metrics.h"

namespace echo::server {

struct CacheStats {
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;
};

template <typename Value>
class BytesLru {
 public:
  // `metrics` may be null.
  BytesLru(int64_t capacity_bytes, std::optional<CacheMetrics> metrics)
      : capacity_bytes_(capacity_bytes), metrics_(std::move(metrics)) {}

  int64_t capacity_bytes() const { return capacity_bytes_; }

  // The value (a copy; make Value a shared_ptr for large ones), now the most
  // recently used; nullopt on a miss.
  std::optional<Value> Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) {
      ++stats_.misses;
      if (metrics_) metrics_->misses.Increment();
      return std::nullopt;
    }
    ++stats_.hits;
    if (metrics_) metrics_->hits.Increment();
    order_.splice(order_.begin(), order_, it->second);
    return it->second->value;
  }

  // Without counting a hit or a miss, or touching the order.
  bool Contains(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    return index_.contains(key);
  }

  // Inserts or replaces, then evicts the least recently used entries until
  // the charged bytes fit. False (nothing stored) when `bytes` alone exceed
  // the capacity.
  bool Insert(const std::string& key, Value value, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes > capacity_bytes_) return false;
    auto it = index_.find(key);
    if (it != index_.end()) {
      stats_.bytes -= it->second->bytes;
      order_.erase(it->second);
      index_.erase(it);
    }
    order_.push_front(Entry{key, std::move(value), bytes});
    index_[key] = order_.begin();
    stats_.bytes += bytes;
    while (stats_.bytes > capacity_bytes_) {
      const Entry& victim = order_.back();
      stats_.bytes -= victim.bytes;
      index_.erase(victim.key);
      order_.pop_back();
      ++stats_.evictions;
      if (metrics_) metrics_->evictions.Increment();
    }
    stats_.entries = static_cast<int64_t>(order_.size());
    PublishSizes();
    return true;
  }

  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    order_.clear();
    index_.clear();
    stats_.entries = 0;
    stats_.bytes = 0;
    PublishSizes();
  }

  CacheStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  struct Entry {
    std::string key;
    Value value;
    int64_t bytes;
  };
  using Iterator = typename std::list<Entry>::iterator;

  void PublishSizes() {
    if (!metrics_) return;
    metrics_->entries.Set(static_cast<double>(stats_.entries));
    metrics_->bytes.Set(static_cast<double>(stats_.bytes));
  }

  const int64_t capacity_bytes_;
  std::optional<CacheMetrics> metrics_;
  mutable std::mutex mu_;
  std::list<Entry> order_;  // most recently used first
  absl::flat_hash_map<std::string, Iterator> index_;
  CacheStats stats_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_BYTES_LRU_H_
