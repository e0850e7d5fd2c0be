// MpiCommunicator::split: groups as MPI_Comm_split. MPI_Comm_split blocks with no deadline, so every
// rank first gathers every rank's (color, key, world rank) under the timeout: a rank that never calls
// split makes the others fail instead of hang, and each rank learns its group's world ranks (which
// error messages name) before MPI_Comm_split, which then finds every rank already there.
#include <algorithm>
#include <array>
#include <memory>

#include "engine/comm/mpi_check.h"
#include "engine/comm/mpi_communicator_impl.h"

namespace ferry {

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  const std::string what =
      "split (color " + std::to_string(color) + ", key " + std::to_string(key) + ") " + world_text();
  require_owner_thread(what);
  if (color < 0) throw CommunicationError(self_text() + ": " + what + ": a color is 0 or more");

  struct Placement {
    std::array<std::int64_t, 3> own;
    std::vector<std::int64_t> of_rank;  // color, key, world rank per rank
  };
  auto placement = std::make_shared<Placement>(
      Placement{{color, key, world_ranks_[static_cast<std::size_t>(rank_)]},
                std::vector<std::int64_t>(3 * static_cast<std::size_t>(size_))});
  run(what + " (colors and keys)", [&](PendingOperation& pending) {
    pending.keep_alive(placement);
    MPI_Request request = MPI_REQUEST_NULL;
    FERRY_MPI_CHECK(MPI_Iallgather(placement->own.data(), 3, MPI_INT64_T, placement->of_rank.data(), 3, MPI_INT64_T,
                                   comm_, &request));
    pending.add(request);
  });

  struct Member {
    std::int64_t key;
    int rank;
    int world_rank;
  };
  std::vector<Member> members;
  for (int rank = 0; rank < size_; ++rank) {
    const std::int64_t* entry = placement->of_rank.data() + 3 * static_cast<std::size_t>(rank);
    if (entry[0] == color) members.push_back(Member{entry[1], rank, static_cast<int>(entry[2])});
  }
  std::stable_sort(members.begin(), members.end(),
                   [](const Member& a, const Member& b) { return a.key < b.key; });  // then by rank here
  std::vector<int> world_ranks;
  for (const Member& member : members) world_ranks.push_back(member.world_rank);

  MPI_Comm group = MPI_COMM_NULL;
  FERRY_MPI_CHECK(MPI_Comm_split(comm_, color, key, &group));
  return std::make_unique<MpiCommunicator>(*this, group, std::move(world_ranks));
}

}  // namespace ferry
