package textindex

import (
	"fmt"
	"strings"
	"testing"
)

func TestBM25Ranking(t *testing.T) {
	docs := []Doc{
		{ID: "a", Text: "red running shoes for men"},
		{ID: "b", Text: "blue running shoes"},
		{ID: "c", Text: "red shirt cotton"},
		{ID: "d", Text: "running running running shoes shoes red red"},
		{ID: "e", Text: "coffee beans dark roast"},
	}
	x, err := Build(docs)
	if err != nil {
		t.Fatal(err)
	}
	hits, total, err := x.Search("red running shoes", 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if total != 4 || len(hits) != 4 {
		t.Fatalf("total %d hits %v", total, hits)
	}
	if hits[len(hits)-1].ID != "c" || hits[0].Score < hits[1].Score {
		t.Errorf("ranking %v", hits)
	}
	// BM25 saturates term frequency: repeating words helps less and less.
	var a, d float64
	for _, h := range hits {
		switch h.ID {
		case "a":
			a = h.Score
		case "d":
			d = h.Score
		}
	}
	if d > 2*a {
		t.Errorf("repetition scored %v vs %v: not BM25-like", d, a)
	}
	page2, _, _ := x.Search("red running shoes", 2, 2)
	if len(page2) != 2 || page2[0].Rank != 2 || page2[0].ID != hits[2].ID {
		t.Errorf("offset page %v", page2)
	}
	if none, _, _ := x.Search("zebra", 5, 0); len(none) != 0 {
		t.Errorf("unmatched query found %v", none)
	}
	if _, err := Build([]Doc{{ID: "x"}, {ID: "x"}}); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("duplicate ids: %v", err)
	}
}

func TestTiesAreDeterministic(t *testing.T) {
	var docs []Doc
	for i := 0; i < 30; i++ {
		docs = append(docs, Doc{ID: fmt.Sprintf("d%02d", i), Text: "same words here"})
	}
	x, _ := Build(docs)
	a, _, _ := x.Search("same words", 10, 0)
	b, _, _ := x.Search("same words", 10, 0)
	if fmt.Sprint(a) != fmt.Sprint(b) || a[0].ID != "d00" {
		t.Errorf("tied results %v then %v", a, b)
	}
}
