package learner

import (
	"encoding/json"
	"testing"

	"github.com/seedctl/seedctl/orchestrator"
	"github.com/seedctl/seedctl/trainer"
)

// Every statistic a step returns (trainer.RLStats as Step writes it into
// the metrics: its JSON keys, the gate bins, elapsed_s) is one of
// orchestrator.MetricKeys, with every optional part present.
func TestStepStatisticsAreCatalogued(t *testing.T) {
	one := 1.0
	st := trainer.RLStats{DecisionShiftPosAdv: &one, DecisionShiftNegAdv: &one, DecisionTeacherShift: &one, DecisionBaselineShift: &one,
		CommStats: &trainer.CommStats{}, TermGrads: &trainer.TermGrads{}}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	json.Unmarshal(b, &keys)
	delete(keys, "elapsed_ns") // Step writes it as elapsed_s
	keys["elapsed_s"] = 0
	for _, n := range trainer.GateBinNames {
		keys[n] = 0
	}
	if len(keys) < 40 {
		t.Fatalf("only %d statistics: %v", len(keys), keys)
	}
	for k := range keys {
		if !orchestrator.IsMetricKey(k) {
			t.Errorf("a step reports %q, which orchestrator.MetricKeys lacks", k)
		}
	}
}
