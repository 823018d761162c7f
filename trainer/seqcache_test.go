package trainer

import (
	"fmt"
	"math"
	"testing"
)

func argmax(xs []float32) int {
	best := 0
	for i, x := range xs {
		if x > xs[best] {
			best = i
		}
	}
	return best
}

// TestDecodeBatchEqualsGreedy: sequences of different lengths advanced
// together produce the same tokens as each decoded alone without a cache,
// and their logits match a full forward.
func TestDecodeBatchEqualsGreedy(t *testing.T) {
	for _, arch := range []Arch{ArchQwen2, ArchQwen3, ArchLlama} {
		m, _ := newTiny(t, arch, 31)
		prompts := [][]int{{5, 9, 2}, {1, 2, 3, 4, 5, 6, 7}, {42}}
		caches := make([]*SeqCache, len(prompts))
		next := make([]int, len(prompts))
		got := make([][]int, len(prompts))
		for i, p := range prompts {
			caches[i] = m.NewSeqCache()
			last, err := m.Extend(caches[i], p)
			if err != nil {
				t.Fatal(err)
			}
			next[i] = argmax(last)
			got[i] = []int{next[i]}
		}
		const steps = 10
		for s := 0; s < steps; s++ {
			logits, err := m.DecodeBatch(caches, next)
			if err != nil {
				t.Fatal(err)
			}
			for i := range caches {
				next[i] = argmax(logits[i])
				got[i] = append(got[i], next[i])
			}
		}
		for i, p := range prompts {
			want, err := m.Greedy(p, steps+1, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got[i]) != fmt.Sprint(want) {
				t.Errorf("%s prompt %d: batched %v, alone %v", arch, i, got[i], want)
			}
			// The cache holds prompt + all fed tokens; its last logits match a full forward.
			seq := caches[i].Tokens()
			full, _ := m.Logits(Input{IDs: [][]int{seq}})
			ext, _ := m.Extend(caches[i], []int{next[i]})
			full2, _ := m.Logits(Input{IDs: [][]int{append(seq, next[i])}})
			d := 0.0
			for v := range ext {
				d = math.Max(d, math.Abs(float64(ext[v]-full2[0][len(seq)][v])))
			}
			if d > 1e-4 || len(full[0]) != len(seq) {
				t.Errorf("%s prompt %d: cached logits differ from a full forward by %g", arch, i, d)
			}
			caches[i].Free()
		}
	}
}

func TestSeqCacheForkReusesPrefix(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 8)
	c := m.NewSeqCache()
	if _, err := m.Extend(c, []int{3, 1, 4, 1, 5, 9, 2, 6}); err != nil {
		t.Fatal(err)
	}
	f, err := c.Fork(5)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Extend(f, []int{7, 7})
	if err != nil {
		t.Fatal(err)
	}
	fresh := m.NewSeqCache()
	want, _ := m.Extend(fresh, []int{3, 1, 4, 1, 5, 7, 7})
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5 {
			t.Fatalf("forked cache logits differ at %d: %v vs %v", i, got[i], want[i])
		}
	}
	if c.Len() != 8 || f.Len() != 7 || fmt.Sprint(f.Tokens()) != "[3 1 4 1 5 7 7]" {
		t.Errorf("lengths %d %d, tokens %v", c.Len(), f.Len(), f.Tokens())
	}
	if _, err := c.Fork(9); err == nil {
		t.Error("fork past the end accepted")
	}
	other, _ := newTiny(t, ArchQwen2, 8)
	if _, err := other.Extend(c, []int{1}); err != ErrCacheModel {
		t.Errorf("foreign cache: err = %v", err)
	}
}
