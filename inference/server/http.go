package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/tokenizer"
)

// Request limits (docs/gpu.md, "Reliability").
const (
	// maxBodyBytes bounds a request body.
	maxBodyBytes = 32 << 20
	// ReadTimeout bounds reading one request, body included.
	ReadTimeout = 60 * time.Second
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout = 120 * time.Second
)

// Server is the HTTP front of an Engine.
type Server struct {
	eng  *Engine
	log  zerolog.Logger
	mux  *http.ServeMux
	srv  *http.Server
	ln   net.Listener
	seq  atomic.Int64
	name string
	key  string
}

// New builds the engine and the HTTP handlers (not yet listening).
func New(cfg Config, log zerolog.Logger) (*Server, error) {
	eng, err := NewEngine(cfg, log)
	if err != nil {
		return nil, err
	}
	s := &Server{eng: eng, log: log, name: eng.cfg.ModelName, key: cfg.APIKey}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /v1/models", s.auth(s.models))
	mux.HandleFunc("GET /v1/models/{id}", s.auth(s.model))
	mux.HandleFunc("POST /v1/completions", s.auth(s.completions))
	mux.HandleFunc("POST /v1/chat/completions", s.auth(s.chat))
	mux.HandleFunc("POST /update_weights_from_disk", s.auth(s.updateWeights))
	mux.HandleFunc("POST /generate", s.auth(s.sglangGenerate))
	mux.HandleFunc("GET /stats", s.auth(s.statsHandler))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found_error", "", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	s.mux = mux
	return s, nil
}

// Engine exposes the engine (weight swaps in-process, stats).
func (s *Server) Engine() *Engine { return s.eng }

// Handler is the server's root handler, with panic recovery.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				// The stack goes to the log, never to the client.
				s.log.Error().Interface("panic", v).Str("path", r.URL.Path).Bytes("stack", debug.Stack()).Msg("handler panicked")
				writeError(w, http.StatusInternalServerError, "internal_error", "", "internal server error")
			}
		}()
		w.Header().Set("X-Weight-Version", s.eng.Version())
		if status, msg := s.refuseCrossSite(r); status != 0 {
			writeError(w, status, "invalid_request_error", "", msg)
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

// refuseCrossSite keeps web pages out (a page the user visits could
// otherwise POST text/plain bodies here, or reach a loopback server
// through DNS rebinding, and swap the served weights): a POST must be
// application/json (which a page cannot send cross-site without a
// preflight this server never grants), a browser's Origin must be this
// server's own, and a server listening on loopback answers only requests
// addressed to a loopback host. It returns 0 for a request it lets through.
func (s *Server) refuseCrossSite(r *http.Request) (int, string) {
	if r.Method == http.MethodPost {
		ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if ct != "application/json" {
			return http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: this server takes application/json bodies", r.Header.Get("Content-Type"))
		}
	}
	if s.listensOnLoopback() && !isLoopbackHost(r.Host) {
		return http.StatusForbidden, fmt.Sprintf("Host %q is not this loopback server's (requests to it must name localhost or a loopback address)", r.Host)
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return http.StatusForbidden, fmt.Sprintf("cross-origin request from %q refused", origin)
		}
	}
	return 0, ""
}

// listensOnLoopback: the server's listener is on a loopback address (or,
// without one, the handler is mounted by a test or another server, which
// is taken as loopback).
func (s *Server) listensOnLoopback() bool {
	if s.ln == nil {
		return true
	}
	a, ok := s.ln.Addr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// isLoopbackHost: a Host header naming localhost or a loopback address.
func isLoopbackHost(hostport string) bool {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.Trim(h, "[]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// Listen binds addr ("127.0.0.1:0" picks a free port).
func (s *Server) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	s.ln = ln
	// Slow clients are cut: headers within 10 s, the whole body within
	// ReadTimeout, idle keep-alive connections after IdleTimeout.
	// Responses have no write deadline (streams may run long).
	rt, it := ReadTimeout, IdleTimeout
	if c := s.eng.cfg; c.ReadTimeout > 0 {
		rt = c.ReadTimeout
	}
	if c := s.eng.cfg; c.IdleTimeout > 0 {
		it = c.IdleTimeout
	}
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: min(10*time.Second, rt), ReadTimeout: rt, IdleTimeout: it}
	return nil
}

// Addr is the bound address, after Listen.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Serve serves until Shutdown; it returns nil after a clean shutdown.
func (s *Server) Serve() error {
	if s.srv == nil {
		return errors.New("serve: call Listen first")
	}
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting requests, waits for handlers, stops the engine.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	if s.srv != nil {
		err = s.srv.Shutdown(ctx)
	}
	s.eng.Close()
	return err
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	if s.key == "" {
		return h
	}
	want := []byte("Bearer " + s.key)
	return func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			writeError(w, http.StatusUnauthorized, "authentication_error", "", "missing or wrong API key (Authorization: Bearer ...)")
			return
		}
		h(w, r)
	}
}

