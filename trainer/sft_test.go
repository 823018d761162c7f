package trainer

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"

	"github.com/sugarme/gotch/ts"
)

// copyTask: sequences "a b c SEP a b c"; only the copy is trained on. A
// model can only learn it by attending back, so falling loss shows the
// whole SFT path (batching, masking, AdamW, schedule) works.
func copyTask(n int, seed uint64) []SFTExample {
	r := rand.New(rand.NewPCG(seed, 1))
	var out []SFTExample
	for i := 0; i < n; i++ {
		l := 3 + r.IntN(4)
		src := make([]int, l)
		for k := range src {
			src[k] = 3 + r.IntN(20)
		}
		ids := append(append(append([]int{}, src...), 1), src...)
		loss := make([]bool, len(ids))
		for k := l + 1; k < len(ids); k++ {
			loss[k] = true
		}
		out = append(out, SFTExample{IDs: ids, Loss: loss})
	}
	return out
}

func TestTrainSFTLearnsAndIsDeterministic(t *testing.T) {
	data := copyTask(400, 1)
	cfg := DefaultSFTConfig()
	cfg.Epochs, cfg.BatchTokens, cfg.MaxLen, cfg.LR = 20, 512, 64, 1e-2
	run := func() (float64, float64, float64) {
		c := tinyConfig(ArchQwen2)
		c.InitializerRange = 0.02
		m, err := InitRandom(c, ModelOptions{}, 5)
		if err != nil {
			t.Fatal(err)
		}
		// Mean step loss over the first and the last epoch: batches hold
		// examples of similar length (bucketed), so one batch's loss says
		// little about the whole.
		var first, last float64
		var nf, nl int
		err = TrainSFT(context.Background(), m, data, cfg, func(p SFTProgress) {
			perEpoch := p.Steps / int(cfg.Epochs)
			if p.Step <= perEpoch {
				first += p.Loss
				nf++
			}
			if p.Step > p.Steps-perEpoch {
				last += p.Loss
				nl++
			}
		})
		first, last = first/float64(nf), last/float64(nl)
		if err != nil {
			t.Fatal(err)
		}
		sum, _ := m.ParamChecksum()
		return first, last, sum
	}
	f1, l1, s1 := run()
	_, _, s2 := run()
	t.Logf("copy task: loss %.3f → %.3f", f1, l1)
	if !(l1 < 0.5*f1) {
		t.Errorf("loss %.3f → %.3f: did not halve", f1, l1)
	}
	// Same seed: same batches and updates, bit for bit (TrainSFT keeps its
	// libtorch calls on one OS thread; see pinThread).
	if s1 != s2 {
		t.Errorf("two runs with the same seed gave weights %v and %v", s1, s2)
	}
	cfg.Seed = 2
	_, _, s3 := run()
	if math.Abs(s1-s3) <= 1e-4*math.Abs(s1) {
		t.Errorf("a different seed gave nearly the same weights (%v vs %v): the check above proves nothing", s1, s3)
	}
}

func TestOptimizerRefusesNonFiniteStep(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 3)
	opt, err := m.NewAdamW(1e-3, 0)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := m.ParamChecksum()
	if _, err := m.NLLBackward(testInput(), [][]int{{17, 3, 88, 41, 9, 60, -1}, {7, 12, 30, 2, 96, 0, -1}}); err != nil {
		t.Fatal(err)
	}
	g := must(m.embed.Grad(false))
	nanScalar := ts.FloatScalar(math.NaN())
	nan := must(ts.Full(g.MustSize(), nanScalar, g.DType(), g.MustDevice()))
	runtime.KeepAlive(nanScalar)
	g.Copy_(nan)
	runtime.KeepAlive(nan)
	if _, err := opt.Step(1); !errors.Is(err, ErrNonFinite) {
		t.Fatalf("step with a NaN gradient: %v", err)
	}
	after, _ := m.ParamChecksum()
	if after != before {
		t.Error("a refused step changed the weights")
	}
	// The next, finite step goes through.
	m.NLLBackward(testInput(), [][]int{{17, 3, 88, 41, 9, 60, -1}, {7, 12, 30, 2, 96, 0, -1}})
	if n, err := opt.Step(1); err != nil || n <= 0 {
		t.Fatalf("finite step: norm %v, %v", n, err)
	}
	if now, _ := m.ParamChecksum(); now == before {
		t.Error("a finite step did not change the weights")
	}
}

