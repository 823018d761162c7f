// Package agentgym speaks AgentGym's environment-server protocol: a client
// Env for real ALFWorld, WebShop, SciWorld and TextCraft servers, and a server that
// exposes seedctl's built-ins the same way, so Python trainers (AgentGym,
// verl-agent) can use them.
package agentgym

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/household"
	"github.com/seedctl/seedctl/envadapters/internal/httpretry"
)

// Flavors of the protocol.
const (
	ALFWorld = "alfworld" // id; /reset {id, game, world_type}; /step → observation, reward, available_actions, done
	WebShop  = "webshop"  // env_idx; /step → state, reward, done, info; GET /available_actions
	SciWorld = "sciworld" // id; /reset {id, data_idx}; /step → observation, reward, score, done
	// TextCraft (Minecraft crafting): id; /create → {id, observation,
	// done, reward}; /reset {id, data_idx}; /step → observation, reward
	// (1 when the goal item is made), done. A failed action answers an
	// observation beginning "Could not" or "Wrong item format".
	TextCraft = "textcraft"
	// BabyAI (grid worlds in text): id; /reset {id, data_idx}; /step →
	// observation (with "Available actions: [...]" inside), reward,
	// score, done.
	BabyAI = "babyai"
)

// Range is a split's task indices on a server: Start … Start+Count-1, or,
// when Indices is set, exactly those indices in that order (AgentEval's
// TextCraft test set is 100 specific goals, not a contiguous range).
type Range struct {
	Start int `json:"start"`
	Count int `json:"count"`
	// Indices, when set, are the split's server indices; Start must then
	// be 0 and Count 0 or len(Indices).
	Indices []int `json:"indices,omitempty"`
}

// Len is how many tasks the split has.
func (r Range) Len() int {
	if r.Indices != nil {
		return len(r.Indices)
	}
	return r.Count
}

// At is the server index of the split's task i.
func (r Range) At(i int) int {
	if r.Indices != nil {
		return r.Indices[i]
	}
	return r.Start + i
}

// End is one past the range's largest index (0 when empty).
func (r Range) End() int {
	if r.Indices == nil {
		return r.Start + r.Count
	}
	end := 0
	for _, i := range r.Indices {
		end = max(end, i+1)
	}
	return end
}

// Check says what is wrong with r's own numbers ("" nothing): negative
// starts, counts or indices, a count beside indices that disagrees, an
// index listed twice.
func (r Range) Check() string {
	switch {
	case r.Start < 0 || r.Count < 0:
		return "start and count must not be negative"
	case r.Indices == nil:
		return ""
	case r.Start != 0 || (r.Count != 0 && r.Count != len(r.Indices)):
		return fmt.Sprintf("with indices, leave start out and count out (or %d)", len(r.Indices))
	}
	seen := make(map[int]bool, len(r.Indices))
	for _, i := range r.Indices {
		if i < 0 {
			return fmt.Sprintf("index %d is negative", i)
		}
		if seen[i] {
			return fmt.Sprintf("index %d is listed twice", i)
		}
		seen[i] = true
	}
	return ""
}

// String is the range as config check shows it.
func (r Range) String() string {
	switch {
	case r.Len() == 0:
		return "none"
	case r.Indices != nil:
		return fmt.Sprintf("%d listed indices in %d-%d", len(r.Indices), slices.Min(r.Indices), slices.Max(r.Indices))
	}
	return fmt.Sprintf("%d-%d (%d)", r.Start, r.End()-1, r.Count)
}

// Overlaps says whether two ranges share an index.
func (r Range) Overlaps(o Range) bool {
	if r.Indices == nil && o.Indices == nil {
		return r.Count > 0 && o.Count > 0 && r.Start < o.End() && o.Start < r.End()
	}
	in := make(map[int]bool, r.Len())
	for i := range r.Len() {
		in[r.At(i)] = true
	}
	for i := range o.Len() {
		if in[o.At(i)] {
			return true
		}
	}
	return false
}

