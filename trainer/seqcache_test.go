package trainer

import (
	"fmt"
	"math"
	"runtime/debug"
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
		caches, next, got := prefilled(t, m, prompts)
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

// TestDecodeGroupsFollowMembership: continuous batching changes the batch
// between steps — sequences pause, rejoin, join after their prefill, leave
// in another order, are forked or freed mid-run — and every sequence still
// decodes what it would alone; when all are freed no tensor is left.
func TestDecodeGroupsFollowMembership(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no finalizer frees a leak behind the count's back
	m, _ := newTiny(t, ArchQwen2, 17)
	base := LiveTensors()
	prompts := [][]int{{5, 9, 2}, {1, 2, 3, 4, 5, 6, 7}, {42}, {8, 8, 3, 1}}
	caches := make([]*SeqCache, len(prompts))
	next := make([]int, len(prompts))
	got := make([][]int, len(prompts))
	start := func(i int) {
		caches[i] = m.NewSeqCache()
		last, err := m.Extend(caches[i], prompts[i])
		if err != nil {
			t.Fatal(err)
		}
		next[i] = argmax(last)
		got[i] = []int{next[i]}
	}
	step := func(rows ...int) {
		t.Helper()
		greedyStep(t, m, caches, next, got, rows...)
	}
	start(0)
	start(1)
	start(2)
	step(0, 1, 2)
	step(0, 1, 2) // the same group: one column appended
	step(0, 2)    // 1 pauses: its row is taken back
	start(3)
	step(0, 1, 2, 3) // 1 rejoins, 3 joins after its prefill: a fresh group
	// A member forked between steps: the fork continues alone like a fresh cache.
	seq := caches[0].Tokens() // the fork keeps all but the last, then is fed it
	f, err := caches[0].Fork(len(seq) - 1)
	if err != nil {
		t.Fatal(err)
	}
	step(3, 2, 1) // another order: a fresh group again
	step(3, 2, 1)
	step(2, 1) // 3 leaves (the longest row but one)
	caches[3].Free()
	step(2, 1)
	step(0)
	for i, p := range prompts {
		want, err := m.Greedy(p, len(got[i]), nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got[i]) != fmt.Sprint(want) {
			t.Errorf("sequence %d: batched %v, alone %v", i, got[i], want)
		}
	}
	fresh := m.NewSeqCache()
	if _, err := m.Extend(fresh, seq[:len(seq)-1]); err != nil {
		t.Fatal(err)
	}
	gotF, err := m.Extend(f, seq[len(seq)-1:])
	if err != nil {
		t.Fatal(err)
	}
	want, _ := m.Extend(fresh, seq[len(seq)-1:])
	for v := range want {
		if math.Abs(float64(gotF[v]-want[v])) > 1e-4 {
			t.Fatalf("the forked member's logits differ at %d: %v vs %v", v, gotF[v], want[v])
		}
	}
	for _, c := range append(caches, f, fresh) {
		c.Free()
	}
	if n := LiveTensors(); n != base {
		t.Errorf("%d tensors live after every cache was freed, %d before", n, base)
	}
}

// TestPrefillBatchEqualsExtend: prompts of different lengths prefilled in
// one forward give each prompt's own next-token logits, decode on as a
// group exactly as alone, and can be forked and extended like any cache.
func TestPrefillBatchEqualsExtend(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, arch := range []Arch{ArchQwen2, ArchLlama} {
		m, _ := newTiny(t, arch, 23)
		base := LiveTensors()
		prompts := [][]int{{5, 9, 2}, {1, 2, 3, 4, 5, 6, 7}, {42}}
		cs := []*SeqCache{m.NewSeqCache(), m.NewSeqCache(), m.NewSeqCache()}
		logits, err := m.PrefillBatch(cs, prompts)
		if err != nil {
			t.Fatal(err)
		}
		next := make([]int, len(prompts))
		got := make([][]int, len(prompts))
		for i, p := range prompts {
			alone := m.NewSeqCache()
			want, err := m.Extend(alone, p)
			if err != nil {
				t.Fatal(err)
			}
			alone.Free()
			d := 0.0
			for v := range want {
				d = math.Max(d, math.Abs(float64(logits[i][v]-want[v])))
			}
			if d > 1e-4 || cs[i].Len() != len(p) {
				t.Errorf("%s prompt %d: batched prefill's logits differ from Extend's by %g (cache length %d)", arch, i, d, cs[i].Len())
			}
			next[i] = argmax(logits[i])
			got[i] = []int{next[i]}
		}
		for range 6 {
			out, err := m.DecodeBatch(cs, next)
			if err != nil {
				t.Fatal(err)
			}
			for i := range cs {
				next[i] = argmax(out[i])
				got[i] = append(got[i], next[i])
			}
		}
		for i, p := range prompts {
			want, _ := m.Greedy(p, len(got[i]), nil, false)
			if fmt.Sprint(got[i]) != fmt.Sprint(want) {
				t.Errorf("%s prompt %d: prefilled and decoded %v, alone %v", arch, i, got[i], want)
			}
		}
		if _, err := m.PrefillBatch(cs[:1], prompts[:1]); err == nil {
			t.Error("a batched prefill of a cache that holds tokens was accepted")
		}
		for _, c := range cs {
			c.Free()
		}
		if n := LiveTensors(); n != base {
			t.Errorf("%s: %d tensors live after the caches were freed, %d before", arch, n, base)
		}
	}
}

// TestExtendBatchEqualsExtend: sequences with cached pasts of different
// lengths (forks of one prefix, a fresh one, a decode group's member) take
// new tokens of different lengths in one forward: each gets Extend's
// logits, keeps a cache that decodes on as alone, and nothing leaks.
func TestExtendBatchEqualsExtend(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	m, _ := newTiny(t, ArchQwen2, 29)
	base := LiveTensors()
	root := m.NewSeqCache()
	if _, err := m.Extend(root, []int{3, 1, 4, 1, 5, 9, 2, 6}); err != nil {
		t.Fatal(err)
	}
	f5, _ := root.Fork(5)
	f2, _ := root.Fork(2)
	fresh := m.NewSeqCache()
	grouped := []*SeqCache{m.NewSeqCache(), m.NewSeqCache()}
	if _, err := m.PrefillBatch(grouped, [][]int{{7, 7, 7}, {8}}); err != nil { // a decode group's members
		t.Fatal(err)
	}
	cs := []*SeqCache{f5, fresh, f2, grouped[1]}
	news := [][]int{{11, 12}, {20, 21, 22, 23}, {30}, {40, 41, 42}}
	// What Extend gives each, on copies of the same pasts.
	var want [][]float32
	var full [][]int
	for i, c := range cs {
		seq := append(c.Tokens(), news[i]...)
		full = append(full, seq)
		alone := m.NewSeqCache()
		w, err := m.Extend(alone, seq)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, w)
		alone.Free()
	}
	got, err := m.ExtendBatch(cs, news)
	if err != nil {
		t.Fatal(err)
	}
	next := make([]int, len(cs))
	for i := range cs {
		d := 0.0
		for v := range want[i] {
			d = math.Max(d, math.Abs(float64(got[i][v]-want[i][v])))
		}
		if d > 1e-4 || fmt.Sprint(cs[i].Tokens()) != fmt.Sprint(full[i]) {
			t.Errorf("sequence %d: logits differ from Extend's by %g; tokens %v, want %v", i, d, cs[i].Tokens(), full[i])
		}
		next[i] = argmax(got[i])
	}
	gen := make([][]int, len(cs))
	for i := range cs {
		gen[i] = []int{next[i]}
	}
	for range 4 {
		out, err := m.DecodeBatch(cs, next)
		if err != nil {
			t.Fatal(err)
		}
		for i := range cs {
			next[i] = argmax(out[i])
			gen[i] = append(gen[i], next[i])
		}
	}
	for i := range cs {
		w, _ := m.Greedy(full[i], len(gen[i]), nil, false)
		if fmt.Sprint(gen[i]) != fmt.Sprint(w) {
			t.Errorf("sequence %d decoded after the batched extend: %v, alone %v", i, gen[i], w)
		}
	}
	if _, err := m.ExtendBatch([]*SeqCache{f5, f5}, [][]int{{1}, {2}}); err == nil {
		t.Error("a sequence listed twice was accepted")
	}
	for _, c := range append(cs, root, grouped[0]) {
		c.Free()
	}
	if n := LiveTensors(); n != base {
		t.Errorf("%d tensors live after every cache was freed, %d before", n, base)
	}
}

