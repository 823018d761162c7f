package rollout

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressText(t *testing.T) {
	for _, tc := range []struct {
		name     string
		s        Status
		maxTurns int
		el       time.Duration
		want     string
	}{
		{"bounded by the step limit", Status{Done: 0, Total: 200, Turn: 5}, 20, 10 * time.Second, "eval: 0/200 episodes, turn 5/20 (10s elapsed, ETA ≤ 30s)"},
		{"past the limit", Status{Done: 3, Total: 4, Turn: 22}, 20, 11 * time.Second, "eval: 3/4 episodes, turn 22/20 (11s elapsed, ETA ≤ 0s)"},
		{"no limit: episode rate", Status{Done: 50, Total: 200, Turn: 9}, 0, 10 * time.Second, "eval: 50/200 episodes, turn 9 (10s elapsed, ETA 30s)"},
		{"no limit, nothing done", Status{Done: 0, Total: 200, Turn: 1}, 0, time.Second, "eval: 0/200 episodes, turn 1 (1s elapsed, ETA ?)"},
		{"finished", Status{Done: 200, Total: 200, Turn: 20}, 20, 100 * time.Second, "eval: 200/200 episodes in 1m40s (2.00/s)"},
		{"finished at once: no rate", Status{Done: 64, Total: 64}, 20, 3 * time.Microsecond, "eval: 64/64 episodes in 0s"},
	} {
		if got := progressText("eval", tc.s, tc.maxTurns, tc.el); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestProgressLineThrottles(t *testing.T) {
	var b bytes.Buffer
	p := ProgressLine(&b, "x", 10, time.Hour)
	p(Status{Done: 0, Total: 2, Turn: 1})
	p(Status{Done: 1, Total: 2, Turn: 2}) // within the interval: dropped
	p(Status{Done: 2, Total: 2, Turn: 3}) // the end always prints
	if n := strings.Count(b.String(), "\n"); n != 2 {
		t.Fatalf("%d lines, want 2:\n%s", n, b.String())
	}
	ProgressLine(nil, "x", 10, 0)(Status{Done: 1, Total: 1}) // nil writer: no panic
}