// FlavorInfo is what seedctl knows of a flavor's server, with where it
// was read or measured.
type FlavorInfo struct {
	// DataSize is how many task indices the server has (0: unbounded).
	DataSize int
	// Wraps: indices past DataSize are taken modulo it (so two ranges can
	// name one task); DataSize 0 with Wraps: the size is unknown.
	Wraps bool
	// Splits are the default index ranges per split (train, eval_seen,
	// eval_unseen); nil: the data has no published split and a config
	// must give its own. A split with Count 0 is not evaluated.
	Splits map[string]Range
	// Source says where DataSize and Splits come from.
	Source string
	// Invalid are the observations (prefixes) the server answers to an
	// action it did not carry out; the episode goes on. InvalidPatterns
	// are the same for answers that name an object in the middle.
	Invalid         []string
	InvalidPatterns []*regexp.Regexp
	// HasClose: the server has POST /close (ALFWorld's and WebShop's have
	// none: their envs live until the server stops).
	HasClose bool
	// Actions is the action grammar a prompt states where the server
	// sends no action list of its own ("" when it sends one).
	Actions string
	// System is the system prompt of the flavor's rollouts ("": generic).
	System string
	// Intro is the flavor's opening sentence in verl-agent-style prompts.
	Intro string
	// Turns, when set, renders the flavor's window-mode turns
	// (envadapters.Prompting.Turns); nil: the rollout's generic window.
	Turns func(style string) (envadapters.Turns, error)
	// Place names the place an action goes to (envadapters.Prompting.Place).
	Place func(action string) (string, bool)
}

// Prompting is how a flavor's turns are put to the policy: tagged actions,
// the server's action list where it sends one, and the flavor's action
// grammar in the request where it does not.
func (f FlavorInfo) Prompting() envadapters.Prompting {
	p := envadapters.Prompting{System: f.System, ActionRequest: "Write your next action inside <action> and </action>.", ListAdmissible: true, Intro: f.Intro, Turns: f.Turns, Place: f.Place}
	if f.Actions != "" {
		p.ActionRequest = f.Actions + " " + p.ActionRequest
	}
	return p
}

// textcraftDataSize is how many goals agentenv-textcraft has.
const textcraftDataSize = 544

