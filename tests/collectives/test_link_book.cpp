// A shared link's bookings (link_book.hpp) and the emulator's use of them (LinkEmulator::reserve / settle), against
// intervals worked out by hand: the earliest gap that fits, a late start freeing the time before it for the next
// call, both links of a call held together; threads booking one link at once never overlap on it, and keep one
// booking per call when their calls start late.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

#include "hzp/collectives/link_book.hpp"
#include "hzp/collectives/link_emulator.hpp"

namespace hzp::coll {
namespace {

using Book = LinkBook<double>;

// Sorted, disjoint and of the given total length.
void expect_disjoint(const std::vector<LinkInterval<double>>& b, double total, double tol) {
  double sum = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    EXPECT_LT(b[i].start, b[i].end);
    if (i > 0) {
      EXPECT_LE(b[i - 1].end, b[i].start + tol) << "bookings " << i - 1 << " and " << i << " overlap";
    }
    sum += b[i].end - b[i].start;
  }
  EXPECT_NEAR(sum, total, tol * static_cast<double>(b.size() + 1));
}

TEST(LinkBook, TakesTheEarliestGapThatFits) {
  Book b;
  b.book(10, 10);  // [10, 20)
  b.book(30, 10);  // [30, 40)
  EXPECT_EQ(b.earliest(0, 10), 0);   // [0, 10) is free
  EXPECT_EQ(b.earliest(0, 11), 40);  // neither [0, 10) nor [20, 30) holds 11
  EXPECT_EQ(b.earliest(15, 10), 20); // [20, 30)
  EXPECT_EQ(b.earliest(25, 5), 25);
  EXPECT_EQ(b.earliest(25, 6), 40);
  EXPECT_EQ(b.earliest(50, 100), 50);
  EXPECT_EQ(b.earliest(12, 0), 12);  // a call that does not use the link waits for nothing
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].start, 10);
  EXPECT_EQ(b[1].end, 40);
}

TEST(LinkBook, ALateStartFreesTheTimeBeforeItForTheNextCall) {
  // Call A joins at 0 and books [0, 10); its peer is ready only at 5, so it runs [5, 15).
  Book b;
  b.book(b.earliest(0, 10), 10);
  EXPECT_EQ(b.earliest(1, 4), 10);  // while A holds [0, 10), a 4-long call joining at 1 waits for it
  ASSERT_TRUE(b.release(0, 10));
  b.book(b.earliest(5, 10), 10);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].start, 5);
  EXPECT_EQ(b[0].end, 15);
  // Call B, 4 long, joining at 1: [1, 5) is free again (a busy-until clock would have said 15).
  EXPECT_EQ(b.earliest(1, 4), 1);
  EXPECT_EQ(b.earliest(1, 5), 15);  // 5 long does not fit in [1, 5)
  EXPECT_FALSE(b.release(0, 10));   // already gone
}

TEST(LinkBook, ForgetsWhatEndedAndItsEarliestBookingWhenFull) {
  LinkBook<long, FixedIntervals<long, 3>> b;
  b.book(0, 2);   // [0, 2)
  b.book(4, 2);   // [4, 6)
  b.book(8, 2);   // [8, 10)
  b.book(12, 2);  // full: [0, 2) goes
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].start, 4);
  EXPECT_EQ(b.earliest(0, 3), 0);
  b.forget_before(6);  // [4, 6) ended at 6
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].start, 8);
  EXPECT_EQ(b.earliest(6, 2), 6);
  EXPECT_EQ(b.earliest(6, 3), 14);
}

TEST(LinkBook, OverlappingBookingsBlockTheirUnion) {
  // A settled call runs where it ran, overlapping if need be: [0, 10) and [5, 20) hold [0, 20) between them.
  Book b;
  b.book(0, 10);
  b.book(5, 15);
  b.book(12, 2);  // [12, 14), inside [5, 20)
  EXPECT_EQ(b.earliest(0, 3), 20);
  EXPECT_EQ(b.earliest(14, 1), 20);
  EXPECT_EQ(b.earliest(21, 1), 21);
  b.forget_before(12);  // only [0, 10) ended by 12
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].start, 5);
  EXPECT_TRUE(b.release(12, 2));
  EXPECT_FALSE(b.release(5, 10));  // [5, 15) was never booked
}

TEST(LinkBook, ACallHoldsBothOfItsLinksAtOnce) {
  Book intra, nic;
  intra.book(0, 10);   // intra busy [0, 10)
  nic.book(10, 10);    // interface busy [10, 20)
  intra.book(25, 10);  // intra busy [25, 35)
  // 5 on each from 0: intra free from 10, the interface from 20, intra again in [20, 25).
  EXPECT_EQ(earliest_on_both(intra, 5.0, nic, 5.0, 0.0), 20);
  // 6 on each: [20, 25) is too short on intra, so after 35.
  EXPECT_EQ(earliest_on_both(intra, 6.0, nic, 6.0, 0.0), 35);
  // Only the interface: intra's bookings do not matter.
  EXPECT_EQ(earliest_on_both(intra, 0.0, nic, 5.0, 0.0), 0);
}

