#include "engine/comm/mpi_check.h"

#include "engine/comm/communicator.h"

namespace ferry {
namespace {

const char* mpi_error_class_name(int error_class) {
  switch (error_class) {
    case MPI_ERR_BUFFER: return "MPI_ERR_BUFFER";
    case MPI_ERR_COUNT: return "MPI_ERR_COUNT";
    case MPI_ERR_TYPE: return "MPI_ERR_TYPE";
    case MPI_ERR_TAG: return "MPI_ERR_TAG";
    case MPI_ERR_COMM: return "MPI_ERR_COMM";
    case MPI_ERR_RANK: return "MPI_ERR_RANK";
    case MPI_ERR_REQUEST: return "MPI_ERR_REQUEST";
    case MPI_ERR_ROOT: return "MPI_ERR_ROOT";
    case MPI_ERR_OP: return "MPI_ERR_OP";
    case MPI_ERR_ARG: return "MPI_ERR_ARG";
    case MPI_ERR_TRUNCATE: return "MPI_ERR_TRUNCATE";
    case MPI_ERR_OTHER: return "MPI_ERR_OTHER";
    case MPI_ERR_INTERN: return "MPI_ERR_INTERN";
    case MPI_ERR_PENDING: return "MPI_ERR_PENDING";
    case MPI_ERR_IN_STATUS: return "MPI_ERR_IN_STATUS";
    default: return "MPI error";
  }
}

}  // namespace

std::string describe_mpi_error(int error_code) {
  int error_class = MPI_ERR_UNKNOWN;
  if (MPI_Error_class(error_code, &error_class) != MPI_SUCCESS) error_class = MPI_ERR_UNKNOWN;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(error_code, text, &length) != MPI_SUCCESS) length = 0;
  return std::string(mpi_error_class_name(error_class)) + " (" + std::to_string(error_code) +
         "): " + std::string(text, static_cast<std::size_t>(length));
}

void mpi_check(int error_code, const char* call, const char* file, int line) {
  if (error_code == MPI_SUCCESS) return;
  throw CommunicationError(std::string("MPI call `") + call + "` failed (" + file + ":" + std::to_string(line) +
                           "): " + describe_mpi_error(error_code));
}

}  // namespace ferry
