package agentgym

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/household"
	_ "github.com/seedctl/seedctl/envadapters/webshop"
)

func householdServer(t *testing.T) *httptest.Server {
	t.Helper()
	b, err := envadapters.Lookup(household.Name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(b, envadapters.EvalSeen, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs
}

// TestClientAgainstOwnServer plays expert episodes through the protocol:
// our client, our server, the household built-in behind it.
func TestClientAgainstOwnServer(t *testing.T) {
	hs := householdServer(t)
	b, _ := envadapters.Lookup(household.Name)
	tasks, _ := b.Tasks(envadapters.EvalSeen, 12)
	ctx := context.Background()
	c, err := New(DefaultConfig(hs.URL, ALFWorld))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local, _ := b.New(nil)
	for _, task := range tasks {
		remote, err := c.Reset(ctx, envadapters.Task{Index: task.Index})
		if err != nil {
			t.Fatal(err)
		}
		lst, _ := local.Reset(ctx, task)
		if remote.Observation != lst.Observation || strings.Join(remote.Admissible, "|") != strings.Join(lst.Admissible, "|") {
			t.Fatalf("task %d: remote reset differs from local", task.Index)
		}
		x, _ := b.Expert(local)
		for !lst.Done {
			a, err := x.Act()
			if err != nil {
				t.Fatal(err)
			}
			lst, _ = local.Step(ctx, a)
			rst, err := c.Step(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			if rst.Observation != lst.Observation || rst.Done != lst.Done || rst.Reward != lst.Reward {
				t.Fatalf("task %d, %q: remote %+v, local %+v", task.Index, a, rst, lst)
			}
		}
		if !lst.Won {
			t.Fatalf("task %d not won", task.Index)
		}
	}
}

func postJSON(t *testing.T, url, body string) map[string]any {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: HTTP %d", url, resp.StatusCode)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestServerDocumentedJSON: seedctl env serve answers, in the ALFWorld
// dialect, with the shapes AgentGym's ALFWorld server answers (the
// transcribed exchanges in testdata), and names what is wrong in bad
// requests.
func TestServerDocumentedJSON(t *testing.T) {
	hs := householdServer(t)
	rp := &replayer{t: t, base: hs.URL}
	for _, e := range exchanges(t, "alfworld") {
		got := rp.do(e)
		if kind(got) != kind(e.Response) {
			t.Errorf("%s %s: answer %s has shape %s, AgentGym's %s", e.Method, e.Path, got, kind(got), kind(e.Response))
		}
	}
	id := strconv.Itoa(rp.id)
	s := postJSON(t, hs.URL+"/step", `{"id": `+id+`, "action": "fly to the moon"}`)
	if s["observation"] != household.NothingHappens {
		t.Errorf("garbage action → %v", s)
	}
	for _, bad := range []struct{ path, body, want string }{
		{"/step", `{"id": 42, "action": "look"}`, "no environment with id 42"},
		{"/reset", `{"id": ` + id + `, "game": 999999}`, "game must be in"},
		{"/reset", `{"id": ` + id + `, "game": 1, "world_type": "Embody"}`, "text worlds"},
		{"/step", `{"id": ` + id, "malformed JSON"},
		{"/step", `{"id": ` + id + `}`, "missing action"},
	} {
		out := postJSON(t, hs.URL+bad.path, bad.body)
		if e, _ := out["error"].(string); !strings.Contains(e, bad.want) {
			t.Errorf("%s %s → %v; want error %q", bad.path, bad.body, out, bad.want)
		}
	}
	if out := postJSON(t, hs.URL+"/close", `{"id": `+id+`}`); out["closed"] != true {
		t.Errorf("/close → %v", out)
	}
}

// replayer sends transcribed requests to a server whose env ids are its
// own (seedctl's are random): the recorded id 0 becomes the id the
// server's /create answered.
type replayer struct {
	t    *testing.T
	base string
	id   int
}

var recordedID = regexp.MustCompile(`("id"|"env_idx"): ?0\b|([?&](?:id|env_idx))=0\b`)

// do sends one transcribed request and returns the raw answer.
func (r *replayer) do(e exchange) []byte {
	r.t.Helper()
	swap := func(s string) string {
		return recordedID.ReplaceAllStringFunc(s, func(m string) string {
			return m[:len(m)-1] + strconv.Itoa(r.id)
		})
	}
	var resp *http.Response
	var err error
	if e.Method == "GET" {
		resp, err = http.Get(r.base + swap(e.Path))
	} else {
		resp, err = http.Post(r.base+e.Path, "application/json", strings.NewReader(swap(string(e.Body))))
	}
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if e.Path == "/create" {
		var v struct {
			ID *int `json:"id"`
		}
		var n int
		if json.Unmarshal(got, &n) == nil {
			r.id = n
		} else if json.Unmarshal(got, &v) == nil && v.ID != nil {
			r.id = *v.ID
		}
	}
	return got
}

// replay is a server that answers from transcribed exchanges, in their
// order: each request must match (method, path, body shape) an exchange
// at or after the last one answered.
func replay(t *testing.T, ex []exchange) *httptest.Server {
	next := 0
	var mu sync.Mutex
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		path := r.URL.Path
		if r.URL.RawQuery != "" {
			path += "?" + r.URL.RawQuery
		}
		for i := next; i < len(ex); i++ {
			e := ex[i]
			if e.Method == r.Method && e.Path == path && (e.Body == nil || kind(e.Body) == kind(body)) {
				next = i + 1
				w.Write(e.Response)
				return
			}
		}
		w.Write([]byte(`{"error": "unexpected request"}`))
		t.Errorf("unexpected request %s %s %s", r.Method, path, body)
	}))
}

// seedctl's client against AgentGym's ALFWorld and SciWorld servers.
func TestClientSpeaksAgentGymALFWorldAndSciWorld(t *testing.T) {
	ctx := context.Background()
	hs := replay(t, exchanges(t, "alfworld"))
	defer hs.Close()
	c, _ := New(DefaultConfig(hs.URL, ALFWorld))
	st, err := c.Reset(ctx, envadapters.Task{Index: 3})
	if err != nil || !strings.Contains(st.Observation, "Your task is to: put a cool mug in cabinet.") || len(st.Admissible) != 5 {
		t.Fatalf("alfworld reset %+v %v", st, err)
	}
	if st, err = c.Step(ctx, "go to fridge 1"); err != nil || st.Done || len(st.Admissible) != 4 {
		t.Fatalf("alfworld step %+v %v", st, err)
	}
	// SciWorld, recorded live (the gold path of data_idx 300): the task
	// description first, multi-line observations with tabs, a win at 100.
	sw := replay(t, exchanges(t, "sciworld"))
	defer sw.Close()
	c, _ = New(DefaultConfig(sw.URL, SciWorld))
	st, err = c.Reset(ctx, envadapters.Task{Index: 300})
	if err != nil || !strings.HasPrefix(st.Observation, "Your task is to measure the temperature of unknown substance B") || !strings.Contains(st.Observation, "\n\tthe agent") {
		t.Fatalf("sciworld reset %+v %v", st, err)
	}
	var steps []exchange
	for _, e := range exchanges(t, "sciworld") {
		if e.Path == "/step" {
			steps = append(steps, e)
		}
	}
	for i, e := range steps[:len(steps)-1] {
		var b struct{ Action string }
		json.Unmarshal(e.Body, &b)
		st, err = c.Step(ctx, b.Action)
		last := i == len(steps)-2
		if err != nil || st.Done != last || st.Won != last || st.Invalid {
			t.Fatalf("sciworld step %d %q: %+v %v", i, b.Action, st, err)
		}
	}
	if st.Score != 100 {
		t.Errorf("sciworld final score %v, want 100", st.Score)
	}
	// The server's {"error"} after the end ends the episode as failed, kept.
	if st, err = c.Step(ctx, "inventory"); err != nil || !st.Done || st.Err == "" {
		t.Fatalf("step after the end %+v %v", st, err)
	}
}

// flaky is an AgentGym-like server that misbehaves on demand.
type flaky struct {
	dropFirst  atomic.Int32 // close the connection without answering
	hangFirst  atomic.Int32 // answer after the client's timeout
	errorReset bool         // {"error": ...} with HTTP 200 on /reset
	alwaysDrop bool
	calls      atomic.Int32
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	io.Copy(io.Discard, r.Body)
	if f.alwaysDrop || f.dropFirst.Add(-1) >= 0 {
		hj, _ := w.(http.Hijacker)
		conn, _, _ := hj.Hijack()
		conn.Close()
		return
	}
	if f.hangFirst.Add(-1) >= 0 {
		time.Sleep(600 * time.Millisecond)
	}
	switch r.URL.Path {
	case "/create":
		w.Write([]byte(`{"id": 7}`))
	case "/reset":
		if f.errorReset {
			w.Write([]byte(`{"error": "game 5 does not exist"}`))
			return
		}
		w.Write([]byte(`{"observation": "You are in the middle of a room.", "available_actions": ["look"], "task_type": "pick_and_place"}`))
	case "/step":
		w.Write([]byte(`{"observation": "Nothing happens.", "reward": 0, "available_actions": ["look"], "done": false}`))
	default:
		w.Write([]byte(`{}`))
	}
}

func TestClientRetriesThenFailsTheEpisode(t *testing.T) {
	f := &flaky{}
	hs := httptest.NewServer(f)
	defer hs.Close()
	cfg := DefaultConfig(hs.URL, ALFWorld)
	cfg.Timeout, cfg.RetryFor = 300*time.Millisecond, 3*time.Second
	c, _ := New(cfg)
	ctx := context.Background()

	f.dropFirst.Store(2) // two dropped connections, then fine
	st, err := c.Reset(ctx, envadapters.Task{Index: 5})
	if err != nil || st.Observation != "You are in the middle of a room." {
		t.Fatalf("reset after dropped connections: %+v %v", st, err)
	}
	f.hangFirst.Store(1) // one timeout, then fine
	st, err = c.Step(ctx, "look")
	if err != nil || !st.Invalid || st.Done {
		t.Fatalf("step after a timeout: %+v %v", st, err)
	}

	f.alwaysDrop = true
	cfg.RetryFor = 500 * time.Millisecond
	c.cfg = cfg
	st, err = c.Step(ctx, "look")
	if err != nil {
		t.Fatalf("a dead server must end the episode, not return an error: %v", err)
	}
	if !st.Done || st.Won || st.Err == "" || !strings.Contains(st.Err, hs.URL) {
		t.Fatalf("dead server: %+v", st)
	}

	f.alwaysDrop = false
	f.errorReset = true
	c2, _ := New(DefaultConfig(hs.URL, ALFWorld))
	if _, err := c2.Reset(ctx, envadapters.Task{Index: 5}); err == nil || !strings.Contains(err.Error(), "game 5 does not exist") {
		t.Fatalf("error JSON with HTTP 200: %v", err)
	}
}

func TestWebShopFlavor(t *testing.T) {
	var lastStep map[string]any
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/create":
			w.Write([]byte(`3`))
		case "/reset":
			w.Write([]byte(`{"state": "WebShop [SEP] Instruction: [SEP] i need red shoes [SEP] Search"}`))
		case "/available_actions":
			if r.URL.Query().Get("env_idx") != "3" {
				w.Write([]byte(`{"error": "bad env_idx"}`))
				return
			}
			w.Write([]byte(`{"has_search_bar": false, "clickables": ["buy now", "< prev"]}`))
		case "/step":
			json.Unmarshal(body, &lastStep)
			w.Write([]byte(`{"state": "Thank you for shopping", "reward": 0.75, "done": true, "info": null}`))
		}
	}))
	defer hs.Close()
	c, _ := New(DefaultConfig(hs.URL, WebShop))
	ctx := context.Background()
	st, err := c.Reset(ctx, envadapters.Task{Index: 11})
	if err != nil || !strings.Contains(st.Observation, "red shoes") || strings.Join(st.Admissible, "|") != "click[buy now]|click[< prev]" {
		t.Fatalf("reset %+v %v", st, err)
	}
	st, err = c.Step(ctx, "click[buy now]")
	if err != nil || !st.Done || st.Won || st.Score != 75 {
		t.Fatalf("step %+v %v", st, err)
	}
	if lastStep["env_idx"] != float64(3) || lastStep["action"] != "click[buy now]" {
		t.Errorf("step body %v", lastStep)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Flavor: ALFWorld, Timeout: 1}, {BaseURL: "http://x", Flavor: "minigrid", Timeout: 1}, {BaseURL: "http://x", Flavor: ALFWorld}} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}

}

