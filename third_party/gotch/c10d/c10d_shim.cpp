// See c10d_shim.h.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "c10d_shim.h"

#if __has_include(<gloo/algorithm.h>) && __has_include(<torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>)
#define SEEDCTL_HAVE_GLOO 1
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

// SEEDCTL_NCCL comes from prepare-gotch.sh for a CUDA libtorch whose NCCL
// and CUDA headers it found (ProcessGroupNCCL.hpp includes cuBLAS's,
// cuSPARSE's and cuSOLVER's through ATen's CUDA context).
#if defined(SEEDCTL_NCCL) && __has_include(<nccl.h>) && \
    __has_include(<torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>)
#define SEEDCTL_HAVE_NCCL 1
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#if defined(SEEDCTL_HAVE_GLOO) || defined(SEEDCTL_HAVE_NCCL)
#define SEEDCTL_HAVE_C10D 1
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <type_traits>
#include <utility>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

static void set_err(char **err, const std::string &msg) {
  if (err) *err = strdup(msg.c_str());
}

static const char *kNoGloo =
    "this libtorch build has no Gloo headers (PyPI's torch wheels ship none): CPU data parallelism needs "
    "Debian's libtorch with libgloo-dev (./setup.sh), or a libtorch with torch/csrc/distributed and gloo/ headers";
static const char *kNoNCCL =
    "this seedctl build has no NCCL process group: GPU data parallelism needs a CUDA libtorch 2.x "
    "(LIBTORCH_USE_PYTORCH=1 ./setup.sh beside a CUDA torch) and, at build time, nccl.h and the CUDA headers "
    "(pip's nvidia-nccl and cuda-toolkit[cublas,cusolver,cusparse] packages beside it, or NCCL_HOME and CUDA_HOME); "
    "see docs/gpu.md";

namespace {
at::Tensor &T(seed_tensor t) { return *static_cast<at::Tensor *>(t); }

std::vector<at::Tensor> tensors(seed_tensor *ts, int n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (int i = 0; i < n; i++) out.push_back(T(ts[i]));
  return out;
}

struct Group {
#ifdef SEEDCTL_HAVE_C10D
  c10::intrusive_ptr<c10d::Store> store;
#endif
#ifdef SEEDCTL_HAVE_GLOO
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#endif
#ifdef SEEDCTL_HAVE_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
  int device = 0;
#endif
  int rank = 0, world = 1;
};

// on_group calls f with the group's backend (Gloo or NCCL: the same
// collective API, ProcessGroup in libtorch 1.13 and Backend in 2.x).
template <class F>
void on_group(seed_pg p, F f) {
  auto *g = static_cast<Group *>(p);
  (void)g;
#ifdef SEEDCTL_HAVE_GLOO
  if (g->gloo) {
    f(*g->gloo);
    return;
  }
#endif
#ifdef SEEDCTL_HAVE_NCCL
  if (g->nccl) {
    f(*g->nccl);
    return;
  }
#endif
  throw std::runtime_error("c10d: the process group has no backend");
}

#ifdef SEEDCTL_HAVE_GLOO
// gloo_device is the network device this rank's Gloo pairs use: the
// interface GLOO_SOCKET_IFNAME names (as in PyTorch), loopback when the
// rendezvous is on loopback (one host), else the address this host's name
// resolves to (PyTorch's default). Never the master's address: on another
// host that is not a local one.
std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string &master) {
  const char *ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname && *ifname) return c10d::ProcessGroupGloo::createDeviceForInterface(std::string(ifname));
  if (master == "127.0.0.1" || master == "localhost" || master == "::1")
    return c10d::ProcessGroupGloo::createDeviceForHostname(master);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

#ifdef SEEDCTL_HAVE_C10D
// has_listen_fd says whether this libtorch's TCPStoreOptions can take a
// socket the caller bound (masterListenFd, libtorch 2.x); 1.13's cannot,
// and its store listens on every interface.
template <class O, class = void>
struct has_listen_fd : std::false_type {};
template <class O>
struct has_listen_fd<O, std::void_t<decltype(std::declval<O &>().masterListenFd)>> : std::true_type {};

// listen_on is a TCP socket bound to host:port (the host's own address,
// not every interface) and listening; it throws with the cause.
int listen_on(const std::string &host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) throw std::runtime_error("c10d: resolving the rendezvous address " + host + ": " + gai_strerror(rc));
  std::string last = "no address";
  for (auto *a = res; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 2048) == 0) {
      freeaddrinfo(res);
      return fd;
    }
    last = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(res);
  throw std::runtime_error("c10d: binding the rendezvous to " + host + ":" + std::to_string(port) + ": " + last);
}

// bind_master makes rank 0's store serve on a socket bound to host alone
// where this libtorch allows it; false where it does not (1.13).
template <class O>
bool bind_master(O &o, const std::string &host, int port) {
  if constexpr (has_listen_fd<O>::value) {
    o.masterListenFd = listen_on(host, port);
    return true;
  } else {
    (void)o, (void)host, (void)port;
    return false;
  }
}
#endif
}  // namespace

