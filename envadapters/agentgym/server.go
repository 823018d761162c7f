package agentgym

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
)

// Server exposes a built-in environment over AgentGym's protocol, in the
// dialect of the AgentGym server its clients expect. ALFWorld's (and
// SciWorld's data_idx): POST /create → {"id"}, /reset {id, game,
// world_type} → {"id", "observation", "available_actions", "task_type"},
// /step {id, action} → {"observation", "reward", "available_actions",
// "done"}, /close {id}; GET /observation?id=, /available_actions?id=.
// WebShop's: POST /create → a bare integer, /reset {env_idx, session_id} →
// [observation, null], /step {env_idx, action} → {"state", "reward",
// "done", "info"}; GET /observation?env_idx= → a bare string,
// /available_actions?env_idx= → {"has_search_bar", "clickables"},
// /instruction_text?env_idx=, /detail?env_idx=. Search-QA's (AgentGym's
// agentenv-searchqa): POST /create {id} → a bare integer, /reset {env_idx,
// id} (id: the task) → the observation as a bare string, /step {env_idx,
// action} → {"observation", "reward", "done", "info"}, /close {env_idx};
// GET /observation?env_idx= → a bare string. As AgentGym does, errors
// come back as {"error": "..."} with HTTP 200, a step after the episode
// ended included.
type Server struct {
	dialect string // ALFWorld, WebShop or SearchQA
	b       envadapters.Builtin
	split   envadapters.Split
	opts    envadapters.Options
	maxEnvs int
	// perClient caps the envs one client address holds; idleExpiry closes
	// envs no request has touched for that long (checked on /create).
	perClient  int
	idleExpiry time.Duration
	log        zerolog.Logger

	mu   sync.Mutex
	envs map[int]*slot

	// tasks is the split's task list, made once: listing the first N tasks
	// costs O(N) (0.75 s for household's 20,000), too much per reset.
	tasksOnce sync.Once
	tasks     []envadapters.Task
	tasksErr  error
}

type slot struct {
	// owner is the creating client's address (host); used is the last
	// request's time (under Server.mu).
	owner string
	used  time.Time
	mu    sync.Mutex
	env   envadapters.Env
	last  envadapters.Step
	task  envadapters.Task
	set   bool
	steps int
	// world and game are what ALFWorld's /detail reports.
	world string
	game  int
}

// SearchQA is the dialect of AgentGym's Search-QA server (served, not a
// client flavor).
const SearchQA = "searchqa"

// DialectFor is the dialect AgentGym's clients expect for a built-in: the
// WebShop server's for webshop, the Search-QA server's for searchqa,
// ALFWorld's for the others.
func DialectFor(env string) string {
	switch env {
	case "webshop":
		return WebShop
	case "searchqa":
		return SearchQA
	}
	return ALFWorld
}

// NewServer serves tasks of split from b in the dialect DialectFor(b.Name());
// game (or session) N is task N of the split.
func NewServer(b envadapters.Builtin, split envadapters.Split, opts envadapters.Options, log zerolog.Logger) (*Server, error) {
	return NewServerDialect(b, split, opts, DialectFor(b.Name()), log)
}

// NewServerDialect is NewServer in a chosen dialect (ALFWorld or WebShop).
func NewServerDialect(b envadapters.Builtin, split envadapters.Split, opts envadapters.Options, dialect string, log zerolog.Logger) (*Server, error) {
	if dialect != ALFWorld && dialect != WebShop && dialect != SearchQA {
		return nil, fmt.Errorf("agentgym server: dialect %q: want %s, %s or %s", dialect, ALFWorld, WebShop, SearchQA)
	}
	if b.SplitSize(split) == 0 {
		return nil, fmt.Errorf("agentgym server: %s has no split %q", b.Name(), split)
	}
	if _, err := b.New(opts); err != nil { // validates the options once
		return nil, err
	}
	return &Server{dialect: dialect, b: b, split: split, opts: opts, maxEnvs: 4096, perClient: 256, idleExpiry: 30 * time.Minute, log: log, envs: map[int]*slot{}}, nil
}

// Handler routes the protocol.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" && r.URL.Path != "/health" {
			reply(w, map[string]any{"error": "no route " + r.URL.Path})
			return
		}
		reply(w, map[string]any{"env": s.b.Name(), "split": s.split, "tasks": s.b.SplitSize(s.split)})
	})
	mux.HandleFunc("POST /create", s.create)
	mux.HandleFunc("POST /reset", s.reset)
	mux.HandleFunc("POST /step", s.step)
	mux.HandleFunc("POST /close", s.close)
	mux.HandleFunc("GET /observation", s.observation)
	mux.HandleFunc("GET /available_actions", s.available)
	mux.HandleFunc("GET /instruction_text", s.instruction)
	mux.HandleFunc("GET /detail", s.detail)
	return mux
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, format string, args ...any) {
	reply(w, map[string]any{"error": fmt.Sprintf(format, args...)})
}

// maxBody bounds a request body (1 MiB).
const maxBody = 1 << 20

