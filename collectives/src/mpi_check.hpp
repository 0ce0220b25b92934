// HZP_MPI_CHECK: the MPI instance of HZP_CHECK_CALL (error.hpp). MPI calls in this library run with
// MPI_ERRORS_RETURN on our communicators, so a failure becomes an MpiError carrying
// MPI_Error_string's text instead of MPICH's default abort.
#pragma once

#include <mpi.h>

#include <string>

#include "hzp/core/error.hpp"

namespace hzp::coll::detail {
inline std::string describe_mpi(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len));
}
}  // namespace hzp::coll::detail

#define HZP_MPI_CHECK(stmt) \
  HZP_CHECK_CALL(stmt, ::hzp::MpiError, hzp_status == MPI_SUCCESS, ::hzp::coll::detail::describe_mpi)