// A cache that owns its row keeps none of its decode group's memory: once
// the group's other members are freed, only its own tensors are live.
func TestOwnLetsTheGroupGo(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	m, _ := newTiny(t, ArchQwen2, 5)
	base := LiveTensors()
	cs := []*SeqCache{m.NewSeqCache(), m.NewSeqCache(), m.NewSeqCache()}
	if _, err := m.PrefillBatch(cs, [][]int{{1, 2, 3}, {4, 5}, {6}}); err != nil {
		t.Fatal(err)
	}
	cs[1].Own()
	cs[0].Free()
	cs[2].Free()
	if n, want := LiveTensors()-base, 2*len(m.layers); n != want {
		t.Errorf("%d tensors live for one owned cache, want its %d", n, want)
	}
	last, err := m.Extend(cs[1], []int{9})
	if err != nil {
		t.Fatal(err)
	}
	alone := m.NewSeqCache()
	want, _ := m.Extend(alone, []int{4, 5, 9})
	for v := range want {
		if math.Abs(float64(last[v]-want[v])) > 1e-4 {
			t.Fatalf("the owned cache's logits differ at %d: %v vs %v", v, last[v], want[v])
		}
	}
	cs[1].Free()
	alone.Free()
}

// TestDecodeGroupOutgrowsItsRoom: a group decodes past its buffers' spare
// columns more than once (each time they are reallocated and the window
// moved to the start), with rows leaving in between (the window's offset
// skips the padding no one needs), and every sequence still decodes what
// it would alone; nothing is left once all are freed.
func TestDecodeGroupOutgrowsItsRoom(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, arch := range []Arch{ArchQwen2, ArchLlama} {
		m, _ := newTiny(t, arch, 23)
		base := LiveTensors()
		prompts := [][]int{{5, 9, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {42}, {8, 8, 3, 1}}
		caches, next, got := prefilled(t, m, prompts)
		rows := []int{0, 1, 2, 3}
		steps := 2*decodeRoom + 7
		for s := 0; s < steps; s++ {
			switch s {
			case decodeRoom - 20:
				rows = []int{0, 2, 3} // the longest row leaves: the window's offset moves
			case decodeRoom + 30:
				rows = []int{0, 3}
			}
			greedyStep(t, m, caches, next, got, rows...)
		}
		for i, p := range prompts {
			want, err := m.Greedy(p, len(got[i]), nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got[i]) != fmt.Sprint(want) {
				t.Errorf("%s sequence %d (%d tokens): batched %v, alone %v", arch, i, len(got[i]), got[i], want)
			}
			// Taken out of the group, its cache still extends like a full forward.
			seq := caches[i].Tokens()
			ext, err := m.Extend(caches[i], []int{next[i]})
			if err != nil {
				t.Fatal(err)
			}
			full, _ := m.Logits(Input{IDs: [][]int{append(seq, next[i])}})
			d := 0.0
			for v := range ext {
				d = math.Max(d, math.Abs(float64(ext[v]-full[0][len(seq)][v])))
			}
			if d > 1e-4 {
				t.Errorf("%s sequence %d: cached logits differ from a full forward by %g", arch, i, d)
			}
		}
		for _, c := range caches {
			c.Free()
		}
		if n := LiveTensors(); n != base {
			t.Errorf("%s: %d tensors live after every cache was freed, %d before", arch, n, base)
		}
	}
}

// prefilled gives each prompt its own cache, extended by the prompt, with
// the greedy next token (next) and the tokens decoded so far (got: that
// one).
func prefilled(t *testing.T, m *Model, prompts [][]int) (caches []*SeqCache, next []int, got [][]int) {
	t.Helper()
	caches, next, got = make([]*SeqCache, len(prompts)), make([]int, len(prompts)), make([][]int, len(prompts))
	for i, p := range prompts {
		caches[i] = m.NewSeqCache()
		last, err := m.Extend(caches[i], p)
		if err != nil {
			t.Fatal(err)
		}
		next[i] = argmax(last)
		got[i] = []int{next[i]}
	}
	return caches, next, got
}

// greedyStep decodes the given rows (indexes into caches) as one batch,
// feeding each its next token, and records the greedy tokens that follow.
func greedyStep(t *testing.T, m *Model, caches []*SeqCache, next []int, got [][]int, rows ...int) {
	t.Helper()
	cs, ids := make([]*SeqCache, len(rows)), make([]int, len(rows))
	for k, i := range rows {
		cs[k], ids[k] = caches[i], next[i]
	}
	logits, err := m.DecodeBatch(cs, ids)
	if err != nil {
		t.Fatal(err)
	}
	for k, i := range rows {
		next[i] = argmax(logits[k])
		got[i] = append(got[i], next[i])
	}
}