func readBody(r *http.Request, dst any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return err
	}
	if len(b) > maxBody {
		return fmt.Errorf("request body over %d bytes (1 MiB): refused", maxBody)
	}
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return fmt.Errorf("malformed JSON: %w", err)
	}
	return nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	env, err := s.b.New(s.opts)
	if err != nil {
		fail(w, "creating an environment: %v", err)
		return
	}
	owner := clientHost(r)
	s.mu.Lock()
	s.expireIdle(time.Now())
	mine := 0
	for _, sl := range s.envs {
		if sl.owner == owner {
			mine++
		}
	}
	if len(s.envs) >= s.maxEnvs || mine >= s.perClient {
		s.mu.Unlock()
		env.Close()
		fail(w, "too many open environments (%d here, %d of them yours; at most %d, %d per client); close some", len(s.envs), mine, s.maxEnvs, s.perClient)
		return
	}
	// Ids are drawn at random (63 bits; AgentGym's clients read integers):
	// a client cannot step or close another's env by counting.
	id := s.newID()
	s.envs[id] = &slot{env: env, owner: owner, used: time.Now()}
	s.mu.Unlock()
	if s.dialect == WebShop || s.dialect == SearchQA {
		reply(w, id)
		return
	}
	reply(w, map[string]any{"id": id})
}

// envID reads the environment id of a request body: "id", or WebShop's
// "env_idx".
type envID struct {
	ID     *int `json:"id"`
	EnvIdx *int `json:"env_idx"`
}

func (e envID) get() *int {
	if e.ID != nil {
		return e.ID
	}
	return e.EnvIdx
}

func (s *Server) slotFor(w http.ResponseWriter, id *int) *slot {
	if id == nil {
		fail(w, "missing id")
		return nil
	}
	s.mu.Lock()
	sl := s.envs[*id]
	if sl != nil {
		sl.used = time.Now()
	}
	s.mu.Unlock()
	if sl == nil {
		fail(w, "no environment with id %d", *id)
	}
	return sl
}

// newID draws an unused random id in [0, 2^63) (under s.mu): 63 bits
// nobody can guess (AgentGym's clients read any JSON integer; seedctl's
// reads Go's 64-bit int).
func (s *Server) newID() int {
	for {
		var b [8]byte
		if _, err := cryptorand.Read(b[:]); err != nil {
			panic(err) // the OS's random source failed
		}
		id := int(binary.LittleEndian.Uint64(b[:]) >> 1)
		if _, used := s.envs[id]; !used {
			return id
		}
	}
}

// expireIdle closes envs no request touched for idleExpiry (under s.mu).
func (s *Server) expireIdle(now time.Time) {
	for id, sl := range s.envs {
		if now.Sub(sl.used) > s.idleExpiry {
			delete(s.envs, id)
			go sl.env.Close()
			s.log.Info().Int("id", id).Str("client", sl.owner).Msg("closed an idle environment")
		}
	}
}

// clientHost is the client an env is counted against: the request's
// address without its port and, when the client sends one, its key
// (ClientKeyHeader, at most 64 bytes): programs on one host (every one of
// them at 127.0.0.1) are counted apart when they send keys, and one that
// fills its own budget does not lock the others out. Clients without a
// key share their address's budget.
func clientHost(r *http.Request) string {
	h := r.RemoteAddr
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		h = host
	}
	if k := r.Header.Get(ClientKeyHeader); k != "" && len(k) <= 64 {
		h += " key " + k
	}
	return h
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	var req struct {
		envID
		Game      *int    `json:"game"`
		DataIdx   *int    `json:"data_idx"`
		SessionID *int    `json:"session_id"`
		WorldType *string `json:"world_type"`
	}
	if err := readBody(r, &req); err != nil {
		fail(w, "%v", err)
		return
	}
	envRef, game := req.get(), req.Game
	if s.dialect == SearchQA {
		// Search-QA's reset names the env env_idx and the task id.
		envRef, game = req.EnvIdx, req.ID
	}
	sl := s.slotFor(w, envRef)
	if sl == nil {
		return
	}
	// AgentGym's ALFWorld server takes Text, Embody or Hybrid; the
	// built-ins are text worlds.
	if req.WorldType != nil {
		switch *req.WorldType {
		case "Text":
		case "Embody", "Hybrid":
			fail(w, "world_type %q is not served here: the built-in environments are text worlds (\"Text\")", *req.WorldType)
			return
		default:
			fail(w, `world_type must be one of "Text", "Embody" and "Hybrid"`)
			return
		}
	}
	for _, alt := range []*int{req.DataIdx, req.SessionID} {
		if game == nil {
			game = alt
		}
	}
	if game == nil || *game < 0 || *game >= s.b.SplitSize(s.split) {
		fail(w, "game must be in [0, %d)", s.b.SplitSize(s.split))
		return
	}
	s.tasksOnce.Do(func() { s.tasks, s.tasksErr = s.b.Tasks(s.split, s.b.SplitSize(s.split)) })
	if s.tasksErr != nil || *game >= len(s.tasks) {
		fail(w, "listing tasks: %v", s.tasksErr)
		return
	}
	task := s.tasks[*game]
	sl.mu.Lock()
	defer sl.mu.Unlock()
	st, err := sl.env.Reset(r.Context(), task)
	if err != nil {
		fail(w, "reset: %v", err)
		return
	}
	sl.last, sl.task, sl.set, sl.steps, sl.game, sl.world = st, task, true, 0, *game, "Text"
	switch s.dialect {
	case WebShop:
		reply(w, []any{st.Observation, nil})
		return
	case SearchQA:
		reply(w, st.Observation)
		return
	}
	reply(w, map[string]any{"id": *req.get(), "observation": st.Observation, "available_actions": orEmpty(st.Admissible), "task_type": task.Family})
}

