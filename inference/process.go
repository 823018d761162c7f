package inference

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/seedctl/seedctl/internal/loopback"
)

// ProcessSpec describes an inference server seedctl starts and supervises.
type ProcessSpec struct {
	Name string
	// Args is the command line; "{port}" is replaced by a free port.
	Args []string
	// Env is added to the environment.
	Env []string
	// HealthPath is polled until it answers 200.
	HealthPath string
	// StartTimeout bounds the wait for health (model loading can be slow).
	StartTimeout time.Duration
}

// Process is a supervised server: a reaper closes Done when it exits, and
// the last lines of its output go into errors.
type Process struct {
	Port int
	URL  string

	spec ProcessSpec
	cmd  *exec.Cmd
	tail *tailBuffer
	done chan struct{}
	err  error
	log  zerolog.Logger
}

// ErrProcessExited means a supervised server died.
var ErrProcessExited = errors.New("inference server process exited")

// StartProcess launches spec and waits until its health endpoint answers.
func StartProcess(ctx context.Context, spec ProcessSpec, log zerolog.Logger) (*Process, error) {
	if len(spec.Args) == 0 {
		return nil, errors.New("starting an inference server: empty command")
	}
	if spec.HealthPath == "" {
		spec.HealthPath = "/health"
	}
	if spec.StartTimeout == 0 {
		spec.StartTimeout = 15 * time.Minute
	}
	port, err := loopback.FreePort()
	if err != nil {
		return nil, fmt.Errorf("starting %s: finding a free port: %w", spec.Name, err)
	}
	args := make([]string, len(spec.Args))
	for i, a := range spec.Args {
		args[i] = strings.ReplaceAll(a, "{port}", strconv.Itoa(port))
	}
	p := &Process{Port: port, URL: "http://127.0.0.1:" + strconv.Itoa(port), spec: spec, tail: &tailBuffer{max: 40}, done: make(chan struct{}), log: log}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Env = append(os.Environ(), spec.Env...)
	p.cmd.Stdout, p.cmd.Stderr = p.tail, p.tail
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // stop kills its children too
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", spec.Name, args[0], err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	log.Info().Str("server", spec.Name).Int("pid", p.cmd.Process.Pid).Str("url", p.URL).Msg("started inference server; waiting for health")
	if err := p.waitUntilRunning(ctx); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

func (p *Process) waitUntilRunning(ctx context.Context) error {
	deadline := time.NewTimer(p.spec.StartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	hc := &http.Client{Timeout: 2 * time.Second}
	start := time.Now()
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited while starting (%v): %w; last output:\n%s", p.spec.Name, p.err, ErrProcessExited, p.tail.String())
		case <-deadline.C:
			return fmt.Errorf("%s did not become healthy within %s; last output:\n%s", p.spec.Name, p.spec.StartTimeout, p.tail.String())
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			resp, err := hc.Get(p.URL + p.spec.HealthPath)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					p.log.Info().Str("server", p.spec.Name).Dur("after", time.Since(start)).Msg("inference server healthy")
					return nil
				}
			}
		}
	}
}

// Done is closed when the process exits.
func (p *Process) Done() <-chan struct{} { return p.done }

// Tail is the last lines the process printed.
func (p *Process) Tail() string { return p.tail.String() }

// Stop sends SIGTERM to the process group, then SIGKILL after 20 s.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
	return nil
}

// tailBuffer keeps the last max lines written to it.
type tailBuffer struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial string
	// lastError is the last line that names an error (a Python
	// traceback's cause is often above its last 40 lines).
	lastError string
	// exceptions are the first distinct Python exception lines
	// ("ValueError: …"), in order: in a chain of tracebacks (vLLM's worker
	// failing, then its engine) the first is the cause, the last only
	// says that something failed.
	exceptions []string
}

// maxExceptions is how many exception lines a tail keeps.
const maxExceptions = 4

// exceptionLine matches a Python exception line, "XError: message" or
// "XException: message", also behind a log prefix.
var exceptionLine = regexp.MustCompile(`\b[A-Z][A-Za-z]*(Error|Exception): \S`)

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.partial + string(b)
	parts := strings.Split(s, "\n")
	t.partial = parts[len(parts)-1]
	for _, l := range parts[:len(parts)-1] {
		t.lines = append(t.lines, l)
		if looksLikeError(l) {
			t.lastError = strings.TrimSpace(l)
		}
		if loc := exceptionLine.FindStringIndex(l); loc != nil && len(t.exceptions) < maxExceptions {
			if e := strings.TrimSpace(l[loc[0]:]); !slices.Contains(t.exceptions, e) {
				t.exceptions = append(t.exceptions, e)
			}
		}
	}
	if over := len(t.lines) - t.max; over > 0 {
		t.lines = append([]string(nil), t.lines[over:]...)
	}
	return len(b), nil
}

