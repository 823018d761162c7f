package trainer

/*
#include <malloc.h>

// Keep large buffers in the heap instead of mapping and unmapping them for
// every tensor: libtorch frees and reallocates activations of the same sizes
// step after step, and glibc's default mmap threshold turns each of those
// into page faults (system time was as large as compute time).
static void seedctl_tune_malloc(void) {
	mallopt(M_MMAP_THRESHOLD, 1 << 30);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
}
*/
import "C"

func init() { C.seedctl_tune_malloc() }
