// The memory echod's requests may use at once, reserved before a request is
// parsed from what its wire bytes say it will take, so that no mix of valid
// requests takes echod past its budget (issue 23: three concurrent 53 MB
// estimates took it to 3.9 GB, under a 4 GiB pod limit). A request that
// would exceed what is left is RESOURCE_EXHAUSTED, like a full queue.
#ifndef ECHO_SERVER_MEMORY_BUDGET_H_
#define ECHO_SERVER_MEMORY_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/byte_buffer.h"

namespace echo::server {

// What parsing a request and planning on it take, per wire byte and per
// field occurrence (any depth), measured on echod (VmHWM over the base, one
// request at a time): a 51 MB graph of 300k ops with long ids took 776 MB;
// 30 MB of 1M ops with 1-3 byte ids, 1.15 GB; 14 MB of a 100k-op training
// graph, 255 MB for an estimate, an AUTO plan or a frontier alike. These
// coefficients cover each with 4-40% to spare.
inline constexpr int64_t kWorkingSetBytesPerWireByte = 10;
inline constexpr int64_t kWorkingSetBytesPerField = 160;
inline constexpr int64_t kWorkingSetBaseBytes = int64_t{8} << 20;
// After a request that reserved this much, freed memory goes back to the OS
// (malloc_trim): glibc kept 550 MB of a 776 MB estimate otherwise.
inline constexpr int64_t kTrimAfterBytes = int64_t{64} << 20;
// Of the memory limit (the cgroup's, else the machine's), the share echod
// plans to use when --memory_budget_bytes is not set; the rest is headroom
// for what is not counted (gRPC's buffers before a request is read, the
// allocator's fragmentation).
inline constexpr double kDefaultMemoryBudgetShare = 0.75;
// Of an address-space limit, what echod's mappings take besides the memory
// it uses (VmSize 734 MB at start with 13 threads, VmRSS 21 MB).
inline constexpr int64_t kAddressSpaceOverheadBytes = int64_t{1} << 30;
// Memory echod itself uses before any request (measured ~21 MB RSS).
inline constexpr int64_t kServerBaseBytes = int64_t{64} << 20;
// Echod refuses to start with less than this for its requests.
inline constexpr int64_t kMinRequestMemoryBytes = int64_t{64} << 20;

// A request's working set from its wire bytes, walked with `type`'s
// descriptor without parsing it: O(bytes), nothing allocated per field.
// Malformed data is counted as far as it goes (parsing reports it).
int64_t EstimateWorkingSetBytes(const grpc::ByteBuffer& request,
                                const google::protobuf::Descriptor& type);

class MemoryBudget {
 public:
  // capacity_bytes <= 0: unbounded (nothing is refused).
  explicit MemoryBudget(int64_t capacity_bytes)
      : capacity_bytes_(capacity_bytes) {}

  // Held while the request runs; returns its bytes when destroyed.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation() { Release(); }
    int64_t bytes() const { return bytes_; }
    // Holds `bytes` instead: less always works (the rest goes back to the
    // budget); more only when it fits, else Reserve's error and the bytes
    // held stay as they were.
    absl::Status Resize(int64_t bytes);
    // Gives the bytes back now; later calls do nothing.
    void Release();

   private:
    friend class MemoryBudget;
    MemoryBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  // RESOURCE_EXHAUSTED naming the request's estimate, what is in use and the
  // capacity when `bytes` does not fit now; a request bigger than the whole
  // budget says it can never fit.
  absl::StatusOr<Reservation> Reserve(int64_t bytes);

  // Reserves `bytes` (at most the whole budget) now when they fit behind
  // the calls already waiting, else once releases make room, first come
  // first served, so that a big request is not passed over for ever by
  // small ones. `granted` runs once, outside the budget's lock: here or on
  // the thread whose release made room. Returns a ticket for CancelWait.
  using Granted = std::function<void(Reservation)>;
  uint64_t Wait(int64_t bytes, Granted granted);
  // True when `ticket` was still waiting: it is removed and its `granted`
  // never runs. False when it was granted already (or is unknown).
  bool CancelWait(uint64_t ticket);

  // Told the bytes in use and the calls waiting after every change, under
  // the budget's lock (so in order): it must not call the budget. Set it
  // before the budget is shared.
  using Observer = std::function<void(int64_t in_use_bytes, int waiting)>;
  void SetObserver(Observer observer) { observer_ = std::move(observer); }

  int64_t capacity_bytes() const { return capacity_bytes_; }
  int64_t in_use_bytes() const;
  // Calls in Wait not granted yet.
  int waiting() const;

  // Returns freed memory to the OS (malloc_trim) when a reservation of
  // kTrimAfterBytes or more was released since the last call. Called once
  // the request's objects are gone (the worker pool, after each task): at
  // the release itself they are still alive.
  void TrimIfReleased();

 private:
  struct Waiter {
    uint64_t ticket;
    int64_t bytes;
    Granted granted;
  };
  // Why `bytes` more cannot be reserved now, with `others_bytes` in use
  // besides the caller's own; OK when they fit. Under mutex_.
  absl::Status CheckFits(int64_t bytes, int64_t others_bytes) const;
  void Release(int64_t bytes);
  // `bytes` more in use, held by the reservation returned. Under mutex_.
  Reservation Take(int64_t bytes);
  // Grants the waiters at the head that fit now, outside the lock.
  void GrantWaiters();
  // Tells the observer. Under mutex_.
  void Observe() const {
    if (observer_) observer_(in_use_bytes_, static_cast<int>(waiters_.size()));
  }

  const int64_t capacity_bytes_;
  mutable std::mutex mutex_;
  int64_t in_use_bytes_ = 0;
  std::deque<Waiter> waiters_;
  uint64_t next_ticket_ = 1;
  Observer observer_;
  std::atomic<bool> trim_pending_{false};
};

// --memory_budget_bytes' default: kDefaultMemoryBudgetShare of the smallest
// of the cgroup's memory limit, the machine's memory and the address-space
// limit less kAddressSpaceOverheadBytes.
int64_t DefaultMemoryBudgetBytes(std::optional<int64_t> cgroup_limit_bytes);

}  // namespace echo::server

#endif  // ECHO_SERVER_MEMORY_BUDGET_H_
