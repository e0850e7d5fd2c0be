#include "engine/comm/torchrun_rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>

#include "engine/comm/environment_variables.h"
#include "engine/comm/mpi_check.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) { throw CommunicationError("torchrun rendezvous: " + what); }

std::string error_text() { return std::strerror(errno); }

// Waits until `fd` is ready for `events` or the deadline passes (then fails naming `what`).
void await(int fd, short events, Clock::time_point deadline, const std::string& what) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) fail("timed out waiting for " + what + " (FERRY_COMM_TIMEOUT_SECONDS)");
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready > 0) return;
    if (ready < 0 && errno != EINTR) fail("poll failed while waiting for " + what + ": " + error_text());
  }
}

void send_bytes(int fd, const void* data, std::size_t bytes, Clock::time_point deadline, const std::string& what) {
  const auto* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    await(fd, POLLOUT, deadline, what);
    const ssize_t sent = ::send(fd, cursor, bytes, MSG_NOSIGNAL);
    if (sent < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (sent <= 0) fail("sending " + what + " failed: " + error_text());
    cursor += sent;
    bytes -= static_cast<std::size_t>(sent);
  }
}

void receive_bytes(int fd, void* data, std::size_t bytes, Clock::time_point deadline, const std::string& what) {
  auto* cursor = static_cast<char*>(data);
  while (bytes > 0) {
    await(fd, POLLIN, deadline, what);
    const ssize_t got = ::recv(fd, cursor, bytes, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got == 0) fail("the peer closed the connection before " + what + " (did that rank fail?)");
    if (got < 0) fail("receiving " + what + " failed: " + error_text());
    cursor += got;
    bytes -= static_cast<std::size_t>(got);
  }
}

void send_text(int fd, const std::string& text, Clock::time_point deadline, const std::string& what) {
  const auto size = static_cast<std::uint32_t>(text.size());
  send_bytes(fd, &size, sizeof size, deadline, what);
  send_bytes(fd, text.data(), text.size(), deadline, what);
}

std::string receive_text(int fd, Clock::time_point deadline, const std::string& what) {
  std::uint32_t size = 0;
  receive_bytes(fd, &size, sizeof size, deadline, what);
  if (size > (1u << 20)) fail(what + " of " + std::to_string(size) + " bytes: not a ferry rendezvous (another service on the port?)");
  std::string text(size, '\0');
  receive_bytes(fd, text.data(), size, deadline, what);
  return text;
}

// Starts `ompi-server --no-daemonize -r FILE`; it ends with this process (PR_SET_PDEATHSIG), even when
// MPI_Abort or a signal ends this one without its destructors.
pid_t start_ompi_server(const std::string& file) {
  const pid_t parent = ::getpid();
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) fail("pipe failed: " + error_text());
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(ready[0]);
    ::close(ready[1]);
    fail("fork failed: " + error_text());
  }
  if (child == 0) {  // only async-signal-safe calls until exec
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    const char* arguments[] = {"ompi-server", "--no-daemonize", "-r", file.c_str(), nullptr};
    ::execvp("ompi-server", const_cast<char* const*>(arguments));
    const int error = errno;
    [[maybe_unused]] const ssize_t written = ::write(ready[1], &error, sizeof error);  // exec failed: say why
    ::_exit(127);
  }
  ::close(ready[1]);
  int error = 0;
  const ssize_t got = ::read(ready[0], &error, sizeof error);  // end of file: the exec succeeded
  ::close(ready[0]);
  if (got == static_cast<ssize_t>(sizeof error)) {
    int status = 0;
    ::waitpid(child, &status, 0);
    fail("cannot start Open MPI's ompi-server (" + std::string(std::strerror(error)) +
         "), through which ferry joins the ranks torchrun starts: install openmpi-bin, or launch with mpirun -np N");
  }
  return child;
}

// What a rank tells rank 0 when it connects: who it is by its torchrun variables.
struct RankClaim {
  std::int32_t rank = -1;
  std::int32_t world_size = 0;
};

// Rank 0's reply: ompi-server's address, or why the rendezvous failed (then every rank fails with it).
constexpr const char* kAddressReply = "address:";
constexpr const char* kRefusalReply = "refused:";