func TestSciWorldFlavor(t *testing.T) {
	var resetBody map[string]any
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/create":
			w.Write([]byte(`{"id": 2}`))
		case "/reset":
			json.Unmarshal(body, &resetBody)
			w.Write([]byte(`{"observation": "This room is called the kitchen.", "task_description": "Your task is to boil water.", "available_actions": ["look around", "open door"]}`))
		case "/step":
			w.Write([]byte(`{"observation": "You boil the water.", "reward": 1, "score": 100, "done": true}`))
		}
	}))
	defer hs.Close()
	c, _ := New(DefaultConfig(hs.URL, SciWorld))
	ctx := context.Background()
	st, err := c.Reset(ctx, envadapters.Task{Index: 4})
	if err != nil || st.Observation != "Your task is to boil water.\nThis room is called the kitchen." || len(st.Admissible) != 2 {
		t.Fatalf("reset %+v %v", st, err)
	}
	if resetBody["id"] != float64(2) || resetBody["data_idx"] != float64(4) {
		t.Errorf("reset body %v", resetBody)
	}
	st, err = c.Step(ctx, "boil water")
	if err != nil || !st.Done || !st.Won || st.Score != 100 {
		t.Fatalf("step %+v %v", st, err)
	}
}

type exchange struct {
	Method   string          `json:"method"`
	Path     string          `json:"path"`
	Body     json.RawMessage `json:"body"`
	Response json.RawMessage `json:"response"`
}