// The earliest fit by brute force, the definition itself: of `from` and every booking's end after it, the least at
// which [t, t + dur) meets no booking.
double fit_by_definition(const std::vector<LinkInterval<double>>& held, double from, double dur) {
  std::vector<double> candidates{from};
  for (const auto& b : held)
    if (b.end > from) candidates.push_back(b.end);
  std::sort(candidates.begin(), candidates.end());
  for (double t : candidates) {
    const bool free = std::none_of(held.begin(), held.end(), [&](const auto& b) { return b.start < t + dur && t < b.end; });
    if (free) return t;
  }
  return -1;  // unreachable: the last end always fits
}

// The book bisects while its bookings are disjoint and scans once one overlaps: either way it must give what the
// definition gives, through long runs of calls (a lagging forget, as the simulator's stream clocks leave it: thousands
// of bookings), releases, forgets and, from some point, an overlapping settle.
TEST(LinkBook, LongListsGiveTheFitsTheDefinitionGives) {
  for (int overlap_after : {-1, 1500}) {
    std::mt19937 rng(7 + overlap_after);
    std::uniform_real_distribution<double> u(0, 1);
    Book b;
    std::vector<LinkInterval<double>> held;  // the reference: every booking not released or forgotten
    double now = 0, forgotten = 0;
    for (int i = 0; i < 3000; ++i) {
      now += u(rng) * 2;
      const double from = now - u(rng) * 40 > forgotten ? now - u(rng) * 40 : forgotten;  // some issue in the past
      const double dur = 0.1 + u(rng) * 3;
      const double t = b.earliest(from, dur);
      ASSERT_EQ(t, fit_by_definition(held, from, dur)) << "call " << i;
      const bool overlapping = overlap_after >= 0 && i >= overlap_after && i % 50 == 0;
      // A settle where the call really ran, over bookings made since: a long one, so that a later booking inside it
      // ends first (ends out of start order).
      const double start = overlapping ? from : t;
      const double held_for = overlapping ? 50 : dur;
      b.book(start, held_for);
      held.push_back({start, start + held_for});
      if (i % 7 == 3) {  // a late call gives its booking back
        const auto r = held[held.size() / 2];
        ASSERT_TRUE(b.release(r.start, r.end - r.start));
        held.erase(std::find_if(held.begin(), held.end(), [&](const auto& h) { return h.start == r.start && h.end == r.end; }));
      }
      if (i % 97 == 0) {  // rarely, as when one stream's clock lags behind the others
        forgotten = std::max(forgotten, now - 60);
        b.forget_before(forgotten);
        std::erase_if(held, [&](const auto& h) { return !(h.end > forgotten); });
      }
      ASSERT_EQ(b.size(), held.size()) << "call " << i;
    }
    std::sort(held.begin(), held.end(), [](const auto& x, const auto& y) { return x.start < y.start; });
    for (std::size_t k = 0; k < held.size(); ++k) {
      EXPECT_EQ(b[k].start, held[k].start);
      EXPECT_EQ(b[k].end, held[k].end);
    }
  }
}

// The emulator's own booking (a phantom world's: both clocks in this process), times in seconds from 1000.
CollectiveModel call(double intra, double nic) {
  CollectiveModel m;
  m.intra_busy_s = intra;
  m.nic_busy_s = nic;
  m.duration_s = std::max(intra, nic);
  return m;
}

LinkEmulationConfig links_on() {
  LinkEmulationConfig c;
  c.enabled = true;
  return c;
}

