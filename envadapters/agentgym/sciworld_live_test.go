//go:build sciworld_live

package agentgym

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/seedctl/seedctl/envadapters"
)

// TestSciWorldRefusalsLive plays sciworldProbe on a real SciWorld server
// (AgentGym's agentenv-sciworld) and with -update writes what it answered
// to testdata/sciworld_refusals.json for TestSciWorldRefusals.
//
//	SEEDCTL_SCIWORLD_URL  the server (http://127.0.0.1:36002)
func TestSciWorldRefusalsLive(t *testing.T) {
	url := os.Getenv("SEEDCTL_SCIWORLD_URL")
	if url == "" {
		t.Fatal("set SEEDCTL_SCIWORLD_URL")
	}
	c, err := New(DefaultConfig(url, SciWorld))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	st, err := c.Reset(ctx, envadapters.Task{Index: sciworldProbeIndex})
	if err != nil {
		t.Fatal(err)
	}
	rec := sciworldRefusals{
		Source: "AgentGym agentenv-sciworld (WooooDyy/AgentGym@3ef9235, scienceworld 1.2.3, OpenJDK 17), played by agentgym.Client (TestSciWorldRefusalsLive)",
		Index:  sciworldProbeIndex, First: st.Observation,
	}
	for _, p := range sciworldProbe {
		s, err := c.Step(ctx, p.Action)
		if err != nil {
			t.Fatalf("%q: %v", p.Action, err)
		}
		rec.Steps = append(rec.Steps, sciworldProbeStep{Action: p.Action, Observation: s.Observation, Refused: p.Refused})
		t.Logf("%q -> %q (refused %v, read as %v)", p.Action, s.Observation, p.Refused, IsInvalid(SciWorld, s.Observation))
	}
	if *updateRecordings {
		b, _ := json.MarshalIndent(rec, "", " ")
		if err := os.WriteFile("testdata/sciworld_refusals.json", append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
