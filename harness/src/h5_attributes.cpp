// Reading and writing AttrValue attributes over the HDF5 C API (see h5_attributes.hpp).
#include "h5_attributes.hpp"

#include <cstdint>
#include <string>

namespace hzp::harness::h5 {
namespace {

// Names cross the C API as NUL-terminated strings.
std::string zstr(std::string_view s) { return std::string(s); }

Handle scalar_space() { return HZP_H5_OWN(H5Screate(H5S_SCALAR), "making a scalar dataspace"); }

// Trims a fixed-length string the way its padding says (NUL- or space-padded).
std::string trim_fixed(const char* p, std::size_t n, H5T_str_t pad) {
  std::string s(p, n);
  if (auto z = s.find('\0'); z != std::string::npos) s.resize(z);
  if (pad == H5T_STR_SPACEPAD) {
    while (!s.empty() && s.back() == ' ') s.pop_back();
  }
  return s;
}

std::vector<std::string> read_strings(hid_t attr, hid_t ftype, std::size_t n, std::string_view where) {
  std::vector<std::string> out;
  const htri_t is_vlen = H5Tis_variable_str(ftype);
  HZP_H5_CHECK(is_vlen, "reading a string attribute's type ", where);
  if (is_vlen > 0) {
    Handle mtype = make_vlen_string_type();
    std::vector<char*> ptrs(n, nullptr);
    HZP_H5_CHECK(H5Aread(attr, mtype.get(), ptrs.data()), "reading string attribute ", where);
    for (char* p : ptrs) {
      out.emplace_back(p ? p : "");
      // Each string was malloc'ed by HDF5's library; H5free_memory releases it with the same allocator.
      H5free_memory(p);
    }
    return out;
  }
  const std::size_t size = H5Tget_size(ftype);
  Handle mtype = HZP_H5_OWN(H5Tcopy(ftype), "copying a string type ", where);
  std::vector<char> buf(size * n + 1, '\0');
  HZP_H5_CHECK(H5Aread(attr, mtype.get(), buf.data()), "reading string attribute ", where);
  const H5T_str_t pad = H5Tget_strpad(ftype);
  for (std::size_t i = 0; i < n; ++i) out.push_back(trim_fixed(buf.data() + i * size, size, pad));
  return out;
}

}  // namespace

Handle make_vlen_string_type() {
  Handle t = HZP_H5_OWN(H5Tcopy(H5T_C_S1), "copying the C string type");
  HZP_H5_CHECK(H5Tset_size(t.get(), H5T_VARIABLE), "making a variable-length string type");
  HZP_H5_CHECK(H5Tset_cset(t.get(), H5T_CSET_UTF8), "making a UTF-8 string type");
  return t;
}

void write_attribute(hid_t loc, std::string_view name, const AttrValue& value, std::string_view where) {
  const std::string n = zstr(name);
  const htri_t exists = H5Aexists(loc, n.c_str());
  HZP_H5_CHECK(exists, "looking up attribute '", name, "' of ", where);

  // Numbers of an unchanged type are rewritten in place; anything else is deleted and re-created,
  // because an attribute's type and shape are fixed when it is created.
  const bool is_int = std::holds_alternative<std::int64_t>(value);
  const bool is_double = std::holds_alternative<double>(value);
  if (exists > 0 && (is_int || is_double)) {
    Handle attr =
        HZP_H5_OWN(H5Aopen(loc, n.c_str(), H5P_DEFAULT), "opening attribute '", name, "' of ", where);
    Handle type = HZP_H5_OWN(H5Aget_type(attr.get()), "reading the type of attribute '", name, "'");
    Handle space = HZP_H5_OWN(H5Aget_space(attr.get()), "reading the shape of attribute '", name, "'");
    const H5T_class_t cls = H5Tget_class(type.get());
    if (H5Sget_simple_extent_type(space.get()) == H5S_SCALAR &&
        ((is_int && cls == H5T_INTEGER) || (is_double && cls == H5T_FLOAT))) {
      if (is_int) {
        const std::int64_t v = std::get<std::int64_t>(value);
        HZP_H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_INT64, &v), "writing attribute '", name, "' of ", where);
      } else {
        const double v = std::get<double>(value);
        HZP_H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &v), "writing attribute '", name, "' of ",
                     where);
      }
      return;
    }
  }
  if (exists > 0) HZP_H5_CHECK(H5Adelete(loc, n.c_str()), "replacing attribute '", name, "' of ", where);

  if (is_int || is_double) {
    Handle space = scalar_space();
    const hid_t ftype = is_int ? H5T_STD_I64LE : H5T_IEEE_F64LE;
    Handle attr = HZP_H5_OWN(H5Acreate2(loc, n.c_str(), ftype, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                             "creating attribute '", name, "' of ", where);
    if (is_int) {
      const std::int64_t v = std::get<std::int64_t>(value);
      HZP_H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_INT64, &v), "writing attribute '", name, "' of ", where);
    } else {
      const double v = std::get<double>(value);
      HZP_H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &v), "writing attribute '", name, "' of ", where);
    }
    return;
  }

  Handle stype = make_vlen_string_type();
  std::vector<const char*> ptrs;
  Handle space;
  if (const auto* s = std::get_if<std::string>(&value)) {
    space = scalar_space();
    ptrs.push_back(s->c_str());
  } else {
    const auto& list = std::get<std::vector<std::string>>(value);
    const hsize_t dims[1] = {list.size()};
    space = HZP_H5_OWN(H5Screate_simple(1, dims, nullptr), "making the shape of attribute '", name, "'");
    for (const std::string& s : list) ptrs.push_back(s.c_str());
  }
  Handle attr = HZP_H5_OWN(H5Acreate2(loc, n.c_str(), stype.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                           "creating attribute '", name, "' of ", where);
  if (!ptrs.empty())
    HZP_H5_CHECK(H5Awrite(attr.get(), stype.get(), ptrs.data()), "writing attribute '", name, "' of ", where);
}

