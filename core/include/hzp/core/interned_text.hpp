// InternedText: a handle to the one copy the process keeps of each distinct text. A step description declares
// thousands of calls per rank with the same few labels (the group's name, what the call is for), and `hzpbench
// simulate` describes every rank of a world: held as strings, copying, comparing and freeing those labels was most
// of the describing at 16,384 ranks (docs/simulate.md "Scale"). A handle copies and compares as a pointer; equal
// texts have equal handles, so comparing handles compares the texts.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace hzp {

class InternedText {
 public:
  InternedText() noexcept;  ///< the empty text
  InternedText(std::string_view text);  // NOLINT(google-explicit-constructor): a label is made from its text
  InternedText(const std::string& text) : InternedText(std::string_view(text)) {}  // NOLINT
  InternedText(const char* text) : InternedText(std::string_view(text)) {}          // NOLINT

  const std::string& str() const noexcept { return *text_; }
  std::string_view view() const noexcept { return *text_; }
  operator const std::string&() const noexcept { return *text_; }  // NOLINT(google-explicit-constructor)
  const char* c_str() const noexcept { return text_->c_str(); }
  std::size_t size() const noexcept { return text_->size(); }
  bool empty() const noexcept { return text_->empty(); }
  /// The same for equal texts and different for different ones, within this process (not across runs).
  std::uintptr_t id() const noexcept { return reinterpret_cast<std::uintptr_t>(text_); }

  friend bool operator==(InternedText a, InternedText b) noexcept { return a.text_ == b.text_; }
  friend bool operator==(InternedText a, std::string_view b) noexcept { return a.view() == b; }
  friend bool operator==(InternedText a, const std::string& b) noexcept { return a.view() == b; }
  friend bool operator==(InternedText a, const char* b) noexcept { return a.view() == b; }
  friend std::ostream& operator<<(std::ostream& o, InternedText t) { return o << t.str(); }

 private:
  const std::string* text_;
};

}  // namespace hzp
