package agentgym

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
)

// Server exposes a built-in environment over AgentGym's ALFWorld-style
// protocol: POST /create, /reset {id, game, world_type}, /step {id, action},
// /close {id}; GET /observation?id=, /available_actions?id=. As AgentGym
// does, errors come back as {"error": "..."} with HTTP 200.
type Server struct {
	b       envadapters.Builtin
	split   envadapters.Split
	opts    envadapters.Options
	maxEnvs int
	log     zerolog.Logger

	mu   sync.Mutex
	envs map[int]*slot
	next int
}

type slot struct {
	mu   sync.Mutex
	env  envadapters.Env
	last envadapters.Step
	task envadapters.Task
	set  bool
}

// NewServer serves tasks of split from b; game N is task N of the split.
func NewServer(b envadapters.Builtin, split envadapters.Split, opts envadapters.Options, log zerolog.Logger) (*Server, error) {
	if b.SplitSize(split) == 0 {
		return nil, fmt.Errorf("agentgym server: %s has no split %q", b.Name(), split)
	}
	if _, err := b.New(opts); err != nil { // validates the options once
		return nil, err
	}
	return &Server{b: b, split: split, opts: opts, maxEnvs: 4096, log: log, envs: map[int]*slot{}}, nil
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
	return mux
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, format string, args ...any) {
	reply(w, map[string]any{"error": fmt.Sprintf(format, args...)})
}

func readBody(r *http.Request, dst any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, dst)
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	env, err := s.b.New(s.opts)
	if err != nil {
		fail(w, "creating an environment: %v", err)
		return
	}
	s.mu.Lock()
	if len(s.envs) >= s.maxEnvs {
		s.mu.Unlock()
		fail(w, "too many open environments (%d); close some", s.maxEnvs)
		return
	}
	id := s.next
	s.next++
	s.envs[id] = &slot{env: env}
	s.mu.Unlock()
	reply(w, map[string]any{"id": id})
}

func (s *Server) slotFor(w http.ResponseWriter, id *int) *slot {
	if id == nil {
		fail(w, "missing id")
		return nil
	}
	s.mu.Lock()
	sl := s.envs[*id]
	s.mu.Unlock()
	if sl == nil {
		fail(w, "no environment with id %d", *id)
	}
	return sl
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID        *int   `json:"id"`
		Game      *int   `json:"game"`
		DataIdx   *int   `json:"data_idx"`
		WorldType string `json:"world_type"`
	}
	if err := readBody(r, &req); err != nil {
		fail(w, "malformed JSON: %v", err)
		return
	}
	sl := s.slotFor(w, req.ID)
	if sl == nil {
		return
	}
	game := req.Game
	if game == nil {
		game = req.DataIdx
	}
	if game == nil || *game < 0 || *game >= s.b.SplitSize(s.split) {
		fail(w, "game must be in [0, %d)", s.b.SplitSize(s.split))
		return
	}
	tasks, err := s.b.Tasks(s.split, *game+1)
	if err != nil {
		fail(w, "%v", err)
		return
	}
	task := tasks[*game]
	sl.mu.Lock()
	defer sl.mu.Unlock()
	st, err := sl.env.Reset(r.Context(), task)
	if err != nil {
		fail(w, "reset: %v", err)
		return
	}
	sl.last, sl.task, sl.set = st, task, true
	reply(w, map[string]any{"observation": st.Observation, "available_actions": orEmpty(st.Admissible), "task_type": task.Family})
}

func orEmpty(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

func (s *Server) step(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID     *int    `json:"id"`
		Action *string `json:"action"`
	}
	if err := readBody(r, &req); err != nil {
		fail(w, "malformed JSON: %v", err)
		return
	}
	sl := s.slotFor(w, req.ID)
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
		fail(w, "environment %d has not been reset", *req.ID)
		return
	}
	st, err := sl.env.Step(context.WithoutCancel(r.Context()), *req.Action)
	if err != nil {
		fail(w, "step: %v", err)
		return
	}
	sl.last = st
	reply(w, map[string]any{"observation": st.Observation, "reward": st.Reward, "available_actions": orEmpty(st.Admissible), "done": st.Done})
}

func (s *Server) close(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID *int `json:"id"`
	}
	if err := readBody(r, &req); err != nil {
		fail(w, "malformed JSON: %v", err)
		return
	}
	sl := s.slotFor(w, req.ID)
	if sl == nil {
		return
	}
	s.mu.Lock()
	delete(s.envs, *req.ID)
	s.mu.Unlock()
	sl.env.Close()
	reply(w, map[string]any{"closed": true})
}

func (s *Server) queryID(w http.ResponseWriter, r *http.Request) *slot {
	v, err := strconv.Atoi(r.URL.Query().Get("id"))
	if err != nil {
		fail(w, "id must be an integer")
		return nil
	}
	return s.slotFor(w, &v)
}

func (s *Server) observation(w http.ResponseWriter, r *http.Request) {
	if sl := s.queryID(w, r); sl != nil {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		reply(w, map[string]any{"observation": sl.last.Observation})
	}
}

func (s *Server) available(w http.ResponseWriter, r *http.Request) {
	if sl := s.queryID(w, r); sl != nil {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		reply(w, map[string]any{"available_actions": orEmpty(sl.last.Admissible)})
	}
}