std::optional<AttrValue> read_attribute(hid_t loc, std::string_view name, std::string_view where) {
  const std::string n = zstr(name);
  const htri_t exists = H5Aexists(loc, n.c_str());
  HZP_H5_CHECK(exists, "looking up attribute '", name, "' of ", where);
  if (exists == 0) return std::nullopt;

  Handle attr = HZP_H5_OWN(H5Aopen(loc, n.c_str(), H5P_DEFAULT), "opening attribute '", name, "' of ", where);
  Handle type = HZP_H5_OWN(H5Aget_type(attr.get()), "reading the type of attribute '", name, "' of ", where);
  Handle space =
      HZP_H5_OWN(H5Aget_space(attr.get()), "reading the shape of attribute '", name, "' of ", where);
  const H5S_class_t shape = H5Sget_simple_extent_type(space.get());
  const int rank = H5Sget_simple_extent_ndims(space.get());
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  const H5T_class_t cls = H5Tget_class(type.get());

  if (cls == H5T_STRING) {
    if (shape == H5S_NULL) return std::vector<std::string>{};
    std::vector<std::string> v = read_strings(attr.get(), type.get(), static_cast<std::size_t>(count), where);
    if (shape == H5S_SCALAR) return v.front();
    if (rank == 1) return v;
  } else if ((cls == H5T_INTEGER || cls == H5T_FLOAT) && count == 1 && rank <= 1) {
    if (cls == H5T_INTEGER) {
      std::int64_t v = 0;
      HZP_H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_INT64, &v), "reading attribute '", name, "' of ", where);
      return v;
    }
    double v = 0;
    HZP_H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &v), "reading attribute '", name, "' of ", where);
    return v;
  }
  HZP_THROW(DataError, "attribute '", name, "' of ", where,
            " has a type or shape hzpbench does not write (HDF5 type class ", static_cast<int>(cls), ", ",
            count, " element(s)); was it written by another program?");
}

std::vector<std::string> attribute_names(hid_t loc, std::string_view where) {
  H5O_info_t info{};
  HZP_H5_CHECK(H5Oget_info2(loc, &info, H5O_INFO_NUM_ATTRS), "counting the attributes of ", where);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    const ssize_t len = H5Aget_name_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    HZP_H5_CHECK(len, "reading an attribute name of ", where);
    std::string s(static_cast<std::size_t>(len) + 1, '\0');
    HZP_H5_CHECK(H5Aget_name_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size(), H5P_DEFAULT),
                 "reading an attribute name of ", where);
    s.resize(static_cast<std::size_t>(len));
    names.push_back(std::move(s));
  }
  return names;
}

}  // namespace hzp::harness::h5
