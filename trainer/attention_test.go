package trainer

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestChunkedAttentionMatches: attention in query blocks (forward passes
// without a graph) gives the logits of attention in one piece, for packed
// rows with several segments and padding, each architecture, block sizes
// that do and do not divide the length.
func TestChunkedAttentionMatches(t *testing.T) {
	saved := attentionChunk
	defer func() { attentionChunk = saved }()
	r := rand.New(rand.NewPCG(3, 4))
	const width = 150
	in := Input{IDs: make([][]int, 2), Positions: make([][]int, 2), Segments: make([][]int, 2)}
	for b := range 2 {
		for j := range width {
			in.IDs[b] = append(in.IDs[b], 3+r.IntN(90))
			seg, pos := 1, j
			if b == 1 { // three packed segments, then padding
				seg, pos = 1+j/60, j%60
				if j >= 140 {
					seg, pos = 0, 0
				}
			}
			in.Segments[b] = append(in.Segments[b], seg)
			in.Positions[b] = append(in.Positions[b], pos)
		}
	}
	for _, arch := range []Arch{ArchQwen2, ArchQwen3, ArchLlama} {
		m, _ := newTiny(t, arch, 41)
		attentionChunk = 0
		whole, err := m.Logits(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, chunk := range []int64{16, 37, 150} {
			attentionChunk = chunk
			got, err := m.Logits(in)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxAbsDiff(whole, got); d > 1e-5 {
				t.Errorf("%s, blocks of %d queries: logits differ by %g", arch, chunk, d)
			}
		}
		m.Close()
	}
}

// TestChunkedAttentionMemory: the peak memory of a forward pass without a
// graph over one 4,096-token row stays within 2× of the estimate that is
// linear in the length (the weights, activations and one block's scores),
// where attention in one piece needs 4,096² scores per head (measured in a
// child process, whose peak RSS is its own).
func TestChunkedAttentionMemory(t *testing.T) {
	if os.Getenv("SEEDCTL_ATTN_CHILD") != "" {
		return
	}
	peak := func(chunk int64) float64 {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestAttentionMemoryChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SEEDCTL_ATTN_CHILD="+strconv.FormatInt(chunk, 10))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		var before, after float64
		for _, l := range strings.Split(string(out), "\n") {
			if _, err := fmt.Sscanf(strings.TrimSpace(l), "rss %g %g", &before, &after); err == nil {
				return after - before
			}
		}
		t.Fatalf("child printed no rss line:\n%s", out)
		return 0
	}
	const T, heads, hidden, inter = 4096, 4, 32, 48
	chunked, whole := peak(512), peak(0)
	// Linear estimate: per token, the float32 activations of one layer
	// (hidden, q/k/v, MLP, logits of the 97-token vocabulary, a few copies
	// each), plus one block's scores and probabilities and its mask (on the
	// host and as a tensor).
	linear := float64(T)*4*(8*hidden+4*inter+4*97) + 2*512*T*heads*4 + 2*512*T*4
	quadratic := 2.0 * T * T * heads * 4
	t.Logf("peak RSS growth of a 4,096-token forward: %.1f MB in blocks of 512 queries, %.1f MB in one piece; linear estimate %.1f MB, the full score matrices %.1f MB",
		chunked/1e6, whole/1e6, linear/1e6, quadratic/1e6)
	if chunked > 2*linear {
		t.Errorf("chunked attention grew RSS by %.1f MB, more than twice the linear estimate %.1f MB", chunked/1e6, linear/1e6)
	}
	if whole < quadratic/2 {
		t.Errorf("attention in one piece grew RSS by only %.1f MB: the measurement does not see the score matrices (%.1f MB)", whole/1e6, quadratic/1e6)
	}
}

// TestAttentionMemoryChild is TestChunkedAttentionMemory's child
// (SEEDCTL_ATTN_T sets another length, to see how the growth scales).
func TestAttentionMemoryChild(t *testing.T) {
	c := os.Getenv("SEEDCTL_ATTN_CHILD")
	if c == "" {
		t.Skip("run by TestChunkedAttentionMemory")
	}
	chunk, _ := strconv.ParseInt(c, 10, 64)
	attentionChunk = chunk
	mapLargeBuffers() // the resident set is then what is live, not what the heap kept
	cfg := tinyConfig(ArchQwen2)
	cfg.MaxPositionEmbeddings = 8192
	m, err := InitRandom(cfg, ModelOptions{}, 5)
	if err != nil {
		t.Fatal(err)
	}
	n := 4096
	if v, err := strconv.Atoi(os.Getenv("SEEDCTL_ATTN_T")); err == nil {
		n = v
	}
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 3 + i%90
	}
	small := []int{5, 6, 7}
	if _, err := m.Rescore([][]int{small}, 1<<20); err != nil { // warm-up: libtorch's own buffers
		t.Fatal(err)
	}
	before := maxRSS()
	if _, err := m.Rescore([][]int{ids}, 1<<20); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("rss %g %g\n", before, maxRSS())
}

// maxRSS is the process's peak resident set in bytes.
func maxRSS() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) * 1024
}
