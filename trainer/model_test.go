package trainer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

func boolPtr(b bool) *bool { return &b }
func intPtr(i int) *int    { return &i }

// tinyConfig returns a small config of each architecture with GQA.
func tinyConfig(arch Arch) *ModelConfig {
	c := &ModelConfig{
		VocabSize: 97, HiddenSize: 32, IntermediateSize: 48, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 256,
		RMSNormEps: 1e-6, RopeTheta: 10000, HiddenAct: "silu", InitializerRange: 0.2,
		BOSTokenID: intPtr(1), EOSTokenID: float64(2), Extra: map[string]json.RawMessage{},
	}
	switch arch {
	case ArchQwen2:
		c.Architectures, c.ModelType, c.TieWordEmbeddings, c.RopeTheta = []string{"Qwen2ForCausalLM"}, "qwen2", true, 1e6
	case ArchQwen3:
		c.Architectures, c.ModelType, c.HeadDim, c.AttentionBias = []string{"Qwen3ForCausalLM"}, "qwen3", 16, boolPtr(false)
	case ArchLlama:
		c.Architectures, c.ModelType, c.AttentionBias = []string{"LlamaForCausalLM"}, "llama", boolPtr(false)
		c.RopeTheta = 500000
		c.RopeScaling = &RopeScaling{RopeType: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 16}
	}
	return c
}

// testInput: a plain row and a packed row with two segments and padding.
func testInput() Input {
	return Input{
		IDs:       [][]int{{5, 17, 3, 88, 41, 9, 60}, {7, 7, 12, 30, 2, 96, 0}},
		Positions: [][]int{{0, 1, 2, 3, 4, 5, 6}, {0, 1, 2, 0, 1, 2, 0}},
		Segments:  [][]int{{1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 2, 2, 2, 0}},
	}
}

