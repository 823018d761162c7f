package inference

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
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

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

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
	port, err := freePort()
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
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.partial + string(b)
	parts := strings.Split(s, "\n")
	t.partial = parts[len(parts)-1]
	for _, l := range parts[:len(parts)-1] {
		t.lines = append(t.lines, l)
	}
	if over := len(t.lines) - t.max; over > 0 {
		t.lines = append([]string(nil), t.lines[over:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if t.partial != "" {
		lines = append(append([]string(nil), lines...), t.partial)
	}
	if over := len(lines) - t.max; over > 0 {
		lines = lines[over:]
	}
	return strings.Join(lines, "\n")
}

// LaunchSpec describes a vLLM or SGLang server seedctl starts itself.
type LaunchSpec struct {
	// Command is the program: "vllm" for vLLM, "python3" for SGLang.
	Command   string
	ModelDir  string
	ExtraArgs []string
	Env       []string
}

// Launch starts a vLLM or SGLang server for cfg (with the flags its publish
// mode needs) and returns a backend that stops it on Close.
func Launch(ctx context.Context, ls LaunchSpec, cfg Config, log zerolog.Logger) (Backend, error) {
	if ls.ModelDir == "" {
		return nil, errors.New("launching an inference server: model dir is empty")
	}
	if cfg.Model == "" {
		cfg.Model = "policy"
	}
	spec := ProcessSpec{Name: cfg.Kind, HealthPath: "/health"}
	switch cfg.Kind {
	case "vllm":
		cmd := ls.Command
		if cmd == "" {
			cmd = "vllm"
		}
		spec.Args = []string{cmd, "serve", ls.ModelDir, "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", cfg.Model}
		if cfg.VLLMPublish == "lora" {
			spec.Args = append(spec.Args, "--enable-lora")
			spec.Env = append(spec.Env, "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1")
		} else {
			spec.Args = append(spec.Args, "--enable-sleep-mode")
			spec.Env = append(spec.Env, "VLLM_SERVER_DEV_MODE=1")
			cfg.ServedDir = ls.ModelDir
		}
	case "sglang":
		cmd := ls.Command
		if cmd == "" {
			cmd = "python3"
		}
		spec.Args = []string{cmd, "-m", "sglang.launch_server", "--model-path", ls.ModelDir, "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", cfg.Model}
		if cfg.Colocated {
			spec.Args = append(spec.Args, "--enable-memory-saver")
		}
	default:
		return nil, fmt.Errorf("launching an inference server: kind %q: want vllm or sglang", cfg.Kind)
	}
	spec.Args = append(spec.Args, ls.ExtraArgs...)
	spec.Env = append(spec.Env, ls.Env...)
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
	case *sglangBackend:
		bb.stop = p.Stop
	}
	return b, nil
}
