package agentgym

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// babyaiRefusals is testdata/babyai_refusals.json: the real BabyAI
// server's answers to babyaiProbeAction on one task of each level
// (TestBabyAIRefusalsLive writes it).
type babyaiRefusals struct {
	Source   string          `json:"source"`
	Episodes []babyaiEpisode `json:"episodes"`
}

type babyaiEpisode struct {
	Index int          `json:"index"`
	First string       `json:"first_observation"`
	Steps []babyaiStep `json:"steps"`
}

type babyaiStep struct {
	Action      string `json:"action"`
	Observation string `json:"observation"`
}

const babyaiProbeSteps = 10

// babyaiProbeMoves are actions the levels offer only sometimes, or never:
// each is refused unless the observation before listed it.
var babyaiProbeMoves = []string{"move forward", "pickup red ball 1", "drop", "go through blue door 1",
	"toggle and go through green door 1", "go to goal", "go to yellow key 1", "fly away", "turn around", ""}

// babyaiProbeAction alternates listed actions (so the agent moves and
// sees other views) with probe moves, deterministically.
func babyaiProbeAction(idx, k int, available []string) string {
	if k%2 == 0 && len(available) > 0 {
		return available[(idx+k)%len(available)]
	}
	return babyaiProbeMoves[(idx+k/2)%len(babyaiProbeMoves)]
}

var babyaiActionList = regexp.MustCompile(`Available actions: \[(.*)\]\s*$`)

// babyaiAvailable is the action list an observation ends with.
func babyaiAvailable(obs string) []string {
	m := babyaiActionList.FindStringSubmatch(obs)
	if m == nil {
		return nil
	}
	var out []string
	for _, a := range strings.Split(m[1], ", ") {
		out = append(out, strings.Trim(a, `"`))
	}
	return out
}

// The BabyAI server refuses an action exactly when the observation before
// did not list it (environment.py's check_action_is_valid; "check …"
// always passes): the client reads a recorded answer as invalid exactly
// then — before, a view with no object in sight ("You cannot see any
// objects within sight.") read as a refusal, and the barrier's refusal of
// "move forward" as an accepted move.
func TestBabyAIRefusals(t *testing.T) {
	b, err := os.ReadFile("testdata/babyai_refusals.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec babyaiRefusals
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Episodes) != 40 {
		t.Fatalf("%d recorded episodes, want one per level (re-record: go test -tags babyai_live -run BabyAIRefusalsLive -update)", len(rec.Episodes))
	}
	steps, refused, noObjects := 0, 0, 0
	kinds := map[string]int{}
	for _, ep := range rec.Episodes {
		if err := CheckFlavor(BabyAI, ep.First); err != nil {
			t.Fatalf("index %d: %v", ep.Index, err)
		}
		if CheckFlavor(TextCraft, ep.First) == nil || CheckFlavor(ALFWorld, ep.First) == nil {
			t.Fatalf("index %d: a BabyAI observation passes as another flavor's", ep.Index)
		}
		obs := ep.First
		for k, s := range ep.Steps {
			avail := babyaiAvailable(obs)
			if want := babyaiProbeAction(ep.Index, k, avail); s.Action != want {
				t.Fatalf("index %d step %d: recorded %q, the probe says %q", ep.Index, k, s.Action, want)
			}
			a := strings.ToLower(strings.TrimSpace(s.Action))
			isRefused := !strings.Contains(a, "check") && !slices.Contains(avail, a)
			if a == "" {
				// Refused in the words of an accepted no-op: the rollout
				// counts an empty action invalid by its format.
				if !strings.HasPrefix(s.Observation, "No change in state.") {
					t.Errorf("index %d step %d: the empty action answered %q", ep.Index, k, s.Observation)
				}
				obs = s.Observation
				continue
			}
			if got := IsInvalid(BabyAI, s.Observation); got != isRefused {
				t.Errorf("index %d step %d: %q -> %q: read as invalid=%v, the server refused=%v", ep.Index, k, s.Action, s.Observation, got, isRefused)
			}
			steps++
			if isRefused {
				refused++
				kinds[strings.SplitN(strings.SplitN(s.Observation, "\n", 2)[0], ",", 2)[0]]++
			}
			if strings.HasPrefix(s.Observation, "You cannot see any objects") {
				noObjects++
			}
			obs = s.Observation
		}
	}
	if refused == 0 || refused == steps || noObjects == 0 {
		t.Errorf("the recording exercises too little: %d steps, %d refused, %d views with nothing in sight", steps, refused, noObjects)
	}
	t.Logf("%d probe steps on 40 levels, %d refused (%v); %d accepted steps see no object", steps, refused, kinds, noObjects)
}