// ---- errors ---------------------------------------------------------------

type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func writeError(w http.ResponseWriter, status int, typ, param, msg string) {
	e := apiError{Message: msg, Type: typ, Code: status}
	if param != "" {
		e.Param = &param
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": e})
}

// badRequest is a 4xx naming the offending parameter.
type badRequest struct {
	status int
	param  string
	msg    string
}

func (b *badRequest) Error() string { return b.msg }

func bad(param, format string, args ...any) *badRequest {
	return &badRequest{status: http.StatusBadRequest, param: param, msg: fmt.Sprintf(format, args...)}
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	var br *badRequest
	switch {
	case errors.As(err, &br):
		typ := "invalid_request_error"
		if br.status == http.StatusNotFound {
			typ = "not_found_error"
		}
		writeError(w, br.status, typ, br.param, br.msg)
	case errors.Is(err, context.Canceled):
		// the client went away; nothing to write to
	case errors.Is(err, ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "unavailable", "", "server is shutting down")
	default:
		// The cause (libtorch's text: allocator sizes, file paths) goes to
		// the server's log, not to the client.
		s.log.Error().Err(err).Msg("request failed")
		writeError(w, http.StatusInternalServerError, "internal_error", "", clientError(err))
	}
}

// internalMessage is what a client reads of an internal failure.
const internalMessage = "internal server error: the model could not serve the request (the server's log has the cause)"

// clientError is the message a client gets for an error that is not its
// request's fault: the client's own cancellation or the server closing
// by name, anything else (libtorch's text: allocator sizes, file paths)
// as internalMessage, the cause left to the server's log.
func clientError(err error) string {
	var br *badRequest
	switch {
	case errors.As(err, &br):
		return br.msg
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "request cancelled: " + firstLine(err.Error())
	case errors.Is(err, ErrClosed):
		return "server is shutting down"
	}
	return internalMessage
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func decodeBody(r *http.Request, dst any) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	return unmarshalBody(body, dst)
}

// readBody reads a request body within the limits (size, UTF-8).
func readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, bad("", "reading the request body: %v", err)
	}
	if len(body) > maxBodyBytes {
		return nil, bad("", "request body over %d bytes", maxBodyBytes)
	}
	if !utf8.Valid(body) {
		return nil, bad("", "request body is not valid UTF-8")
	}
	return body, nil
}

// unmarshalBody decodes a request body read whole.
func unmarshalBody(body []byte, dst any) error {
	if len(body) > maxBodyBytes {
		return bad("", "request body over %d bytes", maxBodyBytes)
	}
	// As vLLM: a body that is not UTF-8 is refused, not silently repaired
	// (Go's JSON decoder would turn the bad bytes into U+FFFD).
	if !utf8.Valid(body) {
		return bad("", "request body is not valid UTF-8")
	}
	if err := loneSurrogate(body); err != nil {
		return err
	}
	if err := checkFieldLimits(body); err != nil {
		return err
	}
	if err := json.Unmarshal(body, dst); err != nil {
		var br *badRequest
		if errors.As(err, &br) {
			return br // a field's own check (chatMessages)
		}
		return bad("", "malformed JSON body: %v", err)
	}
	known := fieldsOf(reflect.TypeOf(dst).Elem())
	for _, k := range topLevelKeys(body) {
		if !known[k] {
			return bad(k, "unknown field %q: this server does not implement it (and does not ignore what a client asked for)", k)
		}
	}
	return nil
}

var fieldCache sync.Map // reflect.Type → map[string]bool

// fieldsOf lists the JSON names of a struct's fields, those of embedded
// structs included.
func fieldsOf(t reflect.Type) map[string]bool {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]bool)
	}
	m := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
			case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
				walk(f.Type)
			case name != "":
				m[name] = true
			case f.IsExported():
				m[f.Name] = true
			}
		}
	}
	if t.Kind() == reflect.Struct {
		walk(t)
	}
	fieldCache.Store(t, m)
	return m
}

