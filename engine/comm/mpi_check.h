// FERRY_MPI_CHECK: runs one MPI call (the communicator returns errors, MPI_ERRORS_RETURN) and turns a
// failure into a CommunicationError naming the call, the source file and line, and MPI's own words
// for the error (MPI_Error_string). Private to engine/comm, like every header that includes mpi.h.
#pragma once

#include <mpi.h>

#include <string>

namespace ferry {

// "MPI_ERR_TRUNCATE: message truncated" (the error class's name, then MPI's description).
std::string describe_mpi_error(int error_code);

void mpi_check(int error_code, const char* call, const char* file, int line);

}  // namespace ferry

#define FERRY_MPI_CHECK(call) ::ferry::mpi_check((call), #call, __FILE__, __LINE__)