// Flavors lists what seedctl knows of each AgentGym server.
var Flavors = map[string]FlavorInfo{
	ALFWorld: {
		DataSize: 2620,
		Splits:   map[string]Range{"train": {Start: 0, Count: 2420}, "eval_seen": {Start: 2420, Count: 200}, "eval_unseen": {Start: 2620}},
		Source: "agentenv-alfworld configs/mappings_train.json (games 0-2419, ALFWorld's train set) and mappings_test.json " +
			"(2420-2619, 200 games of ALFWorld's valid_train); the server answers \"list index out of range\" beyond. " +
			"ALFWorld's valid_seen (140) and valid_unseen (134) are not served by it: eval_unseen is empty",
		Invalid: []string{"Nothing happens."},
		Intro:   "You are an expert agent acting in the ALFRED embodied household environment.",
		Place:   household.GoesTo, // ALFWorld's "go to PLACE", as the household stand-in's
	},
	WebShop: {
		Intro:    "You are an expert autonomous agent shopping in the WebShop e-commerce environment.",
		DataSize: 12087,
		Splits:   map[string]Range{"train": {Start: 1500, Count: 10587}, "eval_seen": {Start: 0, Count: 500}, "eval_unseen": {Start: 500}},
		Source: "WebShop's own split (baseline_models/env.py: goals 0-499 test, 500-1499 validation, 1500 on train; " +
			"12,087 human goals): eval_seen is the test goals, eval_unseen is empty",
	},
	SciWorld: {
		System: "You are a scientist agent in ScienceWorld, a text world. Carry out the task by acting in it.",
		Intro:  "You are an expert agent carrying out a science experiment in the ScienceWorld environment.",
		Source: "agentenv-sciworld enumerates every variation of every ScienceWorld task but seven, in task order, " +
			"with no train/test split: give env.splits",
		// The real server's refusals: testdata/sciworld_refusals.json
		// (TestSciWorldRefusals), answers to actions it could not carry
		// out. "The X is already open." is not one: the action was
		// understood and changed nothing, and ScienceWorld's own gold
		// paths take it (sciworld_exchange.json, step 8).
		Invalid: []string{"No known action matches that input.", "It's not clear", "The door is not open.", "I'm not sure", "You can't",
			"That container is empty, so there are no items to mix."},
		InvalidPatterns: []*regexp.Regexp{
			regexp.MustCompile(`^The .+ is not (openable|edible|moveable|something that can be activated)\b`),
			regexp.MustCompile(`^The .+ does not contain any liquids to dunk into\.`),
		},
		HasClose: true,
		Actions: "Actions: look around; look at OBJ; look in OBJ; read OBJ; open OBJ; close OBJ; activate OBJ; deactivate OBJ; " +
			"connect OBJ to OBJ; disconnect OBJ; use OBJ [on OBJ]; move OBJ to OBJ; pick up OBJ; put down OBJ; pour OBJ into OBJ; " +
			"dunk OBJ into OBJ; mix OBJ; go to LOC; eat OBJ; flush OBJ; focus on OBJ; inventory; task; wait; wait1. " +
			"Focus only on the object the task names: focusing on a wrong one fails the task.",
	},
	TextCraft: {
		Wraps: true,
		Intro: "You are an expert agent crafting items in a Minecraft-like environment.",
		// 544 goals: data_idx 544 answers as 0 (probed on the server at
		// AgentGym 3ef9235; TestTextCraftExpert's recording lists them).
		DataSize: textcraftDataSize,
		Source: "agentenv-textcraft picks the goal item data_idx modulo its 544 craftable items (sorted by recipe depth, " +
			"ties in the order os.listdir gives the recipe files), with no train/test split: give env.splits",
		Invalid:  []string{"Could not", "Wrong item format"},
		HasClose: true,
		Actions:  "Actions: get N ITEM; craft N ITEM using N ITEM[, N ITEM ...] (one of the crafting commands above); inventory.",
		Turns:    NewTextCraftTurns,
	},
	BabyAI: {
		Intro: "You are an expert agent navigating a BabyAI grid world.",
		Source: "agentenv-babyai plays level data_idx mod 40 (of 40) with seed data_idx div 40, " +
			"with no train/test split: give env.splits",
		// The server's refusals (environment.py's check_action_is_valid and
		// its error_message table), recorded in
		// testdata/babyai_refusals.json. Not "You cannot" alone: a view
		// with nothing in sight begins "You cannot see any objects within
		// sight."; not "No change in state.": a listed action with nothing
		// to do answers that too (the empty action, refused with the same
		// words, is invalid by its format already).
		Invalid: []string{"The action is not recognized. Please check valid actions.", "There is a barrier in front of you, you can't move forward."},
		InvalidPatterns: []*regexp.Regexp{
			regexp.MustCompile(`^You cannot (pickup|drop|go through|toggle and go through|go to) `),
		},
		HasClose: true,
		Actions:  "Actions: one of the available actions listed above, written exactly as listed.",
	},
}

// Config points the client at one server.
type Config struct {
	BaseURL   string
	Flavor    string
	WorldType string // ALFWorld's world_type, "Text" by default
	// Timeout bounds one request; RetryFor bounds retrying a failing one.
	Timeout  time.Duration
	RetryFor time.Duration
}

// DefaultConfig returns defaults for a server.
func DefaultConfig(base, flavor string) Config {
	return Config{BaseURL: base, Flavor: flavor, WorldType: "Text", Timeout: 60 * time.Second, RetryFor: 30 * time.Second}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.BaseURL == "" {
		return errors.New("agentgym config: base_url is required")
	}
	if _, ok := Flavors[c.Flavor]; !ok {
		return fmt.Errorf("agentgym config: flavor %q: want alfworld, webshop, sciworld, textcraft or babyai", c.Flavor)
	}
	if c.Timeout <= 0 || c.RetryFor < 0 {
		return errors.New("agentgym config: timeout must be positive and retry_for not negative")
	}
	return nil
}

// ErrEnvServer is an error the environment server reported or caused.
var ErrEnvServer = errors.New("environment server error")

