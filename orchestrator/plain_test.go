package orchestrator

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedctl/seedctl/rollout"
)

// scoreLearner answers Rescore with -1 and RescoreRef with -2 at every
// position, records the sequences each call scored, and holds every call
// until release is closed (nil: none is held).
type scoreLearner struct {
	Learner
	release chan struct{}
	mu      sync.Mutex
	calls   []string      // "cur:N" or "ref:N"
	started chan struct{} // closed at the first call
	once    sync.Once
	fail    error
}

func (l *scoreLearner) score(kind string, seqs [][]int, v float32) ([][]float32, error) {
	l.once.Do(func() { close(l.started) })
	if l.release != nil {
		<-l.release
	}
	l.mu.Lock()
	l.calls = append(l.calls, kind+":"+strings.Repeat("|", len(seqs)))
	l.mu.Unlock()
	if l.fail != nil {
		return nil, l.fail
	}
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		out[i] = make([]float32, len(s))
		for k := 1; k < len(s); k++ {
			out[i][k] = v
		}
	}
	return out, nil
}

func (l *scoreLearner) Rescore(_ context.Context, seqs [][]int) ([][]float32, error) {
	return l.score("cur", seqs, -1)
}

func (l *scoreLearner) RescoreRef(_ context.Context, seqs [][]int) ([][]float32, error) {
	return l.score("ref", seqs, -2)
}

// Two groups: group 0 has a winner (its rows carry advantages), group 1
// failed throughout (flat rows). Three steps each.
func plainTrajs() []*rollout.Trajectory {
	return []*rollout.Trajectory{
		stepTraj("a", 0, true, 3), stepTraj("b", 0, false, 3),
		stepTraj("c", 1, false, 3), stepTraj("d", 1, false, 3),
	}
}

// The plain rows are scored in the background, so SEED's analysis and the
// trainer's forward passes overlap: startPlain returns while the learner
// is still held, and the rows come out scored by the current and the
// reference policy once it is released. Every row is scored there when
// none can be dropped; with drop_flat, the flat rows are left to
// buildRows, which scores the ones kept (here, a distilled one) and never
// the dropped ones.
func TestPlainRowsScoredBesideTheAnalysis(t *testing.T) {
	for _, drop := range []string{"", DropNoSignal} {
		l := &scoreLearner{release: make(chan struct{}), started: make(chan struct{})}
		cfg := Default()
		cfg.RL.DropFlat = drop
		r := &run{cfg: cfg, learner: l, env: Env{Name: "household"}}
		// A watchdog lets the learner go if startPlain waits for it.
		watchdog := time.AfterFunc(30*time.Second, func() { close(l.release) })
		ch := r.startPlain(context.Background(), plainTrajs())
		if !watchdog.Stop() {
			t.Fatal("startPlain waited for the learner: the analysis could not run beside the scoring")
		}
		<-l.started // the scoring is under way while the caller is free
		select {
		case <-ch:
			t.Fatal("startPlain finished while the learner was held")
		default:
		}
		close(l.release)
		res := <-ch
		if res.err != nil {
			t.Fatal(res.err)
		}
		early := 12
		if drop != "" {
			early = 6 // group 1's rows are flat
		}
		want := []string{"cur:" + strings.Repeat("|", early), "ref:" + strings.Repeat("|", early)}
		if !slices.Equal(l.calls, want) {
			t.Errorf("drop %q: calls %v, want %v", drop, l.calls, want)
		}
		// A distilled flat row is kept under no_signal: buildRows scores it.
		res.set.rows[2][1].Distill = []bool{false, true}
		l.calls = nil
		vals := iterStats{}
		rows, err := r.buildRows(context.Background(), plainTrajs(), res.set, nil, vals)
		if err != nil {
			t.Fatal(err)
		}
		wantRows, late := 12, []string(nil)
		if drop != "" {
			wantRows, late = 7, []string{"cur:|", "ref:|"}
		}
		if len(rows) != wantRows || !slices.Equal(l.calls, late) {
			t.Errorf("drop %q: %d rows (want %d), later calls %v (want %v)", drop, len(rows), wantRows, l.calls, late)
		}
		for _, row := range rows {
			if row.OldLogP[1] != -1 || len(row.RefLogP) < 2 || row.RefLogP[1] != -2 {
				t.Errorf("drop %q: row %s has ℓold %v, ℓref %v: not scored", drop, row.ID, row.OldLogP, row.RefLogP)
			}
		}
		if vals["old_logp_max_gap"] != 1 { // the server's log-prob was 0
			t.Errorf("drop %q: old_logp_max_gap %v, want 1", drop, vals["old_logp_max_gap"])
		}
	}
}

// A learner failure while scoring the plain rows comes out of the channel
// as an error that says which pass failed.
func TestPlainRowsScoringFailure(t *testing.T) {
	l := &scoreLearner{started: make(chan struct{}), fail: errors.New("device lost")}
	r := &run{cfg: Default(), learner: l, env: Env{Name: "household"}}
	res := <-r.startPlain(context.Background(), plainTrajs())
	if res.err == nil || !strings.Contains(res.err.Error(), "recomputing sampling log-probs") || !strings.Contains(res.err.Error(), "device lost") {
		t.Errorf("error %v", res.err)
	}
}
