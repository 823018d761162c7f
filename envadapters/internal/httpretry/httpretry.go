// Package httpretry sends one JSON request to an environment-side server
// (AgentGym env server, Search-R1 retriever), retrying what a restart or an
// overloaded server causes: connection errors, timeouts and 5xx answers.
// 4xx answers and a cancelled context stop at once.
package httpretry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Request is one call. Payload nil sends no body.
type Request struct {
	Method   string
	URL      string
	Payload  []byte
	RetryFor time.Duration // total time spent retrying; 0 retries until ctx ends
	MaxBytes int64         // largest answer read; 0 means 16 MiB
	// Once sends the request one time: no retry on a 5xx or a broken
	// connection (a call whose failure is the server's answer, not an
	// outage, such as closing an env the server no longer has).
	Once bool
	// Header holds extra request headers.
	Header map[string]string
}

// Do sends r with hc and returns the 200 answer's body and how many attempts
// it took.
func Do(ctx context.Context, hc *http.Client, r Request) ([]byte, int, error) {
	limit := r.MaxBytes
	if limit <= 0 {
		limit = 16 << 20
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 100*time.Millisecond, 2*time.Second, r.RetryFor
	attempts := 0
	var raw []byte
	err := backoff.Retry(func() error {
		attempts++
		var rd io.Reader
		if r.Payload != nil {
			rd = bytes.NewReader(r.Payload)
		}
		req, err := http.NewRequestWithContext(ctx, r.Method, r.URL, rd)
		if err != nil {
			return backoff.Permanent(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for k, v := range r.Header {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return backoff.Permanent(ctx.Err())
			}
			if r.Once {
				return backoff.Permanent(err)
			}
			return err
		}
		defer resp.Body.Close()
		raw, err = io.ReadAll(io.LimitReader(resp.Body, limit))
		if err != nil {
			return err
		}
		if resp.StatusCode >= 500 {
			err := fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(raw)))
			if r.Once {
				return backoff.Permanent(err)
			}
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return backoff.Permanent(fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(raw))))
		}
		return nil
	}, backoff.WithContext(b, ctx))
	if err != nil {
		return nil, attempts, err
	}
	return raw, attempts, nil
}