func webshopExchanges(t *testing.T) []exchange { return exchanges(t, "webshop") }

// exchanges reads testdata/<env>_exchange.json.
func exchanges(t *testing.T, env string) []exchange {
	t.Helper()
	b, err := os.ReadFile("testdata/" + env + "_exchange.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Exchanges []exchange `json:"exchanges"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f.Exchanges
}

// kind describes a JSON value's shape: its type, and an object's keys
// with their shapes (values may differ, shapes may not).
func kind(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "invalid"
	}
	var walk func(v any) string
	walk = func(v any) string {
		switch x := v.(type) {
		case nil:
			return "null"
		case string:
			return "string"
		case float64:
			return "number"
		case bool:
			return "bool"
		case []any:
			parts := make([]string, len(x))
			for i, e := range x {
				parts[i] = walk(e)
			}
			if len(parts) > 2 { // lists of one kind: the first two say it
				parts = parts[:2]
			}
			return "[" + strings.Join(parts, ",") + "]"
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for i, k := range keys {
				keys[i] = k + ":" + walk(x[k])
			}
			return "{" + strings.Join(keys, ",") + "}"
		}
		return "?"
	}
	return walk(v)
}

// seedctl's client against AgentGym's WebShop server dialect: the bare
// integer of /create, reset's [observation, null], the state of /step.
func TestClientSpeaksAgentGymWebShop(t *testing.T) {
	ex := webshopExchanges(t)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		path := r.URL.Path
		if r.URL.RawQuery != "" {
			path += "?" + r.URL.RawQuery
		}
		for _, e := range ex {
			if e.Method == r.Method && e.Path == path && (e.Body == nil || kind(e.Body) == kind(body)) {
				w.Write(e.Response)
				return
			}
		}
		w.Write([]byte(`{"error": "unexpected request"}`))
		t.Errorf("unexpected request %s %s %s", r.Method, path, body)
	}))
	defer hs.Close()
	c, _ := New(DefaultConfig(hs.URL, WebShop))
	ctx := context.Background()
	st, err := c.Reset(ctx, envadapters.Task{Index: 3})
	if err != nil || !strings.Contains(st.Observation, "red cotton shirt") || strings.Join(st.Admissible, "|") != "search[<your query>]|click[search]" {
		t.Fatalf("reset %+v %v", st, err)
	}
	st, err = c.Step(ctx, "search[red cotton shirt]")
	if err != nil || st.Done || !strings.Contains(st.Observation, "B09ABC") {
		t.Fatalf("step %+v %v", st, err)
	}
	if obs, err := c.observation(ctx); err != nil || !strings.Contains(obs, "Red Cotton Shirt") {
		t.Errorf("bare-string observation: %q %v", obs, err)
	}
}