// looksLikeError: "ValueError: …", "RuntimeError: …", "ERROR …" lines.
func looksLikeError(l string) bool {
	l = strings.TrimSpace(l)
	if strings.HasPrefix(l, "File ") || strings.HasPrefix(l, "raise ") {
		return false
	}
	return strings.Contains(l, "Error: ") || strings.Contains(l, " ERROR ") || strings.HasPrefix(l, "ERROR")
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	var above []string
	for _, e := range t.exceptions {
		shown := false
		for _, l := range lines {
			shown = shown || strings.Contains(l, e)
		}
		if !shown {
			above = append(above, "(exception above the tail) "+e)
		}
	}
	if t.lastError != "" && !slices.Contains(lines, t.lastError) && !slices.Contains(t.exceptions, t.lastError) {
		above = append(above, "(error line above the tail) "+t.lastError)
	}
	if len(above) > 0 {
		lines = append(append(above, "…"), lines...)
	}
	if t.partial != "" {
		lines = append(append([]string(nil), lines...), t.partial)
	}
	if over := len(lines) - t.max - len(above) - 1; len(above) > 0 && over > 0 {
		// Keep the lines from above; drop the tail's oldest.
		lines = append(lines[:len(above)+1], lines[len(above)+1+over:]...)
	} else if over := len(lines) - t.max; len(above) == 0 && over > 0 {
		lines = lines[over:]
	}
	return strings.Join(lines, "\n")
}

// LaunchSpec describes a vLLM or SGLang server seedctl starts itself.
type LaunchSpec struct {
	// Command is the program: "vllm" for vLLM, "python3" for SGLang.
	Command string
	// ModelDir is the checkpoint to serve. With vLLM reload publishing
	// the server is started from a served copy of it in Config.ServedDir
	// (see WriteServedCopy), which later publishes rewrite.
	ModelDir  string
	ExtraArgs []string
	Env       []string
	// Platform is "cpu" or "gpu"; empty: "gpu" when this machine has an
	// NVIDIA or AMD GPU device, else "cpu" (vLLM's CPU build).
	Platform string
	// StartTimeout bounds the wait for health (0: 15 minutes).
	StartTimeout time.Duration
}

// DetectPlatform says whether a server started here would run on a GPU:
// "gpu" when an NVIDIA (/dev/nvidiactl) or AMD (/dev/kfd) device exists.
func DetectPlatform() string {
	for _, d := range []string{"/dev/nvidiactl", "/dev/kfd"} {
		if _, err := os.Stat(d); err == nil {
			return "gpu"
		}
	}
	return "cpu"
}

// ErrUnservable means a launch was refused before starting the server:
// the model or the settings cannot work on that server and platform.
var ErrUnservable = errors.New("cannot be served this way")

// minCPUHeadDim: vLLM's CPU attention kernels (0.32) have no head_dim
// below 32; a smaller one passes the health check and then kills the
// engine on the first request ("Unsupported CPU attention configuration:
// head_dim=16").
const minCPUHeadDim = 32

// CheckServable refuses, with the reason, a model or setting that a
// server of cfg.Kind on platform ("cpu" or "gpu") is known not to serve.
func CheckServable(modelDir string, cfg Config, platform string) error {
	if cfg.Kind != "vllm" || platform != "cpu" {
		return nil
	}
	if cfg.Colocated && cfg.VLLMPublish != "lora" {
		return fmt.Errorf("vLLM's CPU platform has no sleep mode (it refuses --enable-sleep-mode), so a colocated server cannot release its memory before updates: set backend.colocated false (trainer and server then share the machine's RAM): %w", ErrUnservable)
	}
	hd, err := headDim(modelDir)
	if err != nil {
		return fmt.Errorf("reading %s's shape: %w", modelDir, err)
	}
	if hd > 0 && hd < minCPUHeadDim {
		return fmt.Errorf("%s has head_dim %d; vLLM's CPU attention supports head_dim %d and up (a smaller one kills its engine on the first request): serve it with the embedded backend, or use a model of another shape: %w", modelDir, hd, minCPUHeadDim, ErrUnservable)
	}
	return nil
}

