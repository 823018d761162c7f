// See c10d_shim.h.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "c10d_shim.h"

#if __has_include(<gloo/algorithm.h>) && __has_include(<torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>)
#define SEEDCTL_HAVE_GLOO 1
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

static void set_err(char **err, const std::string &msg) {
  if (err) *err = strdup(msg.c_str());
}

#ifdef SEEDCTL_HAVE_GLOO

namespace {
struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  int rank, world;
};

at::Tensor &T(seed_tensor t) { return *static_cast<at::Tensor *>(t); }

std::vector<at::Tensor> tensors(seed_tensor *ts, int n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (int i = 0; i < n; i++) out.push_back(T(ts[i]));
  return out;
}
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
}  // namespace

extern "C" {

int seed_c10d_available(void) { return 1; }

seed_pg seed_c10d_new(const char *host, int port, int rank, int world, int64_t timeout_ms, char **err) {
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(port);
    so.isServer = rank == 0;
    so.numWorkers = world;
    so.waitWorkers = true;
    so.timeout = std::chrono::milliseconds(timeout_ms);
    auto g = std::make_unique<Group>();
    g->store = c10::make_intrusive<c10d::TCPStore>(std::string(host), so);
    auto opts = c10d::ProcessGroupGloo::Options::create();
    opts->devices.push_back(gloo_device(std::string(host)));
    opts->timeout = std::chrono::milliseconds(timeout_ms);
    g->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(g->store, rank, world, opts);
    g->rank = rank;
    g->world = world;
    return g.release();
  } catch (const std::exception &e) {
    set_err(err, e.what());
    return nullptr;
  }
}

int seed_c10d_allreduce(seed_pg p, seed_tensor *ts, int n, int op, char **err) {
  try {
    auto *g = static_cast<Group *>(p);
    auto v = tensors(ts, n);
    c10d::AllreduceOptions o;
    o.reduceOp = op == 1 ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
    // One collective per tensor: c10d's tensor list is one tensor per
    // device of this process, all reduced into one result, not a batch.
    for (auto &t : v) {
      std::vector<at::Tensor> one{t};
      g->pg->allreduce(one, o)->wait();
    }
    return 0;
  } catch (const std::exception &e) {
    set_err(err, e.what());
    return 1;
  }
}

int seed_c10d_broadcast(seed_pg p, seed_tensor *ts, int n, int root, char **err) {
  try {
    auto *g = static_cast<Group *>(p);
    auto v = tensors(ts, n);
    for (auto &t : v) {  // Gloo broadcasts one tensor per call
      std::vector<at::Tensor> one{t};
      c10d::BroadcastOptions o;
      o.rootRank = root;
      g->pg->broadcast(one, o)->wait();
    }
    return 0;
  } catch (const std::exception &e) {
    set_err(err, e.what());
    return 1;
  }
}

int seed_c10d_barrier(seed_pg p, char **err) {
  try {
    static_cast<Group *>(p)->pg->barrier()->wait();
    return 0;
  } catch (const std::exception &e) {
    set_err(err, e.what());
    return 1;
  }
}

void seed_c10d_free(seed_pg p) { delete static_cast<Group *>(p); }

}  // extern "C"

#else  // no Gloo headers: every call reports it

static const char *kNoGloo =
    "this libtorch build has no Gloo headers (PyPI's torch wheels ship none): data parallelism needs "
    "Debian's libtorch with libgloo-dev (./setup.sh), or a libtorch with torch/csrc/distributed and gloo/ headers";

extern "C" {
int seed_c10d_available(void) { return 0; }
seed_pg seed_c10d_new(const char *, int, int, int, int64_t, char **err) {
  set_err(err, kNoGloo);
  return nullptr;
}
int seed_c10d_allreduce(seed_pg, seed_tensor *, int, int, char **err) { set_err(err, kNoGloo); return 1; }
int seed_c10d_broadcast(seed_pg, seed_tensor *, int, int, char **err) { set_err(err, kNoGloo); return 1; }
int seed_c10d_barrier(seed_pg, char **err) { set_err(err, kNoGloo); return 1; }
void seed_c10d_free(seed_pg) {}
}
#endif