func newTiny(t *testing.T, arch Arch, seed uint64) (*Model, string) {
	t.Helper()
	m, err := InitRandom(tinyConfig(arch), ModelOptions{}, seed)
	if err != nil {
		t.Fatalf("InitRandom(%s): %v", arch, err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := m.Save(dir, SaveOptions{}); err != nil {
		t.Fatalf("Save: %v", err)
	}
	return m, dir
}

func maxAbsDiff(a, b [][][]float32) float64 {
	d := 0.0
	for i := range a {
		for j := range a[i] {
			for k := range a[i][j] {
				d = math.Max(d, math.Abs(float64(a[i][j][k])-float64(b[i][j][k])))
			}
		}
	}
	return d
}

func torchLogits(t *testing.T, dir string, in Input) [][][]float32 {
	t.Helper()
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import torch, numpy").CombinedOutput(); err != nil {
		t.Fatalf("Debian's python3-torch is needed for the reference forward (run ./setup.sh): %v: %s", err, out)
	}
	body, _ := json.Marshal(map[string]any{"ids": in.IDs, "positions": in.Positions, "segments": in.Segments})
	cmd := exec.Command(py, "testdata/torch_forward.py", dir)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("torch_forward.py: %v: %s", err, stderr.String())
	}
	var res struct {
		Logits [][][]float32 `json:"logits"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("torch_forward.py output: %v", err)
	}
	return res.Logits
}

// TestLogitsMatchPyTorch checks every architecture against an independent
// PyTorch forward on a padded, packed batch: max |Δlogit| < 1e-4 in fp32.
func TestLogitsMatchPyTorch(t *testing.T) {
	for _, arch := range []Arch{ArchQwen2, ArchQwen3, ArchLlama} {
		t.Run(string(arch), func(t *testing.T) {
			_, dir := newTiny(t, arch, 7)
			m, err := LoadCheckpoint(dir, ModelOptions{})
			if err != nil {
				t.Fatal(err)
			}
			in := testInput()
			got, err := m.Logits(in)
			if err != nil {
				t.Fatal(err)
			}
			want := torchLogits(t, dir, in)
			d := maxAbsDiff(got, want)
			t.Logf("%s: max |Δlogit| vs PyTorch = %.2e", arch, d)
			if d > 1e-4 {
				t.Errorf("%s: max |Δlogit| = %g, want < 1e-4", arch, d)
			}
		})
	}
}

func TestSaveLoadBitExact(t *testing.T) {
	for _, arch := range []Arch{ArchQwen2, ArchQwen3, ArchLlama} {
		m, dir := newTiny(t, arch, 11)
		m2, err := LoadCheckpoint(dir, ModelOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dir2 := filepath.Join(t.TempDir(), "again")
		if err := m2.Save(dir2, SaveOptions{}); err != nil {
			t.Fatal(err)
		}
		a, _ := os.ReadFile(filepath.Join(dir, "model.safetensors"))
		b, _ := os.ReadFile(filepath.Join(dir2, "model.safetensors"))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s: save → load → save changed model.safetensors (%d vs %d bytes)", arch, len(a), len(b))
		}
		l1, _ := m.Logits(testInput())
		l2, _ := m2.Logits(testInput())
		if d := maxAbsDiff(l1, l2); d != 0 {
			t.Errorf("%s: logits differ by %g after save → load", arch, d)
		}
	}
}

func TestInitRandomDeterministic(t *testing.T) {
	a, _ := InitRandom(tinyConfig(ArchQwen2), ModelOptions{}, 3)
	b, _ := InitRandom(tinyConfig(ArchQwen2), ModelOptions{}, 3)
	c, _ := InitRandom(tinyConfig(ArchQwen2), ModelOptions{}, 4)
	sa, _ := a.ParamChecksum()
	sb, _ := b.ParamChecksum()
	sc, _ := c.ParamChecksum()
	if sa != sb || sa == sc {
		t.Errorf("checksums: seed 3 → %v and %v, seed 4 → %v", sa, sb, sc)
	}
	if got, want := a.NumParams(), a.Config().ParamCount(); got != want {
		t.Errorf("NumParams = %d, config implies %d", got, want)
	}
}

func TestGreedyWithCacheEqualsWithout(t *testing.T) {
	for _, arch := range []Arch{ArchQwen2, ArchQwen3, ArchLlama} {
		m, _ := newTiny(t, arch, 5)
		prompt := []int{3, 14, 15, 92, 65, 35}
		a, err := m.Greedy(prompt, 20, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		b, err := m.Greedy(prompt, 20, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(a) != fmt.Sprint(b) || len(a) != 20 {
			t.Errorf("%s: without cache %v\nwith cache    %v", arch, a, b)
		}
	}
}

func TestTokenLogProbs(t *testing.T) {
	m, _ := newTiny(t, ArchQwen3, 9)
	in := testInput()
	logits, _ := m.Logits(in)
	targets := [][]int{{17, 3, 88, 41, 9, 60, -1}, {7, 12, 30, 2, 96, 0, -1}}
	lp, err := m.TokenLogProbs(in, targets)
	if err != nil {
		t.Fatal(err)
	}
	for b := range targets {
		for j, id := range targets[b] {
			if id < 0 {
				if lp[b][j] != 0 {
					t.Errorf("masked target scored %v", lp[b][j])
				}
				continue
			}
			// log-softmax by hand, in float64
			row := logits[b][j]
			mx := math.Inf(-1)
			for _, v := range row {
				mx = math.Max(mx, float64(v))
			}
			s := 0.0
			for _, v := range row {
				s += math.Exp(float64(v) - mx)
			}
			want := float64(row[id]) - mx - math.Log(s)
			if math.Abs(want-float64(lp[b][j])) > 1e-5 {
				t.Errorf("logprob[%d][%d] = %v, want %v", b, j, lp[b][j], want)
			}
		}
	}
	if _, err := m.TokenLogProbs(in, [][]int{{1}}); err == nil {
		t.Error("mismatched targets accepted")
	}
	if _, err := m.Logits(Input{IDs: [][]int{{1000}}}); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Errorf("out-of-vocabulary id: err = %v", err)
	}
}

func TestBF16AndShardedCheckpoints(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 13)
	ref, _ := m.Logits(testInput())

	bf := filepath.Join(t.TempDir(), "bf16")
	if err := m.Save(bf, SaveOptions{DType: "bfloat16"}); err != nil {
		t.Fatal(err)
	}
	info, err := InspectCheckpoint(bf)
	if err != nil {
		t.Fatal(err)
	}
	if info.DTypes["BF16"] != info.Params || info.Config.TorchDtype != "bfloat16" {
		t.Errorf("bf16 checkpoint: dtypes %v, torch_dtype %q", info.DTypes, info.Config.TorchDtype)
	}
	for _, dt := range []string{"float32", "bfloat16"} {
		mb, err := LoadCheckpoint(bf, ModelOptions{DType: dt})
		if err != nil {
			t.Fatalf("loading bf16 checkpoint as %s: %v", dt, err)
		}
		got, err := mb.Logits(testInput())
		if err != nil {
			t.Fatal(err)
		}
		if d := maxAbsDiff(got, ref); d > 0.25 || d == 0 {
			t.Errorf("bf16 weights as %s: max |Δlogit| = %g, want small but non-zero", dt, d)
		}
	}

	sh := filepath.Join(t.TempDir(), "sharded")
	if err := m.Save(sh, SaveOptions{MaxShardBytes: 8 << 10}); err != nil {
		t.Fatal(err)
	}
	info, err = InspectCheckpoint(sh)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Files) < 2 {
		t.Fatalf("sharded save wrote %v", info.Files)
	}
	ms, err := LoadCheckpoint(sh, ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := ms.Logits(testInput())
	if d := maxAbsDiff(got, ref); d != 0 {
		t.Errorf("sharded checkpoint logits differ by %g", d)
	}
}

// TestBadCheckpoints: each broken folder gives an error naming the file and
// the field or tensor, never a panic.
func TestBadCheckpoints(t *testing.T) {
	_, good := newTiny(t, ArchQwen2, 1)
	weights, _ := os.ReadFile(filepath.Join(good, "model.safetensors"))
	config, _ := os.ReadFile(filepath.Join(good, "config.json"))

	edit := func(t *testing.T, mutate func(dir string)) string {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "model.safetensors"), weights, 0o644)
		os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644)
		mutate(dir)
		return dir
	}
	setConfig := func(key string, val any) func(string) {
		return func(dir string) {
			var m map[string]any
			json.Unmarshal(config, &m)
			if val == nil {
				delete(m, key)
			} else {
				m[key] = val
			}
			b, _ := json.Marshal(m)
			os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
		}
	}
	tests := []struct {
		name   string
		mutate func(string)
		want   []string
	}{
		{"no config", func(d string) { os.Remove(filepath.Join(d, "config.json")) }, []string{"config.json"}},
		{"NaN weight", func(d string) {
			w := append([]byte(nil), weights...)
			copy(w[len(w)-4:], []byte{0x00, 0x00, 0xc0, 0x7f}) // the last float32: NaN
			os.WriteFile(filepath.Join(d, "model.safetensors"), w, 0o644)
		}, []string{"NaN or infinite", "model.safetensors"}},
		{"infinite weight", func(d string) {
			w := append([]byte(nil), weights...)
			copy(w[len(w)-4:], []byte{0x00, 0x00, 0x80, 0x7f}) // +Inf
			os.WriteFile(filepath.Join(d, "model.safetensors"), w, 0o644)
		}, []string{"NaN or infinite"}},
		{"malformed config", func(d string) { os.WriteFile(filepath.Join(d, "config.json"), []byte("{"), 0o644) }, []string{"config.json"}},
		{"unknown architecture", setConfig("architectures", []string{"GPT2LMHeadModel"}), []string{"config.json", "architectures", "GPT2LMHeadModel"}},
		{"zero layers", setConfig("num_hidden_layers", 0), []string{"config.json", "num_hidden_layers"}},
		{"wrong shape", setConfig("hidden_size", 64), []string{"model.safetensors", "shape"}},
		{"truncated weights", func(d string) {
			os.WriteFile(filepath.Join(d, "model.safetensors"), weights[:len(weights)-100], 0o644)
		}, []string{"model.safetensors", "truncated"}},
		{"garbage weights", func(d string) {
			os.WriteFile(filepath.Join(d, "model.safetensors"), []byte("not a safetensors file"), 0o644)
		}, []string{"model.safetensors", "header"}},
		{"no weights", func(d string) { os.Remove(filepath.Join(d, "model.safetensors")) }, []string{"model.safetensors"}},
		{"missing tensor", func(d string) {
			os.WriteFile(filepath.Join(d, "model.safetensors.index.json"),
				[]byte(`{"weight_map": {"model.embed_tokens.weight": "model.safetensors"}}`), 0o644)
		}, []string{"model.layers.0", "missing"}},
		{"wrong dtype", func(d string) {
			var buf bytes.Buffer
			writeSafetensors(&buf, []stTensor{{name: "model.embed_tokens.weight", dtype: "I64", shape: []int64{97, 32}, data: make([]byte, 97*32*8)}}, nil)
			os.WriteFile(filepath.Join(d, "model.safetensors"), buf.Bytes(), 0o644)
		}, []string{"model.embed_tokens.weight", "I64"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := edit(t, tt.mutate)
			_, err := LoadCheckpoint(dir, ModelOptions{})
			if err == nil {
				t.Fatal("loaded a broken checkpoint")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestModelOptionsValidate(t *testing.T) {
	if err := (ModelOptions{DType: "int8"}).Validate(); err == nil {
		t.Error("int8 accepted")
	}
	if err := (ModelOptions{Device: "tpu"}).Validate(); err == nil {
		t.Error("tpu accepted")
	}
}

// TestGradModeRestoredAfterNoGrad guards the gotch patch in
// scripts/prepare-gotch.sh: without it, inference calls leave autograd off
// on their OS threads and later training steps fail.
func TestGradModeRestoredAfterNoGrad(t *testing.T) {
	m, _ := newTiny(t, ArchQwen2, 2)
	for i := 0; i < 10; i++ {
		if _, err := m.Logits(testInput()); err != nil {
			t.Fatal(err)
		}
	}
	assertGradOnEverywhere(t, 8, 0)
}

// assertGradOnEverywhere checks from n goroutines, each pinned to its OS
// thread (after sleeping spread, so they spread over the threads earlier
// goroutines used), that libtorch's grad mode is on there.
func assertGradOnEverywhere(t *testing.T, n int, spread time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			time.Sleep(spread)
			if prev, err := ts.GradSetEnabled(true); err != nil || !prev {
				t.Errorf("grad mode on this thread was %v (err %v), want on", prev, err)
			}
		}()
	}
	wg.Wait()
}

// TestGotchNoGradPinsItsThread guards the other grad-mode patch in
// scripts/prepare-gotch.sh: gotch's ts.NoGrad (which its nn initialisers
// call) must leave no OS thread with autograd off when the goroutine
// moves between threads inside it.
func TestGotchNoGradPinsItsThread(t *testing.T) {
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				ts.NoGrad(func() {
					runtime.Gosched()
					time.Sleep(50 * time.Microsecond) // a chance to be moved to another thread
				})
			}
		}()
	}
	wg.Wait()
	assertGradOnEverywhere(t, 64, time.Millisecond)
}

func TestNLLBackwardMatchesLogProbs(t *testing.T) {
	m, _ := newTiny(t, ArchLlama, 21)
	in := testInput()
	targets := [][]int{{17, 3, 88, 41, 9, 60, -1}, {7, 12, -1, 2, 96, -1, -1}}
	lp, err := m.TokenLogProbs(in, targets)
	if err != nil {
		t.Fatal(err)
	}
	sum, n := 0.0, 0
	for b := range targets {
		for j, id := range targets[b] {
			if id >= 0 {
				sum += float64(lp[b][j])
				n++
			}
		}
	}
	loss, err := m.NLLBackward(in, targets)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(loss-(-sum/float64(n))) > 1e-5 {
		t.Errorf("NLL %v, want %v", loss, -sum/float64(n))
	}
	g := must(m.embed.Grad(false))
	s := scalarFloat(must(must(g.Abs(false)).Sum(gotch.Float, true)))
	if !(s > 0) {
		t.Errorf("embedding gradient |sum| = %v after backward", s)
	}
	m.ZeroGrad()
	s = scalarFloat(must(must(g.Abs(false)).Sum(gotch.Float, true)))
	if s != 0 {
		t.Errorf("gradient not cleared: %v", s)
	}
	if _, err := m.NLLBackward(in, [][]int{{-1, -1, -1, -1, -1, -1, -1}, {-1, -1, -1, -1, -1, -1, -1}}); err == nil {
		t.Error("all-masked targets accepted")
	}
}