void refuse(int fd, const std::string& reason) noexcept {
  try {
    send_text(fd, kRefusalReply + reason, Clock::now() + std::chrono::seconds(2), "the rendezvous' refusal");
  } catch (const CommunicationError&) {
    // The rank went away: it fails on its own.
  }
  ::close(fd);
}

std::string address_from_reply(const std::string& reply) {
  if (reply.starts_with(kRefusalReply)) fail(reply.substr(std::strlen(kRefusalReply)));
  if (!reply.starts_with(kAddressReply)) fail("rank 0's reply is not a ferry rendezvous (another service on the port? set FERRY_RENDEZVOUS_PORT)");
  return reply.substr(std::strlen(kAddressReply));
}

// MPI_Comm_connect and MPI_Comm_accept take no deadline: should joining the world outlive the
// rendezvous' timeout (a rank died after the handshake), this ends the process with the reason, after
// `on_expiry` (which stops ompi-server, so nothing is left behind).
class JoinDeadline {
 public:
  JoinDeadline(Clock::time_point deadline, int rank, std::function<void()> on_expiry)
      : thread_([this, deadline, rank, on_expiry = std::move(on_expiry)](std::stop_token stop) {
          std::unique_lock lock(mutex_);
          changed_.wait_until(lock, stop, deadline, [] { return false; });
          if (stop.stop_requested()) return;
          std::fprintf(stderr, "ferry: error: torchrun rendezvous: rank %d timed out joining the MPI world of the ranks torchrun started "
                               "(a rank died or hung after the handshake; FERRY_COMM_TIMEOUT_SECONDS)\n", rank);
          std::fflush(stderr);
          on_expiry();
          std::_Exit(1);
        }) {}
  ~JoinDeadline() { thread_.request_stop(); }  // the jthread joins after the stop wakes it

 private:
  std::mutex mutex_;
  std::condition_variable_any changed_;
  std::jthread thread_;  // last: started once the members it waits on exist
};

std::string required_variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') fail(std::string(name) + " is not set (torchrun sets it for every rank)");
  return value;
}

}  // namespace

