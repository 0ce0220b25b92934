// InternedText (interned_text.hpp): one table of texts for the process, never shrunk, behind a lock; and before it a
// small cache per thread, keyed by where the text was read from, so that a label declared from the same literal call
// after call costs a comparison of its characters instead of a hash and a lock.
#include "hzp/core/interned_text.hpp"

#include <array>
#include <cstring>
#include <functional>
#include <mutex>
#include <unordered_set>

namespace hzp {
namespace {

struct Table {
  std::mutex lock;
  std::unordered_set<std::string> texts;  // nodes: a text's address stays put as the table grows
};

Table& table() {
  static Table* t = new Table;  // never destroyed: handles may be read during static destruction
  return *t;
}

const std::string* intern(std::string_view text) {
  Table& t = table();
  const std::lock_guard<std::mutex> hold(t.lock);
  return &*t.texts.emplace(text).first;
}

// Where a text was last read from and what it was interned as. A hit needs the same address, length and
// characters: a buffer reused for another text misses.
struct Seen {
  const char* from = nullptr;
  const std::string* text = nullptr;
};

}  // namespace

InternedText::InternedText() noexcept {
  static const std::string* const empty = intern({});
  text_ = empty;
}

InternedText::InternedText(std::string_view text) {
  thread_local std::array<Seen, 256> seen{};
  Seen& s = seen[(std::hash<const void*>{}(text.data()) >> 3) % seen.size()];
  if (s.from == text.data() && s.text != nullptr && s.text->size() == text.size() &&
      (text.empty() || std::memcmp(s.text->data(), text.data(), text.size()) == 0)) {
    text_ = s.text;
    return;
  }
  text_ = intern(text);
  s = {text.data(), text_};
}

}  // namespace hzp
