package httpretry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestDo(t *testing.T) {
	tests := []struct {
		name         string
		statuses     []int // answer per attempt; the last one repeats
		method       string
		payload      []byte
		wantBody     string
		wantAttempts int
		wantErr      string
	}{
		{name: "ok first time", statuses: []int{200}, method: "POST", payload: []byte(`{"a":1}`), wantBody: `{"a":1}`, wantAttempts: 1},
		{name: "5xx retried", statuses: []int{503, 502, 200}, method: "POST", payload: []byte(`{"b":2}`), wantBody: `{"b":2}`, wantAttempts: 3},
		{name: "4xx stops", statuses: []int{404}, method: "GET", wantAttempts: 1, wantErr: "HTTP 404"},
		{name: "5xx until deadline", statuses: []int{500}, method: "GET", wantErr: "HTTP 500"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				i := int(n.Add(1)) - 1
				if i >= len(tc.statuses) {
					i = len(tc.statuses) - 1
				}
				if r.Method != tc.method {
					t.Errorf("method %s, want %s", r.Method, tc.method)
				}
				body, _ := io.ReadAll(r.Body)
				w.WriteHeader(tc.statuses[i])
				if tc.statuses[i] == 200 {
					w.Write(body) // echo: the payload is resent intact on every attempt
				} else {
					w.Write([]byte("nope"))
				}
			}))
			defer srv.Close()
			raw, attempts, err := Do(context.Background(), srv.Client(), Request{Method: tc.method, URL: srv.URL, Payload: tc.payload, RetryFor: 500 * time.Millisecond})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if string(raw) != tc.wantBody {
				t.Errorf("body %q, want %q", raw, tc.wantBody)
			}
			if tc.wantAttempts > 0 && attempts != tc.wantAttempts {
				t.Errorf("attempts %d, want %d", attempts, tc.wantAttempts)
			}
			if tc.wantAttempts == 0 && attempts < 2 {
				t.Errorf("attempts %d: a persistent 5xx should be retried", attempts)
			}
		})
	}
}

func TestDoStopsOnCancel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, _, err := Do(ctx, srv.Client(), Request{Method: "GET", URL: srv.URL})
	if err == nil {
		t.Fatal("Do succeeded against a server that always fails")
	}
}
