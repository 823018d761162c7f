package rollout

import (
	"math"
	"testing"
)

// TestReturns checks discounted returns worked by hand: rewards 0, 1, 2
// at γ = 0.5 give G = 0 + 0.5·(1 + 0.5·2) = 1, 1 + 0.5·2 = 2, and 2; a
// reward function replaces the environment's rewards.
func TestReturns(t *testing.T) {
	tr := &Trajectory{Steps: []Step{{Reward: 0}, {Reward: 1}, {Reward: 2}}}
	cases := []struct {
		name   string
		reward func(int, Step) float64
		want   []float64
	}{
		{"env rewards", nil, []float64{1, 2, 2}},
		{"last step only", func(i int, _ Step) float64 {
			if i == 2 {
				return 4
			}
			return 0
		}, []float64{1, 2, 4}},
		{"a charge per step", func(int, Step) float64 { return -1 }, []float64{-1.75, -1.5, -1}},
	}
	for _, c := range cases {
		got := tr.Returns(0.5, c.reward)
		for i := range c.want {
			if math.Abs(got[i]-c.want[i]) > 1e-12 {
				t.Errorf("%s: returns %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
	if got := (&Trajectory{}).Returns(0.9, nil); len(got) != 0 {
		t.Errorf("no steps: %v", got)
	}
}
