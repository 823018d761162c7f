package searchqa

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/seedctl/seedctl/envadapters/internal/httpretry"
)

// Search-R1's retrieval server: POST /retrieve {"queries": [...], "topk": k,
// "return_scores": true} → {"result": [[{"document": {"id", "contents"},
// "score"}, ...], ...]}. contents is the title in quotes on the first line,
// then the text.

// RetrieverConfig points at a retrieval server.
type RetrieverConfig struct {
	URL      string // e.g. http://127.0.0.1:8000/retrieve
	Timeout  time.Duration
	RetryFor time.Duration
}

// DefaultRetrieverConfig returns defaults; a URL without a path gets /retrieve.
func DefaultRetrieverConfig(url string) RetrieverConfig {
	return RetrieverConfig{URL: url, Timeout: 30 * time.Second, RetryFor: 20 * time.Second}
}

// RetrieverClient is a Searcher over a Search-R1 retrieval server.
type RetrieverClient struct {
	cfg RetrieverConfig
	hc  *http.Client
}

// ErrRetriever marks retrieval server failures.
var ErrRetriever = errors.New("retrieval server error")

// NewRetrieverClient validates cfg.
func NewRetrieverClient(cfg RetrieverConfig) (*RetrieverClient, error) {
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("retriever url %q: want http(s)://host:port[/retrieve]", cfg.URL)
	}
	if strings.Count(cfg.URL, "/") == 2 {
		cfg.URL += "/retrieve"
	}
	if cfg.Timeout <= 0 {
		return nil, errors.New("retriever timeout must be positive")
	}
	return &RetrieverClient{cfg: cfg, hc: &http.Client{Timeout: cfg.Timeout}}, nil
}

type retrieveRequest struct {
	Queries      []string `json:"queries"`
	TopK         int      `json:"topk"`
	ReturnScores bool     `json:"return_scores"`
}

type retrievedDoc struct {
	Document struct {
		ID       any    `json:"id"`
		Contents string `json:"contents"`
	} `json:"document"`
	Score float64 `json:"score"`
}

type retrieveResponse struct {
	Result [][]retrievedDoc `json:"result"`
	Error  any              `json:"error"`
}

// Search sends one query, retrying connection errors, timeouts and 5xx.
func (c *RetrieverClient) Search(ctx context.Context, query string, k int) ([]Passage, error) {
	body, _ := json.Marshal(retrieveRequest{Queries: []string{query}, TopK: k, ReturnScores: true})
	raw, attempts, err := httpretry.Do(ctx, c.hc, httpretry.Request{Method: "POST", URL: c.cfg.URL, Payload: body, RetryFor: c.cfg.RetryFor, MaxBytes: 32 << 20})
	var resp retrieveResponse
	if err == nil {
		if jerr := json.Unmarshal(raw, &resp); jerr != nil {
			err = fmt.Errorf("answer is not JSON: %v", jerr)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("retrieving %q from %s (%d attempts): %w: %w", query, c.cfg.URL, attempts, ErrRetriever, err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("retrieving %q from %s: the server says %v: %w", query, c.cfg.URL, resp.Error, ErrRetriever)
	}
	if len(resp.Result) != 1 {
		return nil, fmt.Errorf("retrieving %q from %s: %d result lists for 1 query: %w", query, c.cfg.URL, len(resp.Result), ErrRetriever)
	}
	out := make([]Passage, 0, len(resp.Result[0]))
	for _, d := range resp.Result[0] {
		t, text := splitContents(d.Document.Contents)
		out = append(out, Passage{ID: fmt.Sprint(d.Document.ID), Title: t, Text: text, Score: d.Score})
	}
	return out, nil
}

// splitContents reads Search-R1's "\"Title\"\ntext" layout.
func splitContents(c string) (title, text string) {
	first, rest, ok := strings.Cut(c, "\n")
	if !ok {
		return "", strings.TrimSpace(c)
	}
	return strings.Trim(strings.TrimSpace(first), `"`), strings.TrimSpace(rest)
}

// RetrieverHandler serves a Searcher over Search-R1's protocol, so the
// built-in corpus can stand in for a Wikipedia index (and so the client is
// tested against a real peer of ours).
func RetrieverHandler(s Searcher) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method != http.MethodPost || r.URL.Path != "/retrieve" {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]any{"error": "POST /retrieve only"})
			return
		}
		var req retrieveRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil || req.TopK < 0 {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]any{"error": "want {\"queries\": [...], \"topk\": k}"})
			return
		}
		if req.TopK == 0 {
			req.TopK = 3
		}
		result := make([][]map[string]any, len(req.Queries))
		for i, q := range req.Queries {
			ps, err := s.Search(r.Context(), q, req.TopK)
			if err != nil {
				w.WriteHeader(http.StatusInternalServerError)
				json.NewEncoder(w).Encode(map[string]any{"error": err.Error()})
				return
			}
			result[i] = []map[string]any{}
			for _, p := range ps {
				doc := map[string]any{"document": map[string]any{"id": p.ID, "contents": fmt.Sprintf("%q\n%s", p.Title, p.Text)}}
				if req.ReturnScores {
					doc["score"] = p.Score
				}
				result[i] = append(result[i], doc)
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"result": result})
	})
}
