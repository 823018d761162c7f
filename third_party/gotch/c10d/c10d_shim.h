// seedctl's binding of libtorch's c10d (PyTorch's distributed engine):
// a TCPStore rendezvous, a Gloo (CPU) or NCCL (CUDA) process group, and the
// collectives the data-parallel trainer needs. Copied into gotch's tree
// (libtch/c10d) by scripts/prepare-gotch.sh, with libtch's cgo flags, so it
// is built against the same libtorch. Gloo needs libtorch's Gloo headers
// (Debian's libtorch with libgloo-dev; PyPI's torch wheels ship none); NCCL
// needs a CUDA libtorch 2.x, nccl.h and the CUDA headers, and the script
// defines SEEDCTL_NCCL when it found them. A backend built without them
// answers every call with an error saying so.
#ifndef SEEDCTL_C10D_SHIM_H
#define SEEDCTL_C10D_SHIM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void *seed_pg;
// A gotch tensor handle (a torch::Tensor *), as gotch's Tensor.Ctensor()
// gives it.
typedef void *seed_tensor;

// Process group backends.
#define SEED_C10D_GLOO 0
#define SEED_C10D_NCCL 1

// 1 when this build has the backend's process group.
int seed_c10d_available(int backend);
// 1 when rank 0's TCPStore can listen on the rendezvous address alone
// (libtorch 2.x: a socket bound here, handed over as masterListenFd); 0
// when it listens on every interface (libtorch 1.13).
int seed_c10d_binds_master_addr(void);
// Joins the group. With store_file non-empty the ranks (all on one host)
// meet in that file (a FileStore: no port is opened); otherwise rank 0
// serves a TCPStore at host:port, bound to host where
// seed_c10d_binds_master_addr says so. Every rank waits for world members
// up to timeout_ms (also each collective's timeout). device is the rank's
// CUDA device index (NCCL; ignored by Gloo). NULL with *err set (free it)
// on failure.
seed_pg seed_c10d_new(const char *host, int port, const char *store_file, int rank, int world, int64_t timeout_ms,
                      int backend, int device, char **err);
// Reduces each tensor across the group in place (one collective each):
// op 0 sums, op 1 takes the maximum.
int seed_c10d_allreduce(seed_pg pg, seed_tensor *ts, int n, int op, char **err);
// Copies each tensor of root to every rank, in place.
int seed_c10d_broadcast(seed_pg pg, seed_tensor *ts, int n, int root, char **err);
int seed_c10d_barrier(seed_pg pg, char **err);
void seed_c10d_free(seed_pg pg);

#ifdef __cplusplus
}
#endif
#endif
