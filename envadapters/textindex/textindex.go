// Package textindex is the BM25 full-text index the built-in environments
// search with (WebShop's product search, Search-R1's passage retrieval),
// backed by bleve's in-memory index with BM25 scoring.
package textindex

import (
	"fmt"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/search/query"
)

// Doc is one indexed document.
type Doc struct {
	ID   string
	Text string
}

// Hit is a search result.
type Hit struct {
	ID    string
	Score float64
	Rank  int // 0-based
}

// Index is an immutable in-memory BM25 index, safe for concurrent searches.
type Index struct {
	idx bleve.Index
	n   int
}

// Build indexes docs (IDs must be unique).
func Build(docs []Doc) (*Index, error) {
	m := bleve.NewIndexMapping()
	m.ScoringModel = "bm25"
	idx, err := bleve.NewMemOnly(m)
	if err != nil {
		return nil, fmt.Errorf("building a text index: %w", err)
	}
	b := idx.NewBatch()
	seen := map[string]bool{}
	for _, d := range docs {
		if seen[d.ID] {
			return nil, fmt.Errorf("building a text index: duplicate id %q", d.ID)
		}
		seen[d.ID] = true
		if err := b.Index(d.ID, map[string]any{"text": d.Text}); err != nil {
			return nil, fmt.Errorf("building a text index: document %s: %w", d.ID, err)
		}
		if b.Size() >= 2000 {
			if err := idx.Batch(b); err != nil {
				return nil, fmt.Errorf("building a text index: %w", err)
			}
			b = idx.NewBatch()
		}
	}
	if err := idx.Batch(b); err != nil {
		return nil, fmt.Errorf("building a text index: %w", err)
	}
	return &Index{idx: idx, n: len(docs)}, nil
}

// Len is the number of documents.
func (x *Index) Len() int { return x.n }

// Search returns up to k hits for a free-text query, best first, ties by id
// so results are deterministic. An empty query matches nothing.
func (x *Index) Search(q string, k, offset int) ([]Hit, int, error) {
	if k <= 0 {
		return nil, 0, nil
	}
	mq := query.NewMatchQuery(q)
	mq.SetField("text")
	req := bleve.NewSearchRequestOptions(mq, k, offset, false)
	req.SortBy([]string{"-_score", "_id"})
	res, err := x.idx.Search(req)
	if err != nil {
		return nil, 0, fmt.Errorf("searching %q: %w", q, err)
	}
	out := make([]Hit, len(res.Hits))
	for i, h := range res.Hits {
		out[i] = Hit{ID: h.ID, Score: h.Score, Rank: offset + i}
	}
	return out, int(res.Total), nil
}