TorchrunRendezvous::TorchrunRendezvous(const RankEnvironment& environment, std::chrono::milliseconds timeout)
    : environment_(environment), timeout_(timeout) {
  master_address_ = required_variable("MASTER_ADDR");
  const EnvironmentReader reader(nullptr);
  const std::optional<std::int64_t> rendezvous_port = reader.integer("FERRY_RENDEZVOUS_PORT");
  const std::optional<std::int64_t> master_port = reader.integer("MASTER_PORT");
  if (!rendezvous_port && !master_port) fail("MASTER_PORT is not set (torchrun sets it for every rank)");
  const std::int64_t port = rendezvous_port ? *rendezvous_port : *master_port + 1;
  if (port < 1 || port > 65535) fail("port " + std::to_string(port) + " is outside 1-65535 (set FERRY_RENDEZVOUS_PORT)");
  port_ = static_cast<int>(port);
  try {
    std::string address;
    if (environment_.rank == 0) {
      // ompi-server writes its address into a file once it listens.
      char directory[] = "/tmp/ferry-ompi-server.XXXXXX";
      if (::mkdtemp(directory) == nullptr) fail(std::string("cannot make a directory under /tmp: ") + error_text());
      server_directory_ = directory;
      const std::string file = server_directory_ + "/uri";
      server_ = start_ompi_server(file);
      const auto deadline = Clock::now() + timeout_;
      while (address.empty()) {
        int status = 0;
        if (::waitpid(server_, &status, WNOHANG) == server_) {
          server_ = -1;
          fail("ompi-server exited before it reported its address");
        }
        std::ifstream in(file);
        std::getline(in, address);
        if (!address.empty()) break;
        if (Clock::now() > deadline) fail("ompi-server did not report its address within the timeout");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      std::error_code ignored;
      std::filesystem::remove_all(server_directory_, ignored);  // read: nothing is left behind should this process be killed
      server_directory_.clear();
      serve_address(address);
    } else {
      address = fetch_address();
    }
    if (::setenv("OMPI_MCA_pmix_server_uri", address.c_str(), 1) != 0) fail("cannot set OMPI_MCA_pmix_server_uri");
  } catch (...) {
    release();
    throw;
  }
}

TorchrunRendezvous::~TorchrunRendezvous() { release(); }

void TorchrunRendezvous::release() noexcept {
  for (int& fd : sockets_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  if (server_ > 0) {
    ::kill(server_, SIGTERM);
    int status = 0;
    ::waitpid(server_, &status, 0);
    server_ = -1;
  }
  if (!server_directory_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(server_directory_, ignored);
    server_directory_.clear();
  }
}

void TorchrunRendezvous::serve_address(const std::string& address) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) fail("socket failed: " + error_text());
  sockets_.assign(static_cast<std::size_t>(environment_.world_size), -1);
  try {
    const int on = 1;
    ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_port = htons(static_cast<std::uint16_t>(port_));
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) {
      const int error = errno;
      // A port in use may be another process that claims RANK 0 of this job: ask it, so the error names that.
      if (error == EADDRINUSE) {
        try {
          claim_rank_zero_from_listener();
        } catch (const CommunicationError& refusal) {
          if (std::strstr(refusal.what(), "claim RANK 0") != nullptr) throw;
        }
      }
      errno = error;
      fail("rank 0 cannot listen on port " + std::to_string(port_) + ": " + error_text() + " (set FERRY_RENDEZVOUS_PORT to a free port)");
    }
    if (::listen(listener, environment_.world_size) != 0) fail("listen failed: " + error_text());
    const auto deadline = Clock::now() + timeout_;
    for (int joined = 1; joined < environment_.world_size; ++joined) {
      await(listener, POLLIN, deadline, "rank " + std::to_string(joined) + " of " + std::to_string(environment_.world_size) +
                                            " to connect to port " + std::to_string(port_));
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) fail("accept failed: " + error_text());
      RankClaim claim;
      try {
        receive_bytes(fd, &claim, sizeof claim, deadline, "a rank's number");
      } catch (...) {
        ::close(fd);
        throw;
      }
      std::string refusal;
      if (claim.world_size != environment_.world_size) {
        refusal = "torchrun's variables disagree: RANK " + std::to_string(claim.rank) + " says WORLD_SIZE " + std::to_string(claim.world_size) +
                  ", RANK 0 says WORLD_SIZE " + std::to_string(environment_.world_size) + "; launch every rank with the same WORLD_SIZE";
      } else if (claim.rank == 0 || (claim.rank > 0 && claim.rank < environment_.world_size && sockets_[static_cast<std::size_t>(claim.rank)] >= 0)) {
        refusal = "two processes claim RANK " + std::to_string(claim.rank) + " of WORLD_SIZE " + std::to_string(environment_.world_size) +
                  "; give each rank its own RANK from 0 to " + std::to_string(environment_.world_size - 1);
      } else if (claim.rank < 0 || claim.rank >= environment_.world_size) {
        refusal = "a connection on port " + std::to_string(port_) + " said it is rank " + std::to_string(claim.rank) + " of " +
                  std::to_string(claim.world_size) + " (another job on the port? set FERRY_RENDEZVOUS_PORT)";
      }
      if (!refusal.empty()) {
        // Every rank that came fails now with the reason, instead of waiting out the timeout.
        refuse(fd, refusal);
        for (int& joined_fd : sockets_) {
          if (joined_fd >= 0) refuse(joined_fd, refusal);
          joined_fd = -1;
        }
        fail(refusal);
      }
      const std::int32_t rank = claim.rank;
      sockets_[static_cast<std::size_t>(rank)] = fd;
    }
    for (int rank = 1; rank < environment_.world_size; ++rank) {
      send_text(sockets_[static_cast<std::size_t>(rank)], kAddressReply + address, deadline, "ompi-server's address");
    }
  } catch (...) {
    ::close(listener);
    throw;
  }
  ::close(listener);
}