func TestSFTConfigValidate(t *testing.T) {
	for _, mut := range []func(*SFTConfig){
		func(c *SFTConfig) { c.Epochs = 0 },
		func(c *SFTConfig) { c.MaxLen = c.BatchTokens + 1 },
		func(c *SFTConfig) { c.LR = 0 },
		func(c *SFTConfig) { c.WarmupFrac = 1 },
		func(c *SFTConfig) { c.MicroBatchTokens = -1 },
	} {
		c := DefaultSFTConfig()
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	m, _ := newTiny(t, ArchQwen2, 3)
	if err := TrainSFT(context.Background(), m, []SFTExample{{IDs: []int{1}, Loss: []bool{true}}}, DefaultSFTConfig(), nil); err == nil {
		t.Error("a one-token example accepted")
	}
}

// Packing several examples per row and splitting a step into micro-batches
// must give the same loss and gradient as one padded batch.
func TestSFTPackingAndAccumulationMatchPlainBatch(t *testing.T) {
	data := copyTask(12, 4)
	batch := make([]int, len(data))
	for i := range batch {
		batch[i] = i
	}
	grad := func(cfg SFTConfig) (float64, float64) {
		m, _ := newTiny(t, ArchQwen2, 21)
		opt, _ := m.NewAdamW(1e-3, 0)
		loss, err := cfg.accumulate(m, data, batch, nil)
		if err != nil {
			t.Fatal(err)
		}
		norm, _ := opt.GradNorm()
		return loss, norm
	}
	plain := DefaultSFTConfig()
	plain.BatchTokens, plain.MaxLen = 4096, 32
	l0, n0 := grad(plain)
	packed := plain
	packed.Pack, packed.MicroBatchTokens = true, 32
	l1, n1 := grad(packed)
	if math.Abs(l0-l1) > 1e-5 || math.Abs(n0-n1) > 1e-5*n0 {
		t.Errorf("plain batch: loss %v grad norm %v; packed in micro-batches: %v %v", l0, n0, l1, n1)
	}
	// Micro-batches smaller than the longest example (which then goes
	// alone), formed from rows of similar length.
	micro := plain
	micro.MicroBatchTokens = 16
	if err := micro.Validate(); err != nil {
		t.Fatalf("micro-batches shorter than max_len refused: %v", err)
	}
	l2, n2 := grad(micro)
	if math.Abs(l0-l2) > 1e-5 || math.Abs(n0-n2) > 1e-5*n0 {
		t.Errorf("plain batch: loss %v grad norm %v; in micro-batches of 16 tokens: %v %v", l0, n0, l2, n2)
	}
	if rows := packRows(data, batch, 32); len(rows) >= len(data) {
		t.Errorf("packing made %d rows for %d examples", len(rows), len(data))
	}
}

// microBatches puts rows of similar length together, so short rows are not
// padded to a long one's width; a row over the limit goes alone.
func TestMicroBatchesGroupSimilarLengths(t *testing.T) {
	for _, tc := range []struct {
		lens  []int
		limit int
		want  [][]int
	}{
		{[]int{5, 100, 6, 99, 7}, 200, [][]int{{1, 3}, {4, 2, 0}}},
		{[]int{5, 300, 6}, 200, [][]int{{1}, {2, 0}}},
		{[]int{10, 10, 10}, 20, [][]int{{0, 1}, {2}}},
	} {
		got := microBatches(tc.lens, tc.limit)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("microBatches(%v, %d) = %v, want %v", tc.lens, tc.limit, got, tc.want)
		}
	}
}