// Client is an Env backed by a remote AgentGym server.
type Client struct {
	cfg   Config
	hc    *http.Client
	id    *int
	last  envadapters.Step
	first string // the last reset's observation
}

// New returns a client; the server-side environment is created on Reset.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	return &Client{cfg: cfg, hc: &http.Client{Timeout: cfg.Timeout}}, nil
}

// call posts (or gets, when body is nil and method GET) and decodes into
// out. Connection errors, timeouts and 5xx are retried; a JSON {"error": ...}
// answer (AgentGym sends those with HTTP 200) is returned at once.
func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	url := c.cfg.BaseURL + path
	var payload []byte
	if body != nil {
		payload, _ = json.Marshal(body)
	}
	raw, attempts, err := httpretry.Do(ctx, c.hc, httpretry.Request{Method: method, URL: url, Payload: payload, RetryFor: c.cfg.RetryFor, Header: clientKeyHeader})
	if err != nil {
		return fmt.Errorf("%s %s (%d attempts): %w: %w", method, url, attempts, ErrEnvServer, err)
	}
	var e struct {
		Error any `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != nil {
		return fmt.Errorf("%s %s: the server says: %v: %w", method, url, e.Error, ErrEnvServer)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: answer %q is not the expected JSON: %v: %w", method, url, truncate(raw), err, ErrEnvServer)
		}
	}
	return nil
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

func (c *Client) idKey() string {
	if c.cfg.Flavor == WebShop {
		return "env_idx"
	}
	return "id"
}

func (c *Client) create(ctx context.Context) error {
	var raw json.RawMessage
	if err := c.call(ctx, "POST", "/create", map[string]any{}, &raw); err != nil {
		return err
	}
	// {"id": N}, {"env_idx": N} or a bare N, depending on the server;
	// TextCraft's object also carries the first observation.
	var n int
	if json.Unmarshal(raw, &n) != nil {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("/create answered %s: %w", truncate(raw), ErrEnvServer)
		}
		v, ok := m[c.idKey()]
		if !ok {
			if v, ok = m["id"]; !ok {
				return fmt.Errorf("/create answered %s without an id: %w", truncate(raw), ErrEnvServer)
			}
		}
		if err := json.Unmarshal(v, &n); err != nil {
			return fmt.Errorf("/create answered %s: the id is not an integer: %w", truncate(raw), ErrEnvServer)
		}
	}
	c.id = &n
	return nil
}

type stepReply struct {
	Observation      string   `json:"observation"`
	State            string   `json:"state"`
	Reward           float64  `json:"reward"`
	Score            *float64 `json:"score"`
	Done             bool     `json:"done"`
	AvailableActions any      `json:"available_actions"`
	TaskType         string   `json:"task_type"`
	TaskDescription  string   `json:"task_description"`
}

// resetReply reads /reset's answer: an object, or the WebShop server's
// [observation, info] pair.
func resetReply(raw json.RawMessage) (stepReply, error) {
	var r stepReply
	if err := json.Unmarshal(raw, &r); err == nil {
		return r, nil
	}
	var pair []json.RawMessage
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) == 0 {
		return r, fmt.Errorf("/reset answered %s: want an object or [observation, info]: %w", truncate(raw), ErrEnvServer)
	}
	if err := json.Unmarshal(pair[0], &r.Observation); err != nil {
		return r, fmt.Errorf("/reset answered %s: the observation is not a string: %w", truncate(raw), ErrEnvServer)
	}
	return r, nil
}

func (r stepReply) text() string {
	if r.Observation != "" {
		return r.Observation
	}
	return r.State
}

// actions reads available_actions, a list of strings or WebShop's
// {"has_search_bar", "clickables"} object.
func actions(v any) []string {
	switch a := v.(type) {
	case []any:
		out := make([]string, 0, len(a))
		for _, x := range a {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	case map[string]any:
		var out []string
		if hs, _ := a["has_search_bar"].(bool); hs {
			out = append(out, "search[<your query>]")
		}
		if cl, ok := a["clickables"].([]any); ok {
			for _, x := range cl {
				if s, ok := x.(string); ok {
					out = append(out, "click["+s+"]")
				}
			}
		}
		return out
	}
	return nil
}

// Reset starts task.Index on the server (ALFWorld's game, SciWorld's
// data_idx, WebShop's session).
func (c *Client) Reset(ctx context.Context, task envadapters.Task) (envadapters.Step, error) {
	if c.id == nil {
		if err := c.create(ctx); err != nil {
			return envadapters.Step{}, fmt.Errorf("agentgym: creating an environment: %w", err)
		}
	}
	body := map[string]any{c.idKey(): *c.id}
	switch c.cfg.Flavor {
	case ALFWorld:
		body["game"], body["world_type"] = task.Index, c.cfg.WorldType
	case SciWorld, TextCraft, BabyAI:
		body["data_idx"] = task.Index
	case WebShop:
		body["session_id"] = task.Index
	}
	var raw json.RawMessage
	if err := c.call(ctx, "POST", "/reset", body, &raw); err != nil {
		return envadapters.Step{}, fmt.Errorf("agentgym: resetting to task %d: %w", task.Index, err)
	}
	r, err := resetReply(raw)
	if err != nil {
		return envadapters.Step{}, fmt.Errorf("agentgym: resetting to task %d: %w", task.Index, err)
	}
	st := envadapters.Step{Observation: r.text(), Admissible: actions(r.AvailableActions)}
	// SciWorld states the task beside the observation; the policy must see it.
	if d := strings.TrimSpace(r.TaskDescription); d != "" && !strings.Contains(st.Observation, d) {
		st.Observation = strings.TrimSpace(d + "\n" + st.Observation)
	}
	if c.cfg.Flavor == WebShop && st.Observation == "" {
		if st.Observation, err = c.observation(ctx); err != nil {
			return envadapters.Step{}, fmt.Errorf("agentgym: reading the observation of task %d: %w", task.Index, err)
		}
	}
	if c.cfg.Flavor == WebShop {
		st.Admissible = c.webshopActions(ctx)
	}
	c.last, c.first = st, st.Observation
	return st, nil
}

// ClientKeyHeader names the request header a client may send to be counted
// apart from other clients at the same address by seedctl env serve's
// per-client cap (AgentGym's own clients send none: they share their
// address's budget).
const ClientKeyHeader = "X-Client-Key"

// clientKeyHeader is this process's key: every seedctl client of a server
// counts as one client, apart from other programs on the same host.
var clientKeyHeader = map[string]string{ClientKeyHeader: func() string {
	var b [8]byte
	cryptorand.Read(b[:])
	return hex.EncodeToString(b[:])
}()}

// FirstObservation is what the last reset showed ("" before one).
func (c *Client) FirstObservation() string { return c.first }

// observation reads GET /observation: a bare string (WebShop's server) or
// {"observation": ...}.
func (c *Client) observation(ctx context.Context) (string, error) {
	var raw json.RawMessage
	if err := c.call(ctx, "GET", fmt.Sprintf("/observation?%s=%d", c.idKey(), *c.id), nil, &raw); err != nil {
		return "", err
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var r struct {
		Observation *string `json:"observation"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Observation == nil {
		return "", fmt.Errorf("/observation answered %s: want a string or {\"observation\"}: %w", truncate(raw), ErrEnvServer)
	}
	return *r.Observation, nil
}