// seedctl env serve in the WebShop dialect answers AgentGym's WebShop
// client with the shapes that client reads, and our own client plays a
// whole episode against it.
func TestServerSpeaksAgentGymWebShop(t *testing.T) {
	b, err := envadapters.Lookup("webshop")
	if err != nil {
		t.Skip("webshop not registered in this test binary")
	}
	s, err := NewServer(b, envadapters.Train, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	rp := &replayer{t: t, base: hs.URL}
	for _, e := range webshopExchanges(t) {
		got := rp.do(e)
		if kind(got) != kind(e.Response) {
			t.Errorf("%s %s: answer %s has shape %s, AgentGym's %s", e.Method, e.Path, got, kind(got), kind(e.Response))
		}
	}
	// A step after the episode ended is an error, as AgentGym's servers answer.
	c, _ := New(DefaultConfig(hs.URL, WebShop))
	ctx := context.Background()
	st, err := c.Reset(ctx, envadapters.Task{Index: 1})
	if err != nil || st.Observation == "" || len(st.Admissible) == 0 {
		t.Fatalf("reset %+v %v", st, err)
	}
	for i := 0; i < 30 && !st.Done; i++ {
		if st, err = c.Step(ctx, st.Admissible[len(st.Admissible)-1]); err != nil {
			t.Fatal(err)
		}
	}
	if !st.Done {
		t.Skip("episode did not end in 30 steps")
	}
	raw := postJSON(t, hs.URL+"/step", fmt.Sprintf(`{"env_idx": %d, "action": "click[buy now]"}`, *c.id))
	if raw["error"] == nil {
		t.Errorf("a step after the end answered %v, want an error", raw)
	}
}

// seedctl's client against AgentGym's TextCraft server, recorded live:
// the goal is in the reset observation, one env is reset for a second
// task, crafting the goal item wins.
func TestClientSpeaksAgentGymTextCraft(t *testing.T) {
	ctx := context.Background()
	hs := replay(t, exchanges(t, "textcraft"))
	defer hs.Close()
	c, err := New(DefaultConfig(hs.URL, TextCraft))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range []struct {
		index   int
		goal    string
		actions []string
	}{
		{0, "Goal: craft light blue dye.", []string{"get 1 blue orchid", "craft 1 light blue dye using 1 blue orchid"}},
		{1, "Goal: craft emerald block.", []string{"get 9 emerald", "craft 1 emerald block using 9 emerald"}},
	} {
		st, err := c.Reset(ctx, envadapters.Task{Index: task.index})
		if err != nil || !strings.Contains(st.Observation, task.goal) || st.Done {
			t.Fatalf("reset %d: %+v %v", task.index, st, err)
		}
		for i, a := range task.actions {
			st, err = c.Step(ctx, a)
			last := i == len(task.actions)-1
			if err != nil || st.Invalid || st.Done != last || st.Won != last {
				t.Errorf("task %d step %q: %+v %v", task.index, a, st, err)
			}
		}
		if _, err := c.Step(ctx, "inventory"); err != nil {
			t.Fatal(err)
		}
	}
}

// driverEpisode is one episode of testdata/recordings/*-driver-*.json:
// seedctl's client driving a real server, with what it returned.
type driverEpisode struct {
	Task  int      `json:"task"`
	Acts  []string `json:"actions"`
	Steps []struct {
		Observation string  `json:"observation"`
		Reward      float64 `json:"reward"`
		Done        bool    `json:"done"`
		Won         bool    `json:"won"`
		Score       float64 `json:"score"`
	} `json:"steps"`
}

// Each flavor's invalid-action messages, checked on every observation its
// real server answered: the ones in the table are flagged, the rest not.
func TestInvalidActionsPerFlavorOnRecordings(t *testing.T) {
	want := map[string]map[string]bool{
		SciWorld:  {"No known action matches that input.": true, "It's not clear how to get there from here.": true, "The door is not open.": true},
		TextCraft: {"Could not find enough items to craft minecraft:golden_carrot": true, "Could not find enough items to craft minecraft:gold_ingot": true},
	}
	seen := map[string]map[bool]int{}
	for _, f := range []string{"sciworld-driver-random.json", "sciworld-driver-focus-fail.json", "textcraft-driver-random.json"} {
		flavor := strings.SplitN(f, "-", 2)[0]
		b, err := os.ReadFile("testdata/recordings/" + f)
		if err != nil {
			t.Fatal(err)
		}
		var eps []driverEpisode
		if err := json.Unmarshal(b, &eps); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, ep := range eps {
			for i, st := range ep.Steps {
				if strings.HasPrefix(st.Observation, "The environment failed") {
					continue
				}
				w := want[flavor][strings.TrimSpace(st.Observation)]
				if got := IsInvalid(flavor, st.Observation); got != w {
					t.Errorf("%s task %d step %d %q: invalid %v, want %v", f, ep.Task, i, st.Observation, got, w)
				}
				if seen[flavor] == nil {
					seen[flavor] = map[bool]int{}
				}
				seen[flavor][w]++
			}
		}
	}
	for _, fl := range []string{SciWorld, TextCraft} {
		if seen[fl][true] == 0 || seen[fl][false] == 0 {
			t.Errorf("%s: the recordings gave %d invalid and %d valid observations; the test needs both", fl, seen[fl][true], seen[fl][false])
		}
	}
	// The flavors without recordings here, from their servers' code.
	for _, c := range []struct {
		flavor, obs string
		want        bool
	}{
		{ALFWorld, "Nothing happens.", true},
		{ALFWorld, "You arrive at cabinet 1.", false},
		{BabyAI, "The action is not recognized. Please check valid actions.", true},
		{BabyAI, "In front of you in this room, you can see several objects", false},
		// BabyAI's refusals beyond testdata/babyai_refusals.json, in
		// environment.py's words, and answers that only look alike.
		{BabyAI, "You cannot pickup red ball 1, as there is no path leading to it.", true},
		{BabyAI, "You cannot toggle and go through red door 1, as you are not carrying a key.", true},
		{BabyAI, "You cannot go to goal, as there is no path leading to it.", true},
		{BabyAI, "There is a barrier in front of you, you can't move forward.", true},
		{BabyAI, "You cannot see any objects within sight.The room has walls around you.", false},
		{BabyAI, "No change in state.", false},
		// The real SciWorld server's refusals beyond the recordings
		// ([textcraft] 5, DESIGN.md §6), and answers that only look alike.
		{SciWorld, "The sink is not openable.", true},
		{SciWorld, "The apple is not edible.", true},
		{SciWorld, "The thermometer is not something that can be activated.", true},
		{SciWorld, "I'm not sure what you mean.", true},
		{SciWorld, "It's not clear what the object is.", true},
		{SciWorld, "You can't move that.", true},
		{SciWorld, "The stove is now activated.", false},
		{SciWorld, "The freezer is now open.", false},
		{WebShop, "Nothing happens.", false},
	} {
		if got := IsInvalid(c.flavor, c.obs); got != c.want {
			t.Errorf("%s %q: invalid %v, want %v", c.flavor, c.obs, got, c.want)
		}
	}
}

// A wrong focus on SciWorld (recorded) scores -100 and ends the episode,
// lost.
func TestSciWorldWrongFocusLoses(t *testing.T) {
	b, _ := os.ReadFile("testdata/recordings/sciworld-driver-focus-fail.json")
	var eps []driverEpisode
	if err := json.Unmarshal(b, &eps); err != nil || len(eps) == 0 {
		t.Fatal(err)
	}
	ep := eps[0]
	// Replay the recorded answers through the client.
	i := 0
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/create":
			w.Write([]byte(`{"id": 8}`))
		case "/reset":
			w.Write([]byte(`{"observation": "This room is called the hallway.", "task_description": "Your task is to boil orange juice.", "reward": 0, "score": 0, "done": false}`))
		case "/step":
			st := ep.Steps[i]
			i++
			json.NewEncoder(w).Encode(map[string]any{"observation": st.Observation, "reward": st.Reward, "score": st.Score, "done": st.Done})
		}
	}))
	defer hs.Close()
	c, _ := New(DefaultConfig(hs.URL, SciWorld))
	ctx := context.Background()
	c.Reset(ctx, envadapters.Task{Index: ep.Task})
	c.Step(ctx, ep.Acts[0])
	st, err := c.Step(ctx, ep.Acts[1])
	if err != nil || !st.Done || st.Won || st.Score != -100 {
		t.Fatalf("wrong focus: %+v %v (want done, lost, score -100)", st, err)
	}
}