extern "C" {

int seed_c10d_binds_master_addr(void) {
#ifdef SEEDCTL_HAVE_C10D
  return has_listen_fd<c10d::TCPStoreOptions>::value ? 1 : 0;
#else
  return 0;
#endif
}

int seed_c10d_available(int backend) {
  switch (backend) {
#ifdef SEEDCTL_HAVE_GLOO
    case SEED_C10D_GLOO:
      return 1;
#endif
#ifdef SEEDCTL_HAVE_NCCL
    case SEED_C10D_NCCL:
      return 1;
#endif
    default:
      return 0;
  }
}

seed_pg seed_c10d_new(const char *host, int port, const char *store_file, int rank, int world, int64_t timeout_ms,
                      int backend, int device, char **err) {
  if (backend != SEED_C10D_GLOO && backend != SEED_C10D_NCCL) {
    set_err(err, "c10d: unknown backend " + std::to_string(backend));
    return nullptr;
  }
  if (!seed_c10d_available(backend)) {
    set_err(err, backend == SEED_C10D_GLOO ? kNoGloo : kNoNCCL);
    return nullptr;
  }
  (void)host, (void)port, (void)store_file, (void)rank, (void)world, (void)timeout_ms, (void)device;
#ifdef SEEDCTL_HAVE_C10D
  try {
    auto g = std::make_unique<Group>();
    if (store_file && *store_file) {
      // One host: the ranks meet in a file only they can reach, and
      // no rendezvous port is opened at all.
      g->store = c10::make_intrusive<c10d::FileStore>(std::string(store_file), world);
      g->store->setTimeout(std::chrono::milliseconds(timeout_ms));
#ifdef SEEDCTL_HAVE_NCCL
      // NCCL's bootstrap listens on the interface it picks (the first
      // non-loopback one by default); on one host loopback is enough.
      if (backend == SEED_C10D_NCCL) setenv("NCCL_SOCKET_IFNAME", "lo", 0);
#endif
    } else {
      c10d::TCPStoreOptions so;
      so.port = static_cast<uint16_t>(port);
      so.isServer = rank == 0;
      so.numWorkers = world;
      so.waitWorkers = true;
      so.timeout = std::chrono::milliseconds(timeout_ms);
      if (rank == 0) bind_master(so, std::string(host), port);
      g->store = c10::make_intrusive<c10d::TCPStore>(std::string(host), so);
    }
    g->rank = rank;
    g->world = world;
#ifdef SEEDCTL_HAVE_GLOO
    if (backend == SEED_C10D_GLOO) {
      auto opts = c10d::ProcessGroupGloo::Options::create();
      opts->devices.push_back(gloo_device(std::string(host)));
      opts->timeout = std::chrono::milliseconds(timeout_ms);
      g->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(g->store, rank, world, opts);
    }
#endif
#ifdef SEEDCTL_HAVE_NCCL
    if (backend == SEED_C10D_NCCL) {
      // A collective that outlives the timeout throws here, in the
      // caller, instead of the watchdog aborting the process (the
      // orchestrator's rank 0 included); an explicit setting wins.
      setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
      g->device = device;
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = std::chrono::milliseconds(timeout_ms);
      g->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(g->store, rank, world, opts);
    }
#endif
    return g.release();
  } catch (const std::exception &e) {
    set_err(err, e.what());
    return nullptr;
  }
#else
  return nullptr;
#endif
}

int seed_c10d_allreduce(seed_pg p, seed_tensor *ts, int n, int op, char **err) {
  try {
    auto v = tensors(ts, n);
    on_group(p, [&](auto &pg) {
      c10d::AllreduceOptions o;
      o.reduceOp = op == 1 ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
      // One collective per tensor: c10d's tensor list is one tensor per
      // device of this process, all reduced into one result, not a batch.
      for (auto &t : v) {
        std::vector<at::Tensor> one{t};
        pg.allreduce(one, o)->wait();
      }
    });
    return 0;
  } catch (const std::exception &e) {
    set_err(err, e.what());
    return 1;
  }
}

int seed_c10d_broadcast(seed_pg p, seed_tensor *ts, int n, int root, char **err) {
  try {
    auto v = tensors(ts, n);
    on_group(p, [&](auto &pg) {
      for (auto &t : v) {  // one tensor per call, as above
        std::vector<at::Tensor> one{t};
        c10d::BroadcastOptions o;
        o.rootRank = root;
        pg.broadcast(one, o)->wait();
      }
    });
    return 0;
  } catch (const std::exception &e) {
    set_err(err, e.what());
    return 1;
  }
}

int seed_c10d_barrier(seed_pg p, char **err) {
  try {
#ifdef SEEDCTL_HAVE_NCCL
    auto *g = static_cast<Group *>(p);
    if (g->nccl) {
      // NCCL's own barrier guesses the rank's GPU from its global rank,
      // which is wrong when hosts' ranks are numbered in arrival order; an
      // all-reduce of one number on this rank's GPU is the same barrier.
      std::vector<at::Tensor> one{at::zeros({1}, at::TensorOptions().device(at::kCUDA, g->device))};
      g->nccl->allreduce(one)->wait();
      one[0].cpu();  // the wait orders the stream; this waits for it on the host
      return 0;
    }
#endif
    on_group(p, [&](auto &pg) { pg.barrier()->wait(); });
    return 0;
  } catch (const std::exception &e) {
    set_err(err, e.what());
    return 1;
  }
}

void seed_c10d_free(seed_pg p) { delete static_cast<Group *>(p); }

}  // extern "C"