func (c *Client) webshopActions(ctx context.Context) []string {
	var v any
	if err := c.call(ctx, "GET", fmt.Sprintf("/available_actions?env_idx=%d", *c.id), nil, &v); err != nil {
		return nil
	}
	return actions(v)
}

// Step sends an action. A server that keeps failing after retries ends the
// episode as failed (Done with Err set) instead of returning an error, so
// the rollout keeps the episode.
func (c *Client) Step(ctx context.Context, action string) (envadapters.Step, error) {
	if c.id == nil {
		return envadapters.Step{}, errors.New("agentgym: step before reset")
	}
	var r stepReply
	if err := c.call(ctx, "POST", "/step", map[string]any{c.idKey(): *c.id, "action": action}, &r); err != nil {
		if ctx.Err() != nil {
			return envadapters.Step{}, ctx.Err()
		}
		return envadapters.Step{Observation: "The environment failed: " + err.Error(), Done: true, Err: err.Error()}, nil
	}
	st := envadapters.Step{Observation: r.text(), Reward: r.Reward, Done: r.Done, Admissible: actions(r.AvailableActions)}
	if r.Score != nil {
		st.Score = *r.Score
	}
	switch c.cfg.Flavor {
	case WebShop:
		st.Score = r.Reward * 100
		st.Won = r.Done && r.Reward >= 1
		if !r.Done {
			st.Admissible = c.webshopActions(ctx)
		}
	case SciWorld:
		// SciWorld's reward is the score's increase; a task is done well
		// when its score reaches 100.
		st.Won = r.Done && r.Score != nil && *r.Score >= 100
	default:
		st.Won = r.Done && r.Reward > 0
	}
	st.Invalid = IsInvalid(c.cfg.Flavor, st.Observation)
	c.last = st
	return st, nil
}

