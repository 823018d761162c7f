package skills

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/inference"
)

// TestExternalAnalyzer talks to a fake hosted chat model that first answers
// in prose (so the repair prompt goes out once) and then in JSON.
func TestExternalAnalyzer(t *testing.T) {
	var calls, repairs atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		content := "The agent should try harder."
		if strings.Contains(req.Messages[0].Content, "could not be used") {
			repairs.Add(1)
			content = "```json\n{\"episode_summary\": \"went around\", \"episode_skill\": \"Open the fridge before looking elsewhere.\", \"step_skills\": {\"1\": \"Go to the fridge right now please.\"}}\n```"
		}
		json.NewEncoder(w).Encode(map[string]any{"id": "c", "object": "chat.completion", "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": content}, "finish_reason": "stop"}}})
	}))
	defer srv.Close()
	client, err := inference.NewChatClient(inference.DefaultChatConfig(srv.URL+"/v1", "big-analyzer"), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	an := &ExternalAnalyzer{Client: client, K: 5, MaxTokens: 256, Model: "big-analyzer"}
	recs, err := an.Analyze(context.Background(), []Request{{Traj: trajFor("a", false, 3), Candidates: []int{1}}, {Traj: trajFor("b", false, 3), Candidates: []int{2}}})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 4 || repairs.Load() != 2 {
		t.Fatalf("%d calls, %d repairs; want 2 + 2", calls.Load(), repairs.Load())
	}
	if recs[0].Skill == nil || recs[0].Skill.StepSkills[1] == "" || recs[0].Snapshot != "big-analyzer" || !recs[0].Repaired {
		t.Errorf("record a: %+v", recs[0])
	}
	// Step 1 is not a candidate for b, so its step skill is dropped.
	if recs[1].Skill == nil || len(recs[1].Skill.StepSkills) != 0 {
		t.Errorf("record b: %+v", recs[1].Skill)
	}
}