func orEmpty(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

func (s *Server) step(w http.ResponseWriter, r *http.Request) {
	var req struct {
		envID
		Action *string `json:"action"`
	}
	if err := readBody(r, &req); err != nil {
		fail(w, "%v", err)
		return
	}
	sl := s.slotFor(w, req.get())
	if sl == nil {
		return
	}
	if req.Action == nil {
		fail(w, "missing action")
		return
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if !sl.set {
		fail(w, "environment %d has not been reset", *req.get())
		return
	}
	if sl.last.Done {
		fail(w, "environment %d: the episode is over; reset it", *req.get())
		return
	}
	st, err := sl.env.Step(context.WithoutCancel(r.Context()), *req.Action)
	if err != nil {
		fail(w, "step: %v", err)
		return
	}
	sl.last = st
	sl.steps++
	switch s.dialect {
	case WebShop:
		reply(w, map[string]any{"state": st.Observation, "reward": st.Reward, "done": st.Done, "info": nil})
		return
	case SearchQA:
		reply(w, map[string]any{"observation": st.Observation, "reward": st.Reward, "done": st.Done, "info": nil})
		return
	}
	reply(w, map[string]any{"observation": st.Observation, "reward": st.Reward, "available_actions": orEmpty(st.Admissible), "done": st.Done})
}

func (s *Server) close(w http.ResponseWriter, r *http.Request) {
	var req envID
	if err := readBody(r, &req); err != nil {
		fail(w, "%v", err)
		return
	}
	sl := s.slotFor(w, req.get())
	if sl == nil {
		return
	}
	s.mu.Lock()
	delete(s.envs, *req.get())
	s.mu.Unlock()
	sl.env.Close()
	reply(w, map[string]any{"closed": true})
}

func (s *Server) queryID(w http.ResponseWriter, r *http.Request) *slot {
	q := r.URL.Query().Get("id")
	if q == "" {
		q = r.URL.Query().Get("env_idx")
	}
	v, err := strconv.Atoi(q)
	if err != nil {
		fail(w, "id (or env_idx) must be an integer")
		return nil
	}
	return s.slotFor(w, &v)
}

func (s *Server) observation(w http.ResponseWriter, r *http.Request) {
	if sl := s.queryID(w, r); sl != nil {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		reply(w, sl.last.Observation) // a bare string, in both dialects
	}
}

func (s *Server) available(w http.ResponseWriter, r *http.Request) {
	if sl := s.queryID(w, r); sl != nil {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		if s.dialect == WebShop {
			reply(w, webshopAvailable(sl.last.Admissible))
			return
		}
		reply(w, orEmpty(sl.last.Admissible)) // ALFWorld's: a bare list
	}
}

// webshopAvailable is WebShop's {"has_search_bar", "clickables"} form of
// admissible actions written search[...] and click[...]; as in WebShop, a
// page with the search bar lists its "search" button as a clickable.
func webshopAvailable(adm []string) map[string]any {
	search, clicks := false, []string{}
	for _, a := range adm {
		switch {
		case strings.HasPrefix(a, "search["):
			if !search {
				clicks = append(clicks, "search")
			}
			search = true
		case strings.HasPrefix(a, "click[") && strings.HasSuffix(a, "]"):
			clicks = append(clicks, a[len("click["):len(a)-1])
		}
	}
	return map[string]any{"has_search_bar": search, "clickables": clicks}
}

// instruction is WebShop's /instruction_text: the task's goal, bare.
func (s *Server) instruction(w http.ResponseWriter, r *http.Request) {
	if sl := s.queryID(w, r); sl != nil {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		reply(w, sl.task.Goal)
	}
}

// detail describes one environment's state.
func (s *Server) detail(w http.ResponseWriter, r *http.Request) {
	if sl := s.queryID(w, r); sl != nil {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		if s.dialect == ALFWorld {
			reply(w, map[string]any{"world_type": sl.world, "game": sl.game, "observation": sl.last.Observation, "available_actions": orEmpty(sl.last.Admissible),
				"done": sl.last.Done, "reward": sl.last.Reward, "deleted": false})
			return
		}
		reply(w, map[string]any{"task": sl.task.ID, "goal": sl.task.Goal, "steps": sl.steps, "done": sl.last.Done, "reward": sl.last.Reward, "reset": sl.set})
	}
}
