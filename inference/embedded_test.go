package inference

import (
	"context"
	"errors"

	"math"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/seedctl/seedctl/inference/server"
	"github.com/seedctl/seedctl/inference/server/servertest"
)

// TestEmbeddedBackendPublish drives the embedded server through the
// Backend: generation with token ids, scoring that equals the trainer's own
// log-probs, and publishing that changes what is served.
// twoCheckpoints writes two tiny checkpoints with different weights.
func twoCheckpoints(t *testing.T) (v1, v2 string) {
	t.Helper()
	root := t.TempDir()
	v1, v2 = filepath.Join(root, "v1"), filepath.Join(root, "v2")
	if err := servertest.WriteTinyCheckpoint(v1, 1); err != nil {
		t.Fatal(err)
	}
	if err := servertest.WriteTinyCheckpoint(v2, 2); err != nil {
		t.Fatal(err)
	}
	return v1, v2
}

func TestEmbeddedBackendPublish(t *testing.T) {
	v1, v2 := twoCheckpoints(t)
	ctx := context.Background()
	b, err := newEmbedded(t, ctx, server.DefaultConfig(v1), DefaultConfig("embedded"), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	res, err := b.Generate(ctx, []GenRequest{{Prompt: []int{5, 6, 7}, MaxTokens: 5}, {Prompt: []int{9}, MaxTokens: 4, Temperature: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res[0].IDs) == 0 || len(res[0].IDs) != len(res[0].LogProbs) || res[0].FinishReason == "" {
		t.Fatalf("generation %+v", res[0])
	}
	probe := append([]int{5, 6, 7}, res[0].IDs...)
	want1, err := servertest.LogProbs(v1, probe)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Score(ctx, [][]int{probe})
	if err != nil {
		t.Fatal(err)
	}
	for k := 1; k < len(probe); k++ {
		if math.Abs(got[0][k]-want1[k]) > 1e-4 {
			t.Errorf("token %d: served %v, trainer %v", k, got[0][k], want1[k])
		}
	}
	// The sampling log-probs of generation are the same numbers.
	for k, lp := range res[0].LogProbs {
		if math.Abs(lp-want1[3+k]) > 1e-4 {
			t.Errorf("generated token %d: sampling log-prob %v, trainer %v", k, lp, want1[3+k])
		}
	}

	if err := b.Publish(ctx, v2, "2"); err != nil {
		t.Fatal(err)
	}
	want2, _ := servertest.LogProbs(v2, probe)
	if err := VerifyServed(ctx, b, probe, want2, 1e-4); err != nil {
		t.Fatalf("after publishing v2: %v", err)
	}
	if err := VerifyServed(ctx, b, probe, want1, 1e-4); !errors.Is(err, ErrStaleWeights) {
		t.Fatalf("v1's log-probs still match after publishing v2: %v", err)
	}
	if err := b.Publish(ctx, filepath.Join(filepath.Dir(v1), "missing"), "3"); err == nil {
		t.Error("publishing a missing folder succeeded")
	}

}

// newEmbedded starts the embedded server on scfg's checkpoint behind a
// backend, as cmd assembles it.
func newEmbedded(t *testing.T, ctx context.Context, scfg server.Config, cfg Config, log zerolog.Logger) (Backend, error) {
	t.Helper()
	srv, err := server.New(scfg, log)
	if err != nil {
		return nil, err
	}
	return NewEmbedded(ctx, srv, cfg, log)
}
