package rollout

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/household"
)

// BenchmarkRolloutOverhead runs household episodes against a backend that
// answers instantly (a fixed tokenized action), so what is measured is our
// own cost per episode: prompt rendering and encoding, action parsing,
// environment steps and record keeping.
//
//	go test ./rollout -run '^$' -bench RolloutOverhead
func BenchmarkRolloutOverhead(b *testing.B) {
	tok, tcfg := tinyTokenizer(b)
	eos, _ := tok.TokenID("<|im_end|>")
	be := &scriptBackend{tok: tok, eos: eos}
	p, _ := NewPolicy(be, tok, tcfg)
	env, _ := envadapters.Lookup(household.Name)
	for _, mode := range []string{ModeChat, ModeWindow} {
		b.Run(mode, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Mode, cfg.GroupSize, cfg.EnvOptions = mode, 8, envadapters.Options{"max_steps": "30"}
			r, _ := NewRunner(cfg, household.Name, env, p, zerolog.Nop())
			tasks := householdTasks(b, 4)
			b.ResetTimer()
			start := time.Now()
			eps, steps := 0, 0
			for i := 0; i < b.N; i++ {
				trajs, err := r.Run(context.Background(), tasks, i, nil)
				if err != nil {
					b.Fatal(err)
				}
				eps += len(trajs)
				for _, t := range trajs {
					steps += len(t.Steps)
				}
			}
			el := time.Since(start).Seconds()
			b.ReportMetric(float64(eps)/el, "episodes/s")
			b.ReportMetric(float64(steps)/el, "turns/s")
		})
	}
}