// IsInvalid says whether obs is flavor's answer to an action its server
// did not carry out (FlavorInfo.Invalid).
func IsInvalid(flavor, obs string) bool {
	obs = strings.TrimSpace(obs)
	for _, p := range Flavors[flavor].Invalid {
		if strings.HasPrefix(obs, p) {
			return true
		}
	}
	for _, re := range Flavors[flavor].InvalidPatterns {
		if re.MatchString(obs) {
			return true
		}
	}
	return false
}

// Close releases the server-side environment where the server can
// (FlavorInfo.HasClose), in one call: a failure is the server's answer
// (SciWorld answers HTTP 500 for an id it no longer has), not an outage
// to retry.
func (c *Client) Close() error {
	if c.id == nil {
		return nil
	}
	id := *c.id
	c.id = nil
	if !Flavors[c.cfg.Flavor].HasClose {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := c.cfg.BaseURL + "/close"
	payload, _ := json.Marshal(map[string]any{c.idKey(): id})
	raw, _, err := httpretry.Do(ctx, c.hc, httpretry.Request{Method: "POST", URL: url, Payload: payload, Once: true, Header: clientKeyHeader})
	if err != nil {
		return fmt.Errorf("agentgym: closing env %d: POST %s: %w: %w", id, url, ErrEnvServer, err)
	}
	var e struct {
		Error any `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != nil {
		return fmt.Errorf("agentgym: closing env %d: the server says: %v: %w", id, e.Error, ErrEnvServer)
	}
	return nil
}

// flavorMarks are phrases every first observation of a flavor's real
// server holds (read off recorded exchanges: testdata/*_exchange.json,
// testdata/recordings, testdata/textcraft_expert.json). BabyAI has no
// recording here, so nothing is required of it.
var flavorMarks = map[string][]string{
	ALFWorld:  {"Your task is to:", "Looking quickly around you"},
	SciWorld:  {"This room is called the"},
	WebShop:   {"Instruction:"},
	TextCraft: {"Crafting commands:", "Goal: craft "},
	BabyAI:    {"Your goal: ", "Available actions: ["},
}

// ErrNoFlavorMarks: seedctl holds no recording of the flavor to tell its
// observations by.
var ErrNoFlavorMarks = errors.New("no recorded observation of this flavor to check against")

// CheckFlavor says whether a first observation is what flavor's real
// server answers a reset with: a config pointed at another flavor's server
// (a TextCraft config at a BabyAI server) is caught before a run.
func CheckFlavor(flavor, firstObs string) error {
	marks, ok := flavorMarks[flavor]
	if !ok {
		return fmt.Errorf("agentgym %s: %w", flavor, ErrNoFlavorMarks)
	}
	for _, m := range marks {
		if !strings.Contains(firstObs, m) {
			return fmt.Errorf("agentgym %s: the first observation lacks %q, which every %s reset states: is the server %s's? It answered: %q", flavor, m, flavor, flavor, truncate([]byte(firstObs)))
		}
	}
	return nil
}
