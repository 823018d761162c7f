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

// Map every large buffer and unmap it when freed, so the resident set
// follows what is live (memory measurements; slower).
static void seedctl_map_large_buffers(void) {
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	mallopt(M_TRIM_THRESHOLD, 128 * 1024);
}
*/
import "C"

// trimHeap hands the memory glibc's heaps hold free back to the system
// (malloc_trim: free pages in every arena, not only at the top). With the
// thresholds above, a step's freed activations stay in the heap for the
// next step; trimming after a step makes the resident set between steps
// what is live (the memory plan's "resident").
func trimHeap() { C.malloc_trim(0) }

// ReleaseFreeMemory frees the tensors whose Go values are gone (gotch frees
// them in finalizers, which the Go collector runs only when the Go heap
// grows: it never sees libtorch's memory) and hands the free pages of
// glibc's heaps back to the system. Call it between steps, never while
// another goroutine trains (finalizers must not run mid-step).
func ReleaseFreeMemory() {
	quiesceGC()
	trimHeap()
}

// TrimHeap hands glibc's free heap pages back to the system; safe at any
// time (it frees nothing that is in use).
func TrimHeap() { trimHeap() }

func init() { C.seedctl_tune_malloc() }

// mapLargeBuffers makes freed large buffers leave the resident set at
// once (tests that measure peak memory; glibc's defaults, fixed).
func mapLargeBuffers() { C.seedctl_map_large_buffers() }
