//===- Races.h - Shared-memory races by happens-before ----------*- C++ -*-===//
//
// Part of moe-compiler's PTX emulator (private). A vector-clock race
// detector over one CTA's shared memory, in the manner of FastTrack: every
// byte remembers its last write and last read as epochs (a
// thread and its clock). An access races when the other access's epoch is
// not ordered before the accessing thread's clock vector.
//
// What orders: program order; a completed named barrier (its arrivals
// release, its waiters acquire); an mbarrier (arrivals and transaction
// bytes release into the barrier, a successful try_wait or test_wait
// acquires what its completed phases released). A TMA copy writes as the
// mbarrier's "async proxy": its epoch is (the mbarrier, the phase the copy
// completes), so only a thread that waited for that phase reads it
// ordered. A wgmma reads its operands until a wgmma.wait_group retires its
// group: writing them before is a race; afterwards a write must be ordered
// after any one of the warpgroup's threads at its retirement.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_EMU_LIB_RACES_H
#define MOE_EMU_LIB_RACES_H

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace moe::emu {

class RaceDetector {
public:
  static constexpr uint16_t kNone = 0xFFFF;
  static constexpr uint16_t kGroupRead = 0xFFFE; // a retired wgmma's read
  static constexpr uint32_t kMaxSlots = 128;     // mbarriers tracked

  bool enabled() const { return on; }
  void disable() { on = false; }

  void reset(uint32_t threadCount, uint32_t sharedBytes) {
    on = true;
    threads = threadCount;
    size = threadCount + kMaxSlots;
    clocks.assign(static_cast<size_t>(threads) * size, 0);
    for (uint32_t t = 0; t < threads; ++t)
      clocks[static_cast<size_t>(t) * size + t] = 1;
    // Only the bytes the last CTA touched need clearing (every entry at or
    // past `touched` is still fresh); a CTA's shadow is 12 bytes a byte.
    std::fill(shadow.begin(), shadow.begin() + touched, Shadow{});
    std::fill(inflight.begin(), inflight.begin() + touched, 0);
    if (shadow.size() < sharedBytes) {
      shadow.resize(sharedBytes);
      inflight.resize(sharedBytes, 0);
    }
    touched = 0;
    slots.clear();
    slotAddress.clear();
    slotAcc.clear();
    for (auto &b : barAcc)
      b.assign(size, 0);
    groups.clear();
    snapshots.clear();
  }

  // ---- synchronization -----------------------------------------------------

  uint32_t *clock(uint32_t t) { return &clocks[static_cast<size_t>(t) * size]; }

  void join(uint32_t *__restrict dst, const uint32_t *__restrict src) {
    // `n` is a local so the loop vectorizes (`dst` might alias `size`).
    const uint32_t n = size;
    for (uint32_t i = 0; i < n; ++i)
      dst[i] = std::max(dst[i], src[i]);
  }

  /// Thread t releases into `acc` (an arrival) and moves on.
  void release(uint32_t t, std::vector<uint32_t> &acc) {
    join(acc.data(), clock(t));
    ++clock(t)[t];
  }
  void acquire(uint32_t t, const std::vector<uint32_t> &acc) {
    join(clock(t), acc.data());
  }

  /// Threads `tids` synchronize with each other (bar.warp.sync): each is
  /// then ordered after what every one of them did before.
  void syncGroup(const std::vector<uint32_t> &tids) {
    std::vector<uint32_t> acc(size, 0);
    for (uint32_t t : tids)
      release(t, acc);
    for (uint32_t t : tids)
      acquire(t, acc);
  }

  std::vector<uint32_t> &barrier(uint32_t id) { return barAcc[id]; }
  void clearBarrier(uint32_t id) { barAcc[id].assign(size, 0); }

  /// The slot of the mbarrier at `address` (made at mbarrier.init), or -1
  /// when there are more mbarriers than slots (then they order nothing
  /// that is checked).
  int slot(uint32_t address, bool create) {
    auto it = slots.find(address);
    if (it != slots.end())
      return static_cast<int>(it->second);
    if (!create || slotAddress.size() >= kMaxSlots)
      return -1;
    uint32_t s = static_cast<uint32_t>(slotAddress.size());
    slots[address] = s;
    slotAddress.push_back(address);
    slotAcc.emplace_back(size, 0);
    return static_cast<int>(s);
  }
  std::vector<uint32_t> &mbarrierAcc(int s) { return slotAcc[s]; }
  /// An mbarrier phase completed: its async proxy's clock is the number of
  /// completed phases.
  void phaseCompleted(int s, uint32_t completed) {
    slotAcc[s][threads + s] = completed;
  }

  // ---- accesses ---------------------------------------------------------------

  /// Thread t reads or writes [offset, offset + bytes). Returns "" or what
  /// races.
  std::string read(uint32_t t, uint32_t offset, uint32_t bytes) {
    touch(offset, bytes);
    const uint32_t *vc = clock(t);
    for (uint32_t g = offset; g < offset + bytes; ++g) {
      Shadow &s = shadow[g];
      if (s.wTid != kNone && s.wTid != t && s.wClock > vc[s.wTid])
        return race("reads", g, writer(s));
      s.rTid = static_cast<uint16_t>(t);
      s.rClock = vc[t];
    }
    return {};
  }

  std::string write(uint32_t t, uint32_t offset, uint32_t bytes) {
    return writeAs(t, offset, bytes, static_cast<uint16_t>(t), clock(t)[t]);
  }

  /// A TMA copy issued by thread t completing on mbarrier slot s in its
  /// phase `phase` (0-based count of completed phases before it).
  std::string asyncWrite(uint32_t t, int s, uint32_t phase, uint32_t offset,
                         uint32_t bytes) {
    if (s < 0)
      return writeAs(t, offset, bytes, kNone, 0);
    return writeAs(t, offset, bytes, static_cast<uint16_t>(threads + s),
                   phase + 1);
  }

  /// A multicast TMA copy from another CTA: recorded, not checked (the
  /// issuer's clocks are that CTA's).
  void recordAsync(int s, uint32_t phase, uint32_t offset, uint32_t bytes) {
    touch(offset, bytes);
    for (uint32_t g = offset; g < offset + bytes; ++g) {
      shadow[g].wTid = s < 0 ? kNone : static_cast<uint16_t>(threads + s);
      shadow[g].wClock = phase + 1;
      shadow[g].rTid = kNone;
    }
  }

  /// A wgmma of warpgroup `group` reads [offset, offset + bytes), issued by
  /// thread t: ordered after the data's write now, read until retired.
  std::string wgmmaRead(uint32_t group, uint32_t t, uint32_t offset,
                        uint32_t bytes) {
    touch(offset, bytes);
    const uint32_t *vc = clock(t);
    Group &gr = groupOf(group);
    for (uint32_t g = offset; g < offset + bytes; ++g) {
      Shadow &s = shadow[g];
      if (s.wTid != kNone && s.wTid != t && s.wClock > vc[s.wTid])
        return race("wgmma of warpgroup " + std::to_string(group) + " reads",
                    g, writer(s));
      if (inflight[g] == 0)
        gr.open.push_back(g);
      inflight[g] = static_cast<uint8_t>(std::min<uint32_t>(group + 1, 255));
    }
    return {};
  }

  void wgmmaCommit(uint32_t group) {
    Group &gr = groupOf(group);
    gr.committed.push_back(std::move(gr.open));
    gr.open.clear();
  }

  /// wgmma.wait_group `pending` by warpgroup `group`, whose first thread is
  /// `first`: the groups beyond the newest `pending` retire.
  void wgmmaWait(uint32_t group, uint32_t first, uint32_t pending) {
    Group &gr = groupOf(group);
    while (gr.committed.size() > pending) {
      Snapshot snap;
      snap.first = first;
      for (uint32_t i = 0; i < 128 && first + i < threads; ++i)
        snap.clocks[i] = clock(first + i)[first + i];
      snapshots.push_back(snap);
      uint32_t id = static_cast<uint32_t>(snapshots.size() - 1);
      for (uint32_t g : gr.committed.front()) {
        inflight[g] = 0;
        shadow[g].rTid = kGroupRead;
        shadow[g].rClock = id;
      }
      gr.committed.pop_front();
    }
  }

  /// Names the thread or async agent `tid` for reports.
  std::string who(uint32_t tid) const {
    if (tid < threads)
      return "thread " + std::to_string(tid) + " (warp " +
             std::to_string(tid / 32) + ", lane " + std::to_string(tid % 32) +
             ")";
    return "a TMA copy completing on the mbarrier at shared 0x" +
           hex(slotAddress[tid - threads]);
  }

private:
  struct Shadow {
    uint32_t wClock = 0, rClock = 0;
    uint16_t wTid = kNone, rTid = kNone;
  };
  struct Group {
    std::vector<uint32_t> open;
    std::deque<std::vector<uint32_t>> committed;
  };
  struct Snapshot {
    uint32_t first = 0;
    uint32_t clocks[128] = {};
  };

  static std::string hex(uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%x", v);
    return buf;
  }

  Group &groupOf(uint32_t g) {
    if (groups.size() <= g)
      groups.resize(g + 1);
    return groups[g];
  }

  std::string writer(const Shadow &s) const {
    std::string w = who(s.wTid);
    if (s.wTid >= threads)
      w += " in its phase " + std::to_string(s.wClock - 1);
    return w + " wrote";
  }

  std::string race(const std::string &access, uint32_t granule,
                   const std::string &other) const {
    return "data race on shared memory: " + access + " byte 0x" +
           hex(granule) + " that " + other +
           ", with no barrier or mbarrier ordering the two";
  }

  std::string writeAs(uint32_t t, uint32_t offset, uint32_t bytes,
                      uint16_t tid, uint32_t epoch) {
    touch(offset, bytes);
    const uint32_t *vc = clock(t);
    for (uint32_t g = offset; g < offset + bytes; ++g) {
      Shadow &s = shadow[g];
      if (inflight[g])
        return "data race on shared memory: writes byte 0x" + hex(g) +
               " while a wgmma of warpgroup " +
               std::to_string(inflight[g] - 1) +
               " may still read it (no wgmma.wait_group has retired it)";
      if (s.wTid != kNone && s.wTid != t && s.wTid != tid &&
          s.wClock > vc[s.wTid])
        return race("writes", g, writer(s));
      if (s.rTid == kGroupRead) {
        const Snapshot &snap = snapshots[s.rClock];
        bool ordered = false;
        for (uint32_t i = 0; i < 128 && snap.first + i < threads && !ordered;
             ++i)
          ordered = vc[snap.first + i] >= snap.clocks[i];
        if (!ordered)
          return race("writes", g,
                      "a retired wgmma of the warpgroup of thread " +
                          std::to_string(snap.first) + " read");
      } else if (s.rTid != kNone && s.rTid != t && s.rClock > vc[s.rTid]) {
        return race("writes", g, who(s.rTid) + " read");
      }
      s.wTid = tid;
      s.wClock = epoch;
      s.rTid = kNone;
    }
    return {};
  }

  bool on = false;
  void touch(uint32_t offset, uint32_t bytes) {
    touched = std::max(touched, offset + bytes);
  }

  uint32_t threads = 0, size = 0;
  uint32_t touched = 0; // shadow[touched..] are as reset left them
  std::vector<uint32_t> clocks;
  std::vector<Shadow> shadow;
  std::vector<uint8_t> inflight;
  std::unordered_map<uint32_t, uint32_t> slots;
  std::vector<uint32_t> slotAddress;
  std::vector<std::vector<uint32_t>> slotAcc;
  std::vector<uint32_t> barAcc[16];
  std::vector<Group> groups;
  std::vector<Snapshot> snapshots;
};

} // namespace moe::emu

#endif // MOE_EMU_LIB_RACES_H