int TorchrunRendezvous::connect_to_rank_zero(Clock::time_point deadline) const {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int resolved = ::getaddrinfo(master_address_.c_str(), std::to_string(port_).c_str(), &hints, &found);
  if (resolved != 0) fail("cannot resolve MASTER_ADDR '" + master_address_ + "': " + ::gai_strerror(resolved));
  int fd = -1;
  while (fd < 0) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) break;
    if (fd >= 0) ::close(fd);
    fd = -1;
    if (Clock::now() > deadline) {
      ::freeaddrinfo(found);
      fail("rank " + std::to_string(environment_.rank) + " could not reach rank 0 at " + master_address_ + ":" + std::to_string(port_) +
           " within the timeout (is rank 0 running? FERRY_RENDEZVOUS_PORT must be the same on every rank)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::freeaddrinfo(found);
  return fd;
}

void TorchrunRendezvous::claim_rank_zero_from_listener() {
  const int fd = connect_to_rank_zero(Clock::now() + std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(5)));
  try {
    const auto deadline = Clock::now() + std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(5));
    const RankClaim claim{0, environment_.world_size};
    send_bytes(fd, &claim, sizeof claim, deadline, "this rank's number");
    address_from_reply(receive_text(fd, deadline, "the listener's reply"));  // a ferry rank 0 refuses a second rank 0, naming it
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

std::string TorchrunRendezvous::fetch_address() {
  const auto deadline = Clock::now() + timeout_;
  const int fd = connect_to_rank_zero(deadline);
  sockets_.assign(1, fd);
  const RankClaim claim{environment_.rank, environment_.world_size};
  send_bytes(fd, &claim, sizeof claim, deadline, "this rank's number");
  return address_from_reply(receive_text(fd, deadline, "ompi-server's address from rank 0"));
}

MPI_Comm TorchrunRendezvous::join_world() {
  const auto deadline = Clock::now() + timeout_;
  const int rank = environment_.rank, size = environment_.world_size;
  MPI_Comm current = MPI_COMM_NULL;
  char port[MPI_MAX_PORT_NAME] = {};
  const JoinDeadline bounded(deadline, rank, [this] { release(); });
  try {
    if (rank == 0) {
      FERRY_MPI_CHECK(MPI_Open_port(MPI_INFO_NULL, port));
      FERRY_MPI_CHECK(MPI_Comm_dup(MPI_COMM_SELF, &current));
    } else {
      const std::string name = receive_text(sockets_[0], deadline, "rank 0's MPI port");
      std::strncpy(port, name.c_str(), MPI_MAX_PORT_NAME - 1);
      MPI_Comm bridge = MPI_COMM_NULL;
      FERRY_MPI_CHECK(MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &bridge));
      FERRY_MPI_CHECK(MPI_Intercomm_merge(bridge, 1, &current));  // after the ranks that joined before
      MPI_Comm_free(&bridge);
    }
    // Ranks join in order: the world so far accepts rank k (rank 0 tells it the port), k goes last.
    for (int next = rank + 1; next < size; ++next) {
      if (rank == 0) send_text(sockets_[static_cast<std::size_t>(next)], port, deadline, "the MPI port for rank " + std::to_string(next));
      MPI_Comm bridge = MPI_COMM_NULL;
      FERRY_MPI_CHECK(MPI_Comm_accept(port, MPI_INFO_NULL, 0, current, &bridge));
      MPI_Comm grown = MPI_COMM_NULL;
      FERRY_MPI_CHECK(MPI_Intercomm_merge(bridge, 0, &grown));
      MPI_Comm_free(&bridge);
      MPI_Comm_free(&current);
      current = grown;
    }
    if (rank == 0) FERRY_MPI_CHECK(MPI_Close_port(port));
    int joined_rank = -1, joined_size = 0;
    FERRY_MPI_CHECK(MPI_Comm_rank(current, &joined_rank));
    FERRY_MPI_CHECK(MPI_Comm_size(current, &joined_size));
    if (joined_rank != rank || joined_size != size) {
      fail("the joined world has this process as rank " + std::to_string(joined_rank) + " of " + std::to_string(joined_size) +
           ", torchrun says " + std::to_string(rank) + " of " + std::to_string(size));
    }
  } catch (...) {
    if (current != MPI_COMM_NULL) MPI_Comm_free(&current);
    throw;
  }
  return current;
}

}  // namespace ferry