// An example of weight k gives a step the loss and gradient of k copies.
func TestSFTWeightIsCopies(t *testing.T) {
	data := copyTask(3, 9)
	grad := func(data []SFTExample) (float64, float64) {
		m, _ := newTiny(t, ArchQwen2, 21)
		opt, _ := m.NewAdamW(1e-3, 0)
		batch := make([]int, len(data))
		for i := range batch {
			batch[i] = i
		}
		cfg := DefaultSFTConfig()
		cfg.BatchTokens, cfg.MaxLen = 4096, 32
		loss, err := cfg.accumulate(m, data, batch, nil)
		if err != nil {
			t.Fatal(err)
		}
		norm, _ := opt.GradNorm()
		return loss, norm
	}
	copies := []SFTExample{data[0], data[0], data[0], data[1], data[2]}
	weighted := []SFTExample{data[0], data[1], data[2]}
	weighted[0].Weight = 3
	l0, n0 := grad(copies)
	l1, n1 := grad(weighted)
	if math.Abs(l0-l1) > 1e-5 || math.Abs(n0-n1) > 1e-5*n0 {
		t.Errorf("three copies: loss %v grad norm %v; weight 3: %v %v", l0, n0, l1, n1)
	}
	m, _ := newTiny(t, ArchQwen2, 3)
	bad := []SFTExample{data[0]}
	bad[0].Weight = -1
	if err := TrainSFT(context.Background(), m, bad, DefaultSFTConfig(), nil); err == nil {
		t.Error("a negative weight accepted")
	}
}

// SequenceMean (verl's SFT loss) makes a step's loss the mean of its
// examples' own mean NLLs, and BatchSequences steps of that many examples
// in shuffled order.
func TestSFTSequenceMeanAndBatchSequences(t *testing.T) {
	data := copyTask(4, 5)
	cfg := DefaultSFTConfig()
	cfg.BatchTokens, cfg.MaxLen = 4096, 32
	var want float64
	for i := range data {
		m, _ := newTiny(t, ArchQwen2, 21)
		l, err := cfg.accumulate(m, data, []int{i}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want += l / float64(len(data))
	}
	m, _ := newTiny(t, ArchQwen2, 21)
	tokenMean, err := cfg.accumulate(m, data, []int{0, 1, 2, 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	seq := cfg
	seq.SequenceMean, seq.BatchSequences, seq.LR, seq.Beta2 = true, 4, 1e-12, 0.95
	var got []float64
	m, _ = newTiny(t, ArchQwen2, 21)
	if err := TrainSFT(context.Background(), m, data, seq, func(p SFTProgress) { got = append(got, p.Loss) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || math.Abs(got[0]-want) > 1e-5 {
		t.Errorf("sequence mean: step losses %v, want one step of %v (the token mean is %v)", got, want, tokenMean)
	}
	if math.Abs(tokenMean-want) < 1e-4 {
		t.Fatalf("the test's examples give the same token and sequence means (%v)", want)
	}
	seq.BatchSequences = 3
	bs := seq.batches(copyTask(10, 4), rand.New(rand.NewPCG(1, 2)))
	seen := map[int]bool{}
	for k, b := range bs {
		if len(b) != 3 && !(k == len(bs)-1 && len(b) == 1) {
			t.Errorf("batch %d has %d examples, want 3 (the last 1)", k, len(b))
		}
		for _, i := range b {
			seen[i] = true
		}
	}
	if len(bs) != 4 || len(seen) != 10 {
		t.Errorf("%d batches covering %d of 10 examples", len(bs), len(seen))
	}
	bad := seq
	bad.Beta2 = 1
	if bad.Validate() == nil {
		t.Error("beta2 1 accepted")
	}
}
