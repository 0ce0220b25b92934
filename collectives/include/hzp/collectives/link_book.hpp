// The bookings of one shared link (docs/collectives.md "Link emulation"): the intervals during which calls
// hold it, in time order. A call takes the earliest gap at or after its start that fits its whole busy time, so time
// nobody uses stays free for whoever fits there later, instead of one busy-until time that only grows. One rule for
// the emulator (nanoseconds, in a fixed array that can live in a process-shared segment) and for `hzpbench simulate`
// (seconds, in a vector), so both book a shared link the same way.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

namespace hzp::coll {

/// [start, end) on one link.
template <class Time>
struct LinkInterval {
  Time start{}, end{};
};

/// The few members of std::vector that LinkBook uses, over a fixed array: trivially copyable, so it can be placed in
/// shared memory. max_size() is the capacity (LinkBook forgets its earliest booking to make room).
template <class Time, std::size_t N>
class FixedIntervals {
 public:
  using value_type = LinkInterval<Time>;
  using iterator = value_type*;
  using const_iterator = const value_type*;

  iterator begin() noexcept { return items_.data(); }
  iterator end() noexcept { return items_.data() + n_; }
  const_iterator begin() const noexcept { return items_.data(); }
  const_iterator end() const noexcept { return items_.data() + n_; }
  std::size_t size() const noexcept { return n_; }
  static constexpr std::size_t max_size() noexcept { return N; }
  const value_type& operator[](std::size_t i) const noexcept { return items_[i]; }

  iterator insert(const_iterator pos, const value_type& v) noexcept {  // requires size() < N
    const auto i = static_cast<std::size_t>(pos - items_.data());
    std::move_backward(items_.data() + i, items_.data() + n_, items_.data() + n_ + 1);
    items_[i] = v;
    ++n_;
    return items_.data() + i;
  }
  iterator erase(const_iterator pos) noexcept { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) noexcept {
    const auto i = static_cast<std::size_t>(first - items_.data());
    const auto j = static_cast<std::size_t>(last - items_.data());
    std::move(items_.data() + j, items_.data() + n_, items_.data() + i);
    n_ -= j - i;
    return items_.data() + i;
  }

 private:
  std::size_t n_ = 0;
  std::array<value_type, N> items_{};
};

/// One link's bookings, in start order. Not thread-safe: the emulator holds a lock around it, the simulator is one
/// thread. Bookings placed by earliest() never overlap; the emulator's settle books a call where it really ran, which
/// may run into a call booked since (the two share the link there, as they would on a real one).
///
/// While no two bookings overlap their ends are in start order too, so the bookings that end by a time are a prefix
/// found by bisection: a gap search and forget_before then cost the few bookings around the time asked, not the whole
/// list. (A list can grow long: the simulator keeps a node interface's bookings for the whole step where the node's
/// ranks share it, and its rank lists had kept every booking since an idle stream's last call; scanning them from
/// the start had made Table 5's simulations quadratic in their messages.) Once an overlap is booked the ends are
/// unordered and both scan the list until it empties.
template <class Time, class Store = std::vector<LinkInterval<Time>>>
class LinkBook {
 public:
  /// The earliest t >= from such that [t, t + dur) overlaps no booking (from itself when dur <= 0: a call that does
  /// not use the link).
  Time earliest(Time from, Time dur) const {
    if (!(dur > Time{})) return from;
    Time t = from;
    // The bookings that end by `from` would be passed over one by one: t never falls below from.
    for (auto it = first_ending_after(from); it != items_.end(); ++it) {
      const LinkInterval<Time>& b = *it;
      if (!(b.end > t)) continue;
      if (b.start >= t + dur) break;  // every later booking starts later still
      t = std::max(t, b.end);
    }
    return t;
  }

  /// Books [start, start + dur). A full fixed store forgets its earliest booking first: the oldest, long past unless
  /// that many calls are pending on one link.
  void book(Time start, Time dur) {
    if (!(dur > Time{})) return;
    if (items_.size() == items_.max_size()) items_.erase(items_.begin());
    if (items_.size() == 0) ends_ordered_ = true;
    auto at = std::upper_bound(items_.begin(), items_.end(), start,
                               [](Time s, const LinkInterval<Time>& b) { return s < b.start; });
    at = items_.insert(at, LinkInterval<Time>{start, start + dur});
    // An overlap with a neighbour is the only way the ends leave start order.
    if (at != items_.begin() && (at - 1)->end > at->start) ends_ordered_ = false;
    if (at + 1 != items_.end() && at->end > (at + 1)->start) ends_ordered_ = false;
  }

  /// Removes the booking [start, start + dur); false when there is none (forgotten to make room, or never booked).
  bool release(Time start, Time dur) {
    if (!(dur > Time{})) return false;
    auto it = std::lower_bound(items_.begin(), items_.end(), start,
                               [](const LinkInterval<Time>& b, Time s) { return b.start < s; });
    for (; it != items_.end() && it->start == start; ++it)
      if (it->end == start + dur) {
        items_.erase(it);
        return true;
      }
    return false;
  }

  /// Forgets the bookings that end at or before t: no call will look for a gap before t.
  void forget_before(Time t) {
    if (ends_ordered_) {
      items_.erase(items_.begin(), first_ending_after(t));
      return;
    }
    for (auto it = items_.begin(); it != items_.end();) it = it->end > t ? it + 1 : items_.erase(it);
  }

  std::size_t size() const noexcept { return items_.size(); }
  const LinkInterval<Time>& operator[](std::size_t i) const noexcept { return items_[i]; }

 private:
  /// The first booking that ends after t where every earlier one ends by t (the bookings' ends in start order), else
  /// the first booking.
  auto first_ending_after(Time t) const {
    if (!ends_ordered_) return items_.begin();
    return std::partition_point(items_.begin(), items_.end(), [t](const LinkInterval<Time>& b) { return !(b.end > t); });
  }

  Store items_{};
  bool ends_ordered_ = true;  // no two bookings overlap (so their ends are in start order as well)
};

/// The earliest t >= from at which `a` is free for da and `b` for db at once (a call that uses both links holds them
/// together). Each step moves t to one book's earliest fit, so it ends at the first time both agree.
template <class BookA, class BookB, class Time>
Time earliest_on_both(const BookA& a, Time da, const BookB& b, Time db, Time from) {
  Time t = from;
  for (;;) {
    const Time ta = a.earliest(t, da);
    const Time tb = b.earliest(ta, db);
    if (!(tb > ta)) return ta;
    t = tb;
  }
}

}  // namespace hzp::coll