// headDim reads config.json's head_dim, or hidden_size/num_attention_heads
// (0 when neither is there).
func headDim(dir string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return 0, err
	}
	var c struct {
		HeadDim int `json:"head_dim"`
		Hidden  int `json:"hidden_size"`
		Heads   int `json:"num_attention_heads"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return 0, fmt.Errorf("config.json: %w", err)
	}
	if c.HeadDim > 0 {
		return c.HeadDim, nil
	}
	if c.Heads > 0 {
		return c.Hidden / c.Heads, nil
	}
	return 0, nil
}

// hasFlag says whether args set any of the flags (as --f or --f=v).
func hasFlag(args []string, flags ...string) bool {
	for _, a := range args {
		for _, f := range flags {
			if a == f || strings.HasPrefix(a, f+"=") {
				return true
			}
		}
	}
	return false
}

// LaunchArgs is the command line and environment Launch starts for ls and
// cfg on platform (the served folder is cfg.ServedDir for vLLM reload).
func LaunchArgs(ls LaunchSpec, cfg Config, platform string) (args, env []string, err error) {
	model := cfg.Model
	if model == "" {
		model = "policy"
	}
	switch cfg.Kind {
	case "vllm":
		cmd := ls.Command
		if cmd == "" {
			cmd = "vllm"
		}
		dir := ls.ModelDir
		if cfg.VLLMPublish != "lora" {
			if cfg.ServedDir == "" {
				return nil, nil, errors.New("launching vLLM for reload publishing: served_dir (the scratch folder it serves and publishes rewrite) is not set")
			}
			dir = cfg.ServedDir
		}
		args = []string{cmd, "serve", dir, "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", model}
		if cfg.VLLMPublish == "lora" {
			args = append(args, "--enable-lora")
			env = append(env, "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1")
		} else {
			// Dev mode serves /collective_rpc (reload), /sleep and
			// /is_sleeping; sleep mode only where memory is shared.
			env = append(env, "VLLM_SERVER_DEV_MODE=1")
			if cfg.Colocated {
				args = append(args, "--enable-sleep-mode")
			}
		}
		if platform == "cpu" && !hasFlag(ls.ExtraArgs, "--enable-chunked-prefill", "--no-enable-chunked-prefill") {
			// vLLM 0.32's CPU engine dies on seeded sampling with
			// chunked prefill ("CPU Generator does not use offset", a
			// vLLM bug); seedctl seeds every rollout request.
			args = append(args, "--no-enable-chunked-prefill")
		}
	case "sglang":
		cmd := ls.Command
		if cmd == "" {
			cmd = "python3"
		}
		args = []string{cmd, "-m", "sglang.launch_server", "--model-path", ls.ModelDir, "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", model}
		if cfg.Colocated {
			args = append(args, "--enable-memory-saver")
		}
	default:
		return nil, nil, fmt.Errorf("launching an inference server: kind %q: want vllm or sglang", cfg.Kind)
	}
	args = append(args, ls.ExtraArgs...)
	env = append(env, ls.Env...)
	return args, env, nil
}

// Launch starts a vLLM or SGLang server for cfg (with the flags its publish
// mode and platform need) and returns a backend that stops it on Close.
// For vLLM reload publishing it first writes a served copy of ls.ModelDir
// into cfg.ServedDir and serves that. A model or setting the server is
// known not to serve is refused before anything starts (CheckServable).
func Launch(ctx context.Context, ls LaunchSpec, cfg Config, log zerolog.Logger) (Backend, error) {
	if ls.ModelDir == "" {
		return nil, errors.New("launching an inference server: model dir is empty")
	}
	if cfg.Model == "" {
		cfg.Model = "policy"
	}
	platform := ls.Platform
	if platform == "" {
		platform = DetectPlatform()
	}
	if err := CheckServable(ls.ModelDir, cfg, platform); err != nil {
		return nil, fmt.Errorf("launching %s: %w", cfg.Kind, err)
	}
	args, env, err := LaunchArgs(ls, cfg, platform)
	if err != nil {
		return nil, err
	}
	if cfg.Kind == "vllm" && cfg.VLLMPublish != "lora" {
		if _, err := WriteServedCopy(ls.ModelDir, cfg.ServedDir); err != nil {
			return nil, fmt.Errorf("launching vLLM: %w", err)
		}
	}
	if cfg.Kind == "vllm" && cfg.VLLMPublish == "lora" {
		// The base is served from its own folder: vLLM would load any
		// other *.safetensors there (an optimizer's state) as weights.
		if stray, err := strayWeightFiles(ls.ModelDir); err != nil {
			return nil, fmt.Errorf("launching vLLM: %w", err)
		} else if len(stray) > 0 {
			return nil, fmt.Errorf("launching vLLM on %s: it holds %s besides the model's weights, which vLLM would load as weights; serve a copy without them (seedctl model served-copy): %w", ls.ModelDir, strings.Join(stray, ", "), ErrUnservable)
		}
	}
	spec := ProcessSpec{Name: cfg.Kind, Args: args, Env: env, HealthPath: "/health", StartTimeout: ls.StartTimeout}
	p, err := StartProcess(ctx, spec, log)
	if err != nil {
		return nil, err
	}
	cfg.BaseURL = p.URL
	b, err := NewRemote(cfg, log)
	if err != nil {
		p.Stop()
		return nil, err
	}
	switch bb := b.(type) {
	case *vllmBackend:
		bb.stop = p.Stop
		// Started from the served copy just written: awake, untied.
		bb.known, bb.servedChecked = true, true
		bb.http.dead = p.exited
	case *sglangBackend:
		bb.stop = p.Stop
		bb.http.dead = p.exited
	}
	return b, nil
}

// exited is nil while the process runs, else an error naming how it ended
// and the last lines it printed (what a request's "connection refused"
// does not say).
func (p *Process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("the %s server exited (%v): %w; its last output:\n%s", p.spec.Name, p.err, ErrProcessExited, p.tail.String())
	default:
		return nil
	}
}

// strayWeightFiles lists dir's weight-like files that are not the model's
// own weights (model.safetensors or its index's shards).
func strayWeightFiles(dir string) ([]string, error) {
	weights, _, err := modelWeightFiles(dir)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var stray []string
	for _, e := range entries {
		if isWeightLike(e.Name()) && !slices.Contains(weights, e.Name()) {
			stray = append(stray, e.Name())
		}
	}
	return stray, nil
}