TEST(LinkEmulatorBooking, TheSlotALateCallLeavesGoesToTheNextCall) {
  LinkEmulator e(links_on());
  const double t0 = 1000;
  // A joins at t0 (both links 0.010 s): ready at t0; its peer makes it start at t0 + 0.005.
  const CollectiveModel a = call(0.010, 0.010);
  const LinkReservation ra = e.reserve(t0, a);
  EXPECT_NEAR(ra.ready_s, t0, 1e-9);
  e.settle(ra, t0 + 0.005, a);
  // B (0.004 s on both) joining at t0 + 0.001 fits in [t0 + 0.001, t0 + 0.005), which A left.
  const CollectiveModel b = call(0.004, 0.004);
  const LinkReservation rb = e.reserve(t0 + 0.001, b);
  EXPECT_NEAR(rb.ready_s, t0 + 0.001, 1e-9);
  // C (0.005 s) does not fit there: it waits for A's end, and so does D using only the interface.
  EXPECT_NEAR(e.reserve(t0 + 0.001, call(0.005, 0.005)).ready_s, t0 + 0.015, 1e-9);
  EXPECT_NEAR(e.reserve(t0 + 0.001, call(0, 0.0051)).ready_s, t0 + 0.020, 1e-9);
  for (LinkLevel level : {LinkLevel::intra, LinkLevel::inter}) {
    const auto books = e.bookings(level);
    ASSERT_GE(books.size(), 3u);
    EXPECT_NEAR(books[0].start, t0 + 0.001, 1e-9);  // B
    EXPECT_NEAR(books[1].start, t0 + 0.005, 1e-9);  // A, moved to its real start
    EXPECT_NEAR(books[2].start, t0 + 0.015, 1e-9);  // C
  }
}

TEST(LinkEmulatorBooking, ASettledCallHoldsTheLinkWhenItRuns) {
  LinkEmulator e(links_on());
  const double t0 = 1000;
  const CollectiveModel m = call(0, 0.010);
  const LinkReservation ra = e.reserve(t0, m);  // A: [t0, t0 + 0.010)
  const LinkReservation rb = e.reserve(t0, m);  // B: [t0 + 0.010, t0 + 0.020)
  EXPECT_NEAR(rb.ready_s, t0 + 0.010, 1e-9);
  e.settle(ra, t0 + 0.004, m);  // A starts late and runs [t0 + 0.004, t0 + 0.014), into B's time
  const auto books = e.bookings(LinkLevel::inter);
  ASSERT_EQ(books.size(), 2u);
  EXPECT_NEAR(books[0].start, t0 + 0.004, 1e-9);
  EXPECT_NEAR(books[0].end, t0 + 0.014, 1e-9);
  EXPECT_NEAR(books[1].start, t0 + 0.010, 1e-9);
  // [t0, t0 + 0.004) is free again: a call that fits takes it, a longer one waits for both.
  EXPECT_NEAR(e.reserve(t0, call(0, 0.004)).ready_s, t0, 1e-9);
  EXPECT_NEAR(e.reserve(t0, call(0, 0.005)).ready_s, t0 + 0.020, 1e-9);
}

// kThreads threads book kCalls calls each on both links of one emulator; `late` (0: none) is how much later than
// its ready time each call starts. Returns the bookings of each link.
std::vector<std::vector<LinkInterval<double>>> book_from_threads(LinkEmulator& e, int threads_n, int calls, double dur,
                                                                 double late_max) {
  std::vector<std::thread> threads;
  for (int i = 0; i < threads_n; ++i)
    threads.emplace_back([&, i] {
      std::mt19937 rng(static_cast<unsigned>(i));
      std::uniform_real_distribution<double> join(0, 0.05), late(0, late_max);
      const CollectiveModel m = call(dur, dur);
      for (int k = 0; k < calls; ++k) {
        const LinkReservation r = e.reserve(1000 + join(rng), m);
        e.settle(r, r.ready_s + (late_max > 0 ? late(rng) : 0.0), m);
      }
    });
  for (auto& t : threads) t.join();
  return {e.bookings(LinkLevel::intra), e.bookings(LinkLevel::inter)};
}

TEST(LinkEmulatorBooking, ConcurrentThreadsNeverOverlapOnALink) {
  LinkEmulator e(links_on());
  constexpr int kThreads = 8, kCalls = 25;  // 200 calls: fewer than a link keeps
  const double dur = 0.001;
  for (const auto& books : book_from_threads(e, kThreads, kCalls, dur, 0)) {
    ASSERT_EQ(books.size(), static_cast<std::size_t>(kThreads * kCalls));
    expect_disjoint(books, kThreads * kCalls * dur, 1e-9);
  }
}

TEST(LinkEmulatorBooking, ConcurrentLateStartsKeepOneBookingPerCall) {
  // Starting late, a call may run into one booked since (allowed): still one booking per call, each as long as it.
  LinkEmulator e(links_on());
  constexpr int kThreads = 8, kCalls = 25;
  const double dur = 0.001;
  for (const auto& books : book_from_threads(e, kThreads, kCalls, dur, 0.003)) {
    ASSERT_EQ(books.size(), static_cast<std::size_t>(kThreads * kCalls));
    for (std::size_t i = 0; i < books.size(); ++i) {
      EXPECT_NEAR(books[i].end - books[i].start, dur, 1e-9);
      if (i > 0) EXPECT_LE(books[i - 1].start, books[i].start);
    }
  }
}

}  // namespace
}  // namespace hzp::coll
