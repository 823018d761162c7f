//go:build babyai_live

package agentgym

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
)

// TestBabyAIRefusalsLive plays babyaiProbe on a real BabyAI server
// (AgentGym's agentenv-babyai), on one task of each of its 40 levels, and
// with -update writes what it answered to testdata/babyai_refusals.json
// for TestBabyAIRefusals.
//
//	SEEDCTL_BABYAI_URL  the server (http://127.0.0.1:36003)
func TestBabyAIRefusalsLive(t *testing.T) {
	url := os.Getenv("SEEDCTL_BABYAI_URL")
	if url == "" {
		t.Fatal("set SEEDCTL_BABYAI_URL")
	}
	c, err := New(DefaultConfig(url, BabyAI))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	rec := babyaiRefusals{Source: "AgentGym agentenv-babyai (WooooDyy/AgentGym@3ef9235, minigrid<2.5, gymnasium<1), played by agentgym.Client (TestBabyAIRefusalsLive)"}
	for idx := range 40 {
		st, err := c.Reset(ctx, envadapters.Task{Index: idx})
		if err != nil {
			t.Fatal(err)
		}
		ep := babyaiEpisode{Index: idx, First: st.Observation}
		obs := st.Observation
		for k := range babyaiProbeSteps {
			a := babyaiProbeAction(idx, k, babyaiAvailable(obs))
			s, err := c.Step(ctx, a)
			if err != nil {
				t.Fatalf("index %d %q: %v", idx, a, err)
			}
			ep.Steps = append(ep.Steps, babyaiStep{Action: a, Observation: s.Observation})
			obs = s.Observation
			if s.Done {
				break
			}
		}
		rec.Episodes = append(rec.Episodes, ep)
	}
	if *updateRecordings {
		b, _ := json.MarshalIndent(rec, "", " ")
		if err := os.WriteFile("testdata/babyai_refusals.json", append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
