package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seedctl/seedctl/inference/server/servertest"
)

// abuseRSSBudget is the most the server's peak resident memory may grow
// over its warmed-up size while it refuses the abuse table (docs/gpu.md,
// "Reliability"): refused requests must cost their body and a little
// bookkeeping, never a prefill, a score or a results slice.
const abuseRSSBudget = 256 << 20

// abuseRequests are ≥ 50 bad requests; each must be answered 4xx.
func abuseRequests() []struct{ path, body string } {
	var out []struct{ path, body string }
	add := func(path, body string) { out = append(out, struct{ path, body string }{path, body}) }
	long := strings.Repeat("hello world ", 3000)
	many := "[" + strings.TrimSuffix(strings.Repeat("[1],", 5000), ",") + "]"
	for _, b := range []string{
		`{"prompt": [1,2`, `{"prompt": ""}`, `{"prompt": [[]]}`, `{"prompt": []}`, `{"prompt": 5}`, `{"prompt": null}`, `{}`, `[]`, `"x"`,
		`{"prompt": [-1]}`, `{"prompt": [99999999]}`, `{"prompt": "hi", "max_tokens": -1}`, `{"prompt": "hi", "max_tokens": 9223372036854775807}`,
		`{"prompt": "hi", "max_tokens": 100000}`, `{"prompt": "hi", "n": 0}`, `{"prompt": "hi", "n": 65}`, `{"prompt": "hi", "n": -3}`,
		`{"prompt": "hi", "temperature": -1}`, `{"prompt": "hi", "temperature": 1000}`, `{"prompt": "hi", "top_p": 0}`, `{"prompt": "hi", "top_p": 1.5}`,
		`{"prompt": "hi", "top_k": -7}`, `{"prompt": "hi", "logprobs": 21}`, `{"prompt": "hi", "logprobs": -1}`, `{"prompt": "hi", "stop": 3}`,
		`{"prompt": "hi", "stop": [""]}`, `{"prompt": "hi", "stop_token_ids": [-2]}`, `{"prompt": "hi", "presence_penalty": 1}`,
		`{"prompt": "hi", "frequency_penalty": 0.5}`, `{"prompt": "hi", "prompt_logprobs": 1}`, `{"prompt": "hi", "stream": true, "echo": true}`,
		`{"prompt": "hi", "best_of": 4}`, `{"prompt": "hi", "suffix": "z"}`, `{"prompt": "hi", "logit_bias": {"3": 5}}`,
		`{"prompt": "hi", "stream_options": {"include_usage": true}}`, `{"model": "gpt-4", "prompt": "hi"}`, `{"prompt": ` + many + `, "max_tokens": 1}`,
		`{"prompt": [[1,2],[3,4],[5,6],[7,8],[9,10],[11,12],[13,14],[15,16],[17,18],[19,20],[21,22],[23,24],[25,26],[27,28],[29,30],[31,32],[33,34]], "n": 64}`,
		`{"prompt": "` + long + `"}`, "{\"prompt\": \"caf\xe9\"}", `{"prompt": "", "echo": true, "logprobs": 0, "max_tokens": 0}`,
	} {
		add("/v1/completions", b)
	}
	for _, b := range []string{
		`{"messages": []}`, `{"messages": [{"role": "wizard", "content": "x"}]}`, `{"messages": [{"role": "user", "content": "` + long + `"}]}`,
		`{"messages": [{"role": "user", "content": "x"}], "max_tokens": 9223372036854775807}`, `{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}`,
		`{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}`, `{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}`,
		`{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}`, `{"messages": [{"role": "user", "content": 7}]}`,
		`{"messages": "hi"}`, `{"messages": [{"role": "user", "content": "x"}], "n": 100}`,
	} {
		add("/v1/chat/completions", b)
	}
	add("/update_weights_from_disk", `{"model_path": "/nonexistent/checkpoint"}`)
	add("/v1/nothing", `{}`)
	return out
}

func rssKB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	m := regexp.MustCompile(field + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Skipf("no %s in /proc/%d/status", field, pid)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestServeAbuse starts `seedctl serve` on loopback, warms it up, sends
// the abuse table, and checks: every bad request got a 4xx, the process
// is alive and serving, and its peak RSS grew by less than the budget.
func TestServeAbuse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := servertest.WriteTinyCheckpoint(dir, 1); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "serve", "--model", dir, "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "SEEDCTL_TEST_AS_MAIN=1")
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := bufio.NewScanner(out)
	var base string
	for lines.Scan() {
		if m := regexp.MustCompile(`at (http://\S+)/v1`).FindStringSubmatch(lines.Text()); m != nil {
			base = m[1]
			break
		}
	}
	if base == "" {
		t.Fatal("serve printed no address")
	}
	client := &http.Client{Timeout: 20 * time.Second}
	post := func(path, body string) (int, string) {
		resp, err := client.Post(base+path, "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatalf("%s: %v (did the server die?)", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for range 5 { // warm-up: the allocator's and libtorch's steady state
		if code, b := post("/v1/completions", `{"prompt": [1,2,3,4,5,6,7,8], "max_tokens": 8, "echo": true, "logprobs": 0}`); code != 200 {
			t.Fatalf("warm-up: %d %s", code, b)
		}
	}
	pid := cmd.Process.Pid
	warm := rssKB(t, pid, "VmRSS")
	reqs := abuseRequests()
	if len(reqs) < 50 {
		t.Fatalf("%d abuse requests, want at least 50", len(reqs))
	}
	bad := 0
	for _, r := range reqs {
		code, b := post(r.path, r.body)
		// OpenAI routes answer {"error": {"message"}}; the SGLang-dialect
		// publish route {"success": false, "message"}.
		var e struct {
			Error   *struct{ Message string } `json:"error"`
			Message string                    `json:"message"`
		}
		if code/100 != 4 || json.Unmarshal([]byte(b), &e) != nil || ((e.Error == nil || e.Error.Message == "") && e.Message == "") {
			bad++
			t.Errorf("%s %.100s: %d %.200s, want a 4xx with a message", r.path, r.body, code, b)
		}
	}
	peak := rssKB(t, pid, "VmHWM")
	t.Logf("%d abuse requests: %d answered 4xx; RSS after warm-up %d MiB, peak %d MiB", len(reqs), len(reqs)-bad, warm>>10, peak>>10)
	if grown := (peak - warm) << 10; grown > abuseRSSBudget {
		t.Errorf("peak RSS grew by %d MiB over the warmed-up %d MiB; budget %d MiB", grown>>20, warm>>10, abuseRSSBudget>>20)
	}
	if code, b := post("/v1/completions", `{"prompt": "hi", "max_tokens": 2}`); code != 200 {
		t.Errorf("after the abuse: %d %s", code, b)
	}
}