// topLevelKeys lists the keys of the JSON object body (valid JSON) without
// decoding its values: a 30 MB prompt is skipped over, not copied.
func topLevelKeys(body []byte) []string {
	var keys []string
	scanJSON(body, nil, func(start, end, depth int) bool {
		// A string in the top object is a key when a colon follows.
		if depth != 1 {
			return true
		}
		j := end + 1
		for j < len(body) && (body[j] == ' ' || body[j] == '\t' || body[j] == '\n' || body[j] == '\r') {
			j++
		}
		if j < len(body) && body[j] == ':' {
			if k, err := strconv.Unquote(string(body[start : end+1])); err == nil {
				keys = append(keys, k)
			}
		}
		return true
	})
	return keys
}

// loneSurrogate refuses a \uD800–\uDFFF escape that is not half of a
// surrogate pair: JSON decoders turn it into U+FFFD silently (Go's) or
// carry an unencodable string (Python's), so the text would not be what
// the client sent.
func loneSurrogate(body []byte) error {
	hex4 := func(b []byte) (rune, bool) {
		if len(b) < 4 {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[:4]), 16, 16)
		return rune(v), err == nil
	}
	inString := false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(body) {
				return nil
			}
			if body[i+1] != 'u' {
				i++ // a two-character escape (\\, \", \n, …)
				continue
			}
			r, ok := hex4(body[i+2:])
			if !ok {
				return nil // malformed; the decoder says so
			}
			i += 5
			switch {
			case r >= 0xD800 && r <= 0xDBFF:
				if i+6 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
					if lo, ok := hex4(body[i+3:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
						i += 6
						continue
					}
				}
				return bad("", "the body holds a lone UTF-16 surrogate escape (\\u%04x) at byte %d: not a character", r, i-5)
			case r >= 0xDC00 && r <= 0xDFFF:
				return bad("", "the body holds a lone UTF-16 surrogate escape (\\u%04x) at byte %d: not a character", r, i-5)
			}
		}
	}
	return nil
}

// ---- simple routes ----------------------------------------------------------

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
}

func (s *Server) modelCard() map[string]any {
	snap := s.eng.snap()
	return map[string]any{
		"id": s.name, "object": "model", "created": snap.loaded.Unix(), "owned_by": "seedctl",
		"root": snap.dir, "max_model_len": snap.maxLen, "weight_version": snap.version,
	}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"object": "list", "data": []map[string]any{s.modelCard()}})
}

// model is GET /v1/models/{id} (the OpenAI client's models.retrieve).
func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	if err := s.checkModel(r.PathValue("id")); err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, s.modelCard())
}

func (s *Server) statsHandler(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.eng.Stats())
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (s *Server) updateWeights(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ModelPath     string `json:"model_path"`
		WeightVersion string `json:"weight_version"`
		FlushCache    *bool  `json:"flush_cache"`
	}
	reply := func(status int, ok bool, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"success": ok, "message": msg})
	}
	if err := decodeBody(r, &req); err != nil {
		status := http.StatusBadRequest
		var br *badRequest
		if errors.As(err, &br) {
			status = br.status
		}
		reply(status, false, err.Error())
		return
	}
	if err := checkModelDir(req.ModelPath); err != nil {
		reply(http.StatusBadRequest, false, err.Error())
		return
	}
	version := req.WeightVersion
	if version == "" {
		version = strconv.FormatInt(time.Now().UnixNano(), 10)
	}
	if err := s.eng.Swap(r.Context(), req.ModelPath, version); err != nil {
		reply(http.StatusBadRequest, false, err.Error())
		return
	}
	reply(http.StatusOK, true, fmt.Sprintf("Succeeded to update model weights from %s (version %s).", req.ModelPath, version))
}

// ---- request parameters -----------------------------------------------------

