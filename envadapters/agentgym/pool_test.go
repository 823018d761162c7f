package agentgym

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	_ "github.com/seedctl/seedctl/envadapters/household"
)

// countingServer is an AgentGym-like server that counts creates, resets
// and closes, and answers /close for an unknown id with HTTP 500, as
// SciWorld's does (testdata/recordings/sciworld-POST_close.json).
type countingServer struct {
	mu                      sync.Mutex
	next                    int
	live                    map[int]bool
	creates, resets, closes int
	badCloses               int
}

func (s *countingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	b, _ := io.ReadAll(r.Body)
	json.Unmarshal(b, &body)
	s.mu.Lock()
	defer s.mu.Unlock()
	id := -1
	if v, ok := body["id"].(float64); ok {
		id = int(v)
	}
	switch r.URL.Path {
	case "/create":
		s.creates++
		s.live[s.next] = true
		fmt.Fprintf(w, `{"id": %d}`, s.next)
		s.next++
	case "/reset":
		s.resets++
		fmt.Fprint(w, `{"observation": "Your task is to boil water.", "reward": 0, "score": 0, "done": false}`)
	case "/step":
		fmt.Fprint(w, `{"observation": "No known action matches that input.", "reward": 0, "score": 0, "done": false}`)
	case "/close":
		if !s.live[id] {
			s.badCloses++
			w.WriteHeader(500)
			fmt.Fprint(w, "Internal Server Error")
			return
		}
		delete(s.live, id)
		s.closes++
		fmt.Fprint(w, "true")
	}
}

// N episodes played P at a time over a pool make at most P creates; the
// pool's Close releases each env once, where the flavor has /close.
func TestPoolReusesEnvs(t *testing.T) {
	for _, flavor := range []string{SciWorld, ALFWorld} {
		t.Run(flavor, func(t *testing.T) {
			s := &countingServer{live: map[int]bool{}}
			hs := httptest.NewServer(s)
			defer hs.Close()
			p, err := NewPool(DefaultConfig(hs.URL, flavor))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const rounds, concurrent = 5, 4
			for r := 0; r < rounds; r++ {
				var envs []envadapters.Env
				for i := 0; i < concurrent; i++ {
					e, err := p.New(nil)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := e.Reset(ctx, envadapters.Task{Index: r*concurrent + i}); err != nil {
						t.Fatal(err)
					}
					if _, err := e.Step(ctx, "look around"); err != nil {
						t.Fatal(err)
					}
					envs = append(envs, e)
				}
				for _, e := range envs {
					if err := e.Close(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if s.creates != concurrent || s.resets != rounds*concurrent || s.closes != 0 {
				t.Fatalf("%d episodes, %d at a time: %d creates, %d resets, %d closes before the end", rounds*concurrent, concurrent, s.creates, s.resets, s.closes)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			wantCloses := concurrent
			if flavor == ALFWorld {
				wantCloses = 0 // AgentGym's ALFWorld server has no /close
			}
			if s.closes != wantCloses || s.badCloses != 0 {
				t.Errorf("pool close: %d closes (want %d), %d of unknown ids", s.closes, wantCloses, s.badCloses)
			}
		})
	}
}

// A close the server refuses (HTTP 500 for an unknown id, recorded on
// SciWorld) is sent once, not retried as an outage.
func TestCloseIsNotRetried(t *testing.T) {
	raw, err := os.ReadFile("testdata/recordings/sciworld-POST_close.json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"status": 500`) {
		t.Fatal("the recording shows no refused close")
	}
	s := &countingServer{live: map[int]bool{}}
	hs := httptest.NewServer(s)
	defer hs.Close()
	c, _ := New(DefaultConfig(hs.URL, SciWorld))
	ctx := context.Background()
	if _, err := c.Reset(ctx, envadapters.Task{Index: 1}); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.live = map[int]bool{} // the server lost the env
	s.mu.Unlock()
	err = c.Close()
	if err == nil || !strings.Contains(err.Error(), "HTTP 500") {
		t.Fatalf("closing an env the server lost: %v", err)
	}
	if s.badCloses != 1 {
		t.Errorf("the refused close was sent %d times", s.badCloses)
	}
}

// seedctl env serve's envs: random ids (a client cannot reach another's
// by counting), a per-client cap, and idle envs closed.
func TestServerEnvIDsCapsAndExpiry(t *testing.T) {
	b, err := envadapters.Lookup("household")
	if err != nil {
		t.Skip("household not registered in this test binary")
	}
	s, err := NewServer(b, envadapters.Train, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	s.perClient = 3
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	// createAs creates an env, sending key in ClientKeyHeader unless "".
	createAs := func(key string) (int, string) {
		req, _ := http.NewRequest("POST", hs.URL+"/create", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set(ClientKeyHeader, key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v struct {
			ID    *int   `json:"id"`
			Error string `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&v)
		if v.ID == nil {
			return -1, v.Error
		}
		return *v.ID, ""
	}
	create := func() (int, string) { return createAs("") }
	ids := map[int]bool{}
	sequential := true
	prev := -1
	for i := 0; i < 3; i++ {
		id, e := create()
		if e != "" {
			t.Fatalf("create %d: %s", i, e)
		}
		ids[id] = true
		sequential = sequential && (prev < 0 || id == prev+1)
		prev = id
	}
	if len(ids) != 3 || sequential {
		t.Errorf("ids %v: want three distinct, not counted up", ids)
	}
	if _, e := create(); !strings.Contains(e, "per client") {
		t.Errorf("a fourth env for one client: %q, want the per-client cap", e)
	}
	// Another program on the same host, with its own key, is not locked
	// out by the first one's full budget; its own budget holds too.
	keyed := func(key string) string {
		id, e := createAs(key)
		if id >= 0 {
			ids[id] = true
		}
		return e
	}
	for i := 0; i < 3; i++ {
		if e := keyed("trainer-b"); e != "" {
			t.Fatalf("keyed create %d beside a full keyless budget: %s", i, e)
		}
	}
	if e := keyed("trainer-b"); !strings.Contains(e, "per client") {
		t.Errorf("a fourth env for the keyed client: %q, want the per-client cap", e)
	}
	// Idle envs are closed at the next create.
	s.idleExpiry = time.Millisecond
	time.Sleep(5 * time.Millisecond)
	if _, e := create(); e != "" {
		t.Fatalf("create after the others expired: %s", e)
	}
	for id := range ids {
		resp, _ := http.Post(hs.URL+"/step", "application/json", strings.NewReader(fmt.Sprintf(`{"id": %d, "action": "look"}`, id)))
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if e, _ := v["error"].(string); !strings.Contains(e, "no environment") {
			t.Errorf("env %d after its idle expiry: %v", id, v)
		}
	}
}

// seedctl's client sends this process's key, so env serve counts it apart
// from other programs at the same address.
func TestClientSendsItsKey(t *testing.T) {
	var keys []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get(ClientKeyHeader))
		json.NewEncoder(w).Encode(map[string]any{"id": 1, "observation": "Crafting commands:\n\nGoal: craft x.", "done": false, "reward": 0})
	}))
	defer hs.Close()
	c, err := New(DefaultConfig(hs.URL, TextCraft))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reset(context.Background(), envadapters.Task{Index: 3}); err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 || keys[0] == "" || len(keys[0]) > 64 {
		t.Fatalf("keys sent: %q", keys)
	}
	for _, k := range keys {
		if k != keys[0] {
			t.Errorf("one process sent two keys: %q", keys)
		}
	}
}
