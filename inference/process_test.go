package inference

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seedctl/seedctl/inference/vllmfake"
)

// TestMain lets the test binary play a server process: run with
// "fake-server MODE PORT" it serves /health (MODE ok), dies at once after
// printing to stderr (MODE crash), or never answers (MODE hang).
func TestMain(m *testing.M) {
	if os.Getenv("SEEDCTL_FAKE_VLLM") == "1" {
		// Launch's "vllm serve DIR ..." with this binary as the program.
		os.Exit(vllmfake.Main(os.Args[1:], os.Stderr))
	}
	if len(os.Args) == 4 && os.Args[1] == "fake-server" {
		mode, port := os.Args[2], os.Args[3]
		switch mode {
		case "crash":
			fmt.Fprintln(os.Stderr, "loading model...")
			fmt.Fprintln(os.Stderr, "CUDA error: out of memory")
			os.Exit(3)
		case "hang":
			time.Sleep(time.Hour)
		}
		http.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
		fmt.Fprintln(os.Stderr, "serving on", port)
		http.ListenAndServe("127.0.0.1:"+port, nil)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestStartProcessHealthy(t *testing.T) {
	p, err := StartProcess(context.Background(), ProcessSpec{Name: "fake", Args: []string{os.Args[0], "fake-server", "ok", "{port}"}, StartTimeout: 20 * time.Second}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(p.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health after start: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("process still running after Stop")
	}
	if !strings.Contains(p.Tail(), "serving on") {
		t.Errorf("tail %q", p.Tail())
	}
}

func TestStartProcessCrashReportsOutput(t *testing.T) {
	_, err := StartProcess(context.Background(), ProcessSpec{Name: "fake", Args: []string{os.Args[0], "fake-server", "crash", "{port}"}, StartTimeout: 20 * time.Second}, testLog(t))
	if !errors.Is(err, ErrProcessExited) || !strings.Contains(err.Error(), "CUDA error: out of memory") {
		t.Fatalf("err = %v", err)
	}
}

func TestStartProcessTimeout(t *testing.T) {
	start := time.Now()
	_, err := StartProcess(context.Background(), ProcessSpec{Name: "fake", Args: []string{os.Args[0], "fake-server", "hang", "{port}"}, StartTimeout: time.Second}, testLog(t))
	if err == nil || !strings.Contains(err.Error(), "did not become healthy") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 15*time.Second {
		t.Errorf("took %s", time.Since(start))
	}
}

func TestStartProcessMissingBinary(t *testing.T) {
	_, err := StartProcess(context.Background(), ProcessSpec{Name: "vllm", Args: []string{"/nonexistent/vllm", "serve"}}, testLog(t))
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/vllm") {
		t.Fatalf("err = %v", err)
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 3}
	fmt.Fprint(tb, "a\nb\nc\nd\ne")
	if got := tb.String(); got != "c\nd\ne" {
		t.Errorf("tail %q", got)
	}
}

// A chain of Python tracebacks (vLLM's worker, then its engine): the
// tail shows the first exception, the cause, even when it scrolled out.
func TestTailBufferKeepsTheCause(t *testing.T) {
	tb := &tailBuffer{max: 3}
	fmt.Fprint(tb, "(VllmWorker-0 pid=1) ERROR [multiproc_executor.py:953] Traceback (most recent call last):\n"+
		"(VllmWorker-0 pid=1) ERROR [multiproc_executor.py:953] ValueError: Available memory on node 0 (18.99/23.54 GiB) is less than desired\n"+
		"x\ny\nz\nRuntimeError: Engine core initialization failed. See root cause above.\n")
	got := tb.String()
	if !strings.Contains(got, "(exception above the tail) ValueError: Available memory on node 0") {
		t.Errorf("the cause is not shown:\n%s", got)
	}
	if !strings.HasSuffix(got, "RuntimeError: Engine core initialization failed. See root cause above.") || !strings.Contains(got, "z\n") {
		t.Errorf("the tail is not kept:\n%s", got)
	}
	if strings.Count(got, "RuntimeError") != 1 {
		t.Errorf("an exception in the tail is repeated above it:\n%s", got)
	}
}