// Env ids carry 63 random bits ([hardening-2] 3): none can be guessed by
// counting or by trying the 2^31 an int32 holds, and our client reads
// them back.
func TestServerIDsAre63Bits(t *testing.T) {
	hs := householdServer(t)
	above := 0
	for i := 0; i < 16; i++ {
		resp, err := http.Post(hs.URL+"/create", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.Number
		dec := json.NewDecoder(resp.Body)
		dec.UseNumber()
		err = dec.Decode(&m)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		id, err := m["id"].Int64()
		if err != nil || id < 0 {
			t.Fatalf("id %q: %v", m["id"], err)
		}
		if id >= 1<<31 {
			above++
		}
	}
	if above < 8 {
		t.Errorf("%d of 16 ids above 2^31: the ids do not use 63 bits", above)
	}
	c, err := New(DefaultConfig(hs.URL, ALFWorld))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, _ := envadapters.Lookup(household.Name)
	tasks, _ := b.Tasks(envadapters.EvalSeen, 1)
	if _, err := c.Reset(context.Background(), envadapters.Task{Index: tasks[0].Index}); err != nil {
		t.Fatalf("our client with a 63-bit id: %v", err)
	}
}

// A body over the 1 MiB limit is refused as such, not reported as
// malformed JSON.
func TestServerReportsItsBodyLimit(t *testing.T) {
	hs := householdServer(t)
	body := `{"id": 1, "action": "` + strings.Repeat("x", 2<<20) + `"}`
	resp, err := http.Post(hs.URL+"/step", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "over 1048576 bytes (1 MiB)") {
		t.Errorf("a 2 MiB body: %s", b)
	}
}
