// HDF5 error-stack text, quiet error printing and the Handle closer (see h5_handle.hpp).
#include "h5_handle.hpp"

#include <cctype>
#include <mutex>

namespace hzp::harness::h5 {

std::timed_mutex& calls_mutex() noexcept {
  static std::timed_mutex m;
  return m;
}
namespace {

herr_t collect_entry(unsigned /*n*/, const H5E_error2_t* e, void* client) {
  auto* out = static_cast<std::vector<std::string>*>(client);
  std::string entry = e->desc ? e->desc : "";
  char minor[128] = {};
  if (H5Eget_msg(e->min_num, nullptr, minor, sizeof(minor)) > 0 && minor[0] != '\0') {
    entry += entry.empty() ? "" : " ";
    entry += "(";
    entry += minor;
    entry += ")";
  }
  if (!entry.empty()) out->push_back(std::move(entry));
  return 0;
}

}  // namespace

void quiet_errors() noexcept {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

std::vector<std::string> take_error_stack() {
  std::vector<std::string> stack;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_entry, &stack);
  H5Eclear2(H5E_DEFAULT);
  return stack;
}

std::string summarize_error_stack(const std::vector<std::string>& stack) {
  if (stack.empty()) return "HDF5 gave no message";
  if (stack.size() == 1) return stack.front();
  return stack.front() + ": " + stack.back();
}

bool stack_says_locked(const std::vector<std::string>& stack) {
  for (std::string s : stack) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s.find("unable to lock") != std::string::npos || s.find("file lock request failed") != std::string::npos)
      return true;
  }
  return false;
}

std::string Describe::operator()(long long /*status*/) const {
  std::string s = summarize_error_stack(take_error_stack());
  if (!what.empty()) s += "; while " + what;
  return s;
}

ObjectKind object_kind(hid_t file, const std::string& path, std::string_view where) {
  std::size_t pos = 0;
  for (;;) {
    pos = path.find('/', pos);
    const std::string prefix = path.substr(0, pos);
    const htri_t e = H5Lexists(file, prefix.c_str(), H5P_DEFAULT);
    HZP_H5_CHECK(e, "looking up '", prefix, "' in ", where);
    if (e == 0) return ObjectKind::absent;
    Handle obj = HZP_H5_OWN(H5Oopen(file, prefix.c_str(), H5P_DEFAULT), "opening '", prefix, "' in ", where);
    const H5I_type_t type = H5Iget_type(obj.get());
    if (pos == std::string::npos)
      return type == H5I_GROUP     ? ObjectKind::group
             : type == H5I_DATASET ? ObjectKind::dataset
                                   : ObjectKind::other;
    if (type != H5I_GROUP) return ObjectKind::absent;  // nothing can live under a dataset
    ++pos;
  }
}

void Handle::reset() noexcept { (void)close_checked(); }

herr_t Handle::close_checked() noexcept {
  if (id_ < 0) return 0;
  const hid_t id = std::exchange(id_, H5I_INVALID_HID);
  herr_t rc = -1;
  switch (H5Iget_type(id)) {
    case H5I_FILE: rc = H5Fclose(id); break;
    case H5I_GROUP: rc = H5Gclose(id); break;
    case H5I_DATASET: rc = H5Dclose(id); break;
    case H5I_DATASPACE: rc = H5Sclose(id); break;
    case H5I_DATATYPE: rc = H5Tclose(id); break;
    case H5I_ATTR: rc = H5Aclose(id); break;
    case H5I_GENPROP_LST: rc = H5Pclose(id); break;
    default: rc = H5Idec_ref(id) < 0 ? -1 : 0; break;
  }
  if (rc < 0) H5Eclear2(H5E_DEFAULT);  // nobody will read this stack; don't let it leak into the next
  return rc;
}

}  // namespace hzp::harness::h5
