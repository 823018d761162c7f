package rollout

import (
	"fmt"
	"io"
	"time"
)

// Status is a rollout's progress after a turn. Turns are synchronous across
// episodes, so Turn also bounds what is left: no episode runs past the
// environment's step limit.
type Status struct {
	Done, Total int // episodes finished, episodes in all
	Turn        int // turns played so far
}

// Progress is called after every turn.
type Progress func(Status)

// ProgressLine prints "label: done/total episodes, turn t/max (ETA ≤ …)" to
// w at most once per every (and always at the end). maxTurns is the step
// limit of the episodes (0 when unknown): since every episode ends by then,
// the time per turn so far gives an upper bound on what is left, which the
// episode rate cannot (episodes of one batch tend to finish together, late).
// A nil w gives a Progress that prints nothing.
func ProgressLine(w io.Writer, label string, maxTurns int, every time.Duration) Progress {
	start, last := time.Now(), time.Time{}
	return func(s Status) {
		if w == nil || (time.Since(last) < every && s.Done < s.Total) {
			return
		}
		last = time.Now()
		fmt.Fprintln(w, progressText(label, s, maxTurns, time.Since(start)))
	}
}

func progressText(label string, s Status, maxTurns int, el time.Duration) string {
	round := func(d time.Duration) string { return d.Round(time.Second).String() }
	switch {
	case s.Done >= s.Total && el < time.Second:
		// Work already done (cached skills): a rate would be noise.
		return fmt.Sprintf("%s: %d/%d episodes in %s", label, s.Done, s.Total, el.Round(time.Millisecond))
	case s.Done >= s.Total:
		return fmt.Sprintf("%s: %d/%d episodes in %s (%.2f/s)", label, s.Done, s.Total, round(el), float64(s.Done)/el.Seconds())
	case maxTurns > 0 && s.Turn > 0:
		left := time.Duration(float64(el) / float64(s.Turn) * float64(max(maxTurns-s.Turn, 0)))
		return fmt.Sprintf("%s: %d/%d episodes, turn %d/%d (%s elapsed, ETA ≤ %s)", label, s.Done, s.Total, s.Turn, maxTurns, round(el), round(left))
	case s.Done > 0:
		left := time.Duration(float64(el) / float64(s.Done) * float64(s.Total-s.Done))
		return fmt.Sprintf("%s: %d/%d episodes, turn %d (%s elapsed, ETA %s)", label, s.Done, s.Total, s.Turn, round(el), round(left))
	default:
		return fmt.Sprintf("%s: %d/%d episodes, turn %d (%s elapsed, ETA ?)", label, s.Done, s.Total, s.Turn, round(el))
	}
}
