// Attributes of HDF5 objects as hzp::harness::AttrValue (int64, float64, UTF-8 string, list of
// strings), read and written the same way by the results writer and reader. Strings are
// variable-length UTF-8, so h5py returns them as `str`; numbers are little-endian int64/float64.
// Private to hzp_harness; one thread (see h5_handle.hpp).
#pragma once

#include <hdf5.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "h5_handle.hpp"
#include "hzp/harness/results_file.hpp"

namespace hzp::harness::h5 {

/// Sets attribute `name` on object `loc` (a file's root, group or dataset), replacing any earlier
/// value. A number replacing a number of the same type is rewritten in place, so attributes updated at
/// every flush (last_flush_unix_s) do not grow the file. `where` names file and object for errors.
void write_attribute(hid_t loc, std::string_view name, const AttrValue& value, std::string_view where);

/// Reads attribute `name` of `loc`; nullopt if absent. Integers of any width read as int64, floats as
/// double, strings (fixed or variable length) as string, 1-D string arrays as a list. Any other
/// type or shape throws DataError naming it.
std::optional<AttrValue> read_attribute(hid_t loc, std::string_view name, std::string_view where);

/// Names of every attribute of `loc`, in the order HDF5 stores them (name order for this format).
std::vector<std::string> attribute_names(hid_t loc, std::string_view where);

/// The variable-length UTF-8 string type.
Handle make_vlen_string_type();

}  // namespace hzp::harness::h5