// genParams are the sampling parameters shared by both endpoints.
type genParams struct {
	// Fields the OpenAI API has that this server does not implement: a
	// request that sets one gets a 400 naming it, not a silent default.
	Tools          json.RawMessage `json:"tools"`
	ToolChoice     json.RawMessage `json:"tool_choice"`
	ResponseFormat json.RawMessage `json:"response_format"`
	LogitBias      json.RawMessage `json:"logit_bias"`
	BestOf         *int            `json:"best_of"`
	Suffix         json.RawMessage `json:"suffix"`
	StreamOptions  *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens        *int            `json:"max_tokens"`
	MaxCompletion    *int            `json:"max_completion_tokens"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	TopK             *int            `json:"top_k"`
	Seed             *int64          `json:"seed"`
	Stop             json.RawMessage `json:"stop"`
	StopTokenIDs     []int           `json:"stop_token_ids"`
	N                *int            `json:"n"`
	IgnoreEOS        bool            `json:"ignore_eos"`
	SkipSpecial      *bool           `json:"skip_special_tokens"`
	Stream           bool            `json:"stream"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	// More fields other servers take, each accepted only at its no-op
	// value (min_p 0, repetition_penalty 1) or refused by name
	// (functions, function_call, reasoning_effort); user, an end-user id
	// for abuse tracking, is accepted and ignored. Any other field is an
	// error naming it (decodeStrict).
	MinP              *float64        `json:"min_p"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	Functions         json.RawMessage `json:"functions"`
	FunctionCall      json.RawMessage `json:"function_call"`
	ReasoningEffort   json.RawMessage `json:"reasoning_effort"`
	User              string          `json:"user"`
}

type parsedGen struct {
	includeUsage bool // stream_options.include_usage: a last chunk with usage
	maxTokens    int
	params       samplingParams
	seed         *int64
	stops        []string
	stopIDs      map[int]bool
	n            int
	ignoreEOS    bool
	skipSpecial  bool
}

func (g genParams) parse(defaultMax int, vocab int) (parsedGen, error) {
	p := parsedGen{maxTokens: max(0, defaultMax), n: 1, seed: g.Seed, ignoreEOS: g.IgnoreEOS, skipSpecial: true, params: samplingParams{Temperature: 1, TopP: 1}}
	set := func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }
	for _, f := range []struct {
		name string
		on   bool
	}{{"tools", set(g.Tools)}, {"tool_choice", set(g.ToolChoice)}, {"response_format", set(g.ResponseFormat)},
		{"logit_bias", set(g.LogitBias) && string(g.LogitBias) != "{}"}, {"suffix", set(g.Suffix) && string(g.Suffix) != `""`},
		{"best_of", g.BestOf != nil && *g.BestOf != 1},
		{"functions", set(g.Functions)}, {"function_call", set(g.FunctionCall)}, {"reasoning_effort", set(g.ReasoningEffort)},
		{"min_p", g.MinP != nil && *g.MinP != 0}, {"repetition_penalty", g.RepetitionPenalty != nil && *g.RepetitionPenalty != 1}} {
		if f.on {
			return p, bad(f.name, "%s is not supported by this server", f.name)
		}
	}
	if g.StreamOptions != nil {
		if !g.Stream {
			return p, bad("stream_options", "stream_options needs stream: true")
		}
		p.includeUsage = g.StreamOptions.IncludeUsage
	}
	if g.SkipSpecial != nil {
		p.skipSpecial = *g.SkipSpecial
	}
	if g.MaxCompletion != nil {
		g.MaxTokens = g.MaxCompletion
	}
	if g.MaxTokens != nil {
		if *g.MaxTokens < 0 {
			return p, bad("max_tokens", "max_tokens must be >= 0, got %d", *g.MaxTokens)
		}
		p.maxTokens = *g.MaxTokens
	}
	if g.Temperature != nil {
		if *g.Temperature < 0 || *g.Temperature > 100 || math.IsNaN(*g.Temperature) {
			return p, bad("temperature", "temperature must be in [0, 100], got %v", *g.Temperature)
		}
		p.params.Temperature = *g.Temperature
	}
	if g.TopP != nil {
		if !(*g.TopP > 0 && *g.TopP <= 1) {
			return p, bad("top_p", "top_p must be in (0, 1], got %v", *g.TopP)
		}
		p.params.TopP = *g.TopP
	}
	if g.TopK != nil {
		if *g.TopK < -1 {
			return p, bad("top_k", "top_k must be -1 (off) or positive, got %d", *g.TopK)
		}
		p.params.TopK = max(*g.TopK, 0)
	}
	if g.N != nil {
		if *g.N < 1 || *g.N > 64 {
			return p, bad("n", "n must be in [1, 64], got %d", *g.N)
		}
		p.n = *g.N
	}
	if g.PresencePenalty != nil && *g.PresencePenalty != 0 || g.FrequencyPenalty != nil && *g.FrequencyPenalty != 0 {
		return p, bad("presence_penalty", "presence and frequency penalties are not supported")
	}
	if len(g.Stop) > 0 && string(g.Stop) != "null" {
		var one string
		if err := json.Unmarshal(g.Stop, &one); err == nil {
			p.stops = []string{one}
		} else if err := json.Unmarshal(g.Stop, &p.stops); err != nil {
			return p, bad("stop", "stop must be a string or a list of strings")
		}
		for _, s := range p.stops {
			if s == "" {
				return p, bad("stop", "stop strings must not be empty")
			}
		}
	}
	p.stopIDs = map[int]bool{}
	for _, id := range g.StopTokenIDs {
		if id < 0 || id >= vocab {
			return p, bad("stop_token_ids", "stop token id %d is outside the vocabulary (%d)", id, vocab)
		}
		p.stopIDs[id] = true
	}
	return p, nil
}

func (s *Server) checkModel(name string) error {
	if name != "" && name != s.name {
		return &badRequest{status: http.StatusNotFound, param: "model", msg: fmt.Sprintf("The model `%s` does not exist; this server serves `%s`.", name, s.name)}
	}
	return nil
}

// ---- generation plumbing ------------------------------------------------------

type choiceResult struct {
	index  int
	prompt []int
	gen    []tokenChoice
	finish string
	cached int
	snap   *snapshot
}

// generate runs one job per (prompt, choice) and waits for all of them.
// onEvent, when set, sees every token and every end in arrival order (for
// streaming); an error from it cancels the request.
func (s *Server) generate(ctx context.Context, prompts [][]int, p parsedGen, topLogprobs int, onEvent func(idx int, ev genEvent, r *choiceResult) error) ([]choiceResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type tagged struct {
		idx int
		ev  genEvent
	}
	events := make(chan tagged, 256)
	results := make([]choiceResult, len(prompts)*p.n)
	jobs := make([]*genJob, len(results))
	for pi, prompt := range prompts {
		for c := 0; c < p.n; c++ {
			idx := pi*p.n + c
			results[idx] = choiceResult{index: idx, prompt: prompt}
			var seed *int64
			if p.seed != nil {
				v := *p.seed + int64(idx)
				seed = &v
			}
			jobs[idx] = &genJob{
				ctx: ctx, prompt: prompt, maxTokens: p.maxTokens, seed: seed, stops: p.stops,
				stopIDs: p.stopIDs, ignoreEOS: p.ignoreEOS, keepSpec: !p.skipSpecial, events: make(chan genEvent, 64),
				params: samplingParams{Temperature: p.params.Temperature, TopP: p.params.TopP, TopK: p.params.TopK, TopLogprobs: topLogprobs},
			}
		}
	}
	if err := s.eng.submit(ctx, jobs...); err != nil {
		return nil, err
	}
	for idx, j := range jobs {
		go func(idx int, ch chan genEvent) {
			for {
				select {
				case ev := <-ch:
					select {
					case events <- tagged{idx, ev}:
					case <-ctx.Done():
						return
					}
					if ev.done {
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}(idx, j.events)
	}
	for pending := len(results); pending > 0; {
		select {
		case t := <-events:
			r := &results[t.idx]
			if t.ev.tok != nil {
				r.gen = append(r.gen, *t.ev.tok)
			} else {
				pending--
				if t.ev.err != nil {
					return nil, t.ev.err
				}
				r.finish, r.cached, r.snap = t.ev.finish, t.ev.cached, t.ev.snap
			}
			if onEvent != nil {
				if err := onEvent(t.idx, t.ev, r); err != nil {
					return nil, err
				}
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return results, nil
}

// truncateAtStop cuts text at the first stop string, as vLLM does.
func truncateAtStop(text string, stops []string) string {
	cut := len(text)
	for _, s := range stops {
		if i := strings.Index(text, s); i >= 0 && i < cut {
			cut = i
		}
	}
	return text[:cut]
}

func genIDs(gen []tokenChoice) []int {
	ids := make([]int, len(gen))
	for i, g := range gen {
		ids[i] = g.ID
	}
	return ids
}

func tokenText(tok *tokenizer.Tokenizer, id int, asIDs bool) string {
	if asIDs {
		return "token_id:" + strconv.Itoa(id)
	}
	b, err := tok.DecodeBytes([]int{id}, tokenizer.DecodeOptions{})
	if err != nil {
		return ""
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// usage counts each prompt once, whatever n is.
func usage(results []choiceResult, n int) map[string]any {
	prompt, completion, cached := 0, 0, 0
	for _, r := range results {
		completion += len(r.gen)
		if r.index%n == 0 {
			prompt += len(r.prompt)
			cached += r.cached
		}
	}
	return map[string]any{
		"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
		"prompt_tokens_details": map[string]any{"cached_tokens": cached},
	}
}

// ModelName is the served model id.
func (s *Server) ModelName() string { return s.name }

// RequiresKey says whether requests need the API key as a bearer token.
func (s *Server) RequiresKey() bool { return s.key != "" }
