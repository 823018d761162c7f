package benchmarks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/seedctl/seedctl/internal/atomicfile"
	"github.com/seedctl/seedctl/internal/ckpthash"
	"github.com/seedctl/seedctl/internal/jsonl"
	"github.com/seedctl/seedctl/orchestrator"
)

// LedgerFile is the results folder's record of every finished experiment:
// its eval points with the per-task outcomes and its metrics lines, one
// JSON line per experiment. The run folders under runs/ hold checkpoints
// (hundreds of MB) and are not meant to be committed; the ledger is (tens
// of KB), so that the tables, their bootstrap intervals and the plots can
// be rewritten, and a grid grown, after the run folders are gone (another
// machine, a cleaned disk).
const LedgerFile = "outcomes.jsonl"

// record is one ledger line.
type record struct {
	Experiment
	// Model is the base policy the run started from (the spec's
	// Base.Model): a record is reused only by a grid on the same model.
	Model string `json:"model"`
	// Weights is the base checkpoint's weights sha256 (the first 16 hex
	// digits; weightsDigest): the same recipe gives other weights on
	// another CPU, under the same folder name.
	Weights string                     `json:"weights_sha256,omitempty"`
	Base    *orchestrator.EvalPoint    `json:"base,omitempty"`
	Final   *orchestrator.EvalPoint    `json:"final"`
	Seconds float64                    `json:"seconds,omitempty"`
	Metrics []orchestrator.MetricsLine `json:"metrics,omitempty"`
}

func (r record) outcome() Outcome {
	return Outcome{Experiment: r.Experiment, Done: true, Base: r.Base, Final: r.Final, Seconds: r.Seconds, Metrics: r.Metrics, FromLedger: true}
}

// sameModel is whether a record made on model a (weights wa) may stand
// for a run on model b (weights wb): the same weights where both are
// known, else the same checkpoint folder name (the cache's root differs
// between machines).
func sameModel(a, wa, b, wb string) bool {
	if wa != "" && wb != "" {
		return wa == wb
	}
	return filepath.Base(filepath.Clean(a)) == filepath.Base(filepath.Clean(b))
}

// weightsDigest is the first 16 hex digits of the sha256 of model's
// model.safetensors (what `seedctl bootstrap` prints), or "" when model is
// not a local checkpoint folder (a served model's name).
func weightsDigest(model string) string {
	h, err := ckpthash.Weights(model)
	if err != nil {
		return ""
	}
	return h[:16]
}

// readLedger reads out's ledger by experiment name; a missing ledger is
// empty. A line torn by a kill (the last) is dropped; any other bad line
// is an error naming it.
func readLedger(out string) (map[string]record, error) {
	rs, err := jsonl.Read(filepath.Join(out, LedgerFile), func(r record) error {
		if r.Final == nil || r.Algo == "" {
			return errors.New("a record without its experiment or final eval")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the bench ledger: %w", err)
	}
	recs := map[string]record{}
	for _, r := range rs {
		recs[r.Name()] = r
	}
	return recs, nil
}

// writeLedger rewrites out's ledger: the finished experiments of outs
// (made on model, whose weights digest is weights), and every earlier record outs does not replace (an
// experiment of another grid in the same folder). Written to a temporary
// file and renamed, so a kill leaves the old ledger or the new one.
func writeLedger(out, model, weights string, outs []Outcome, old map[string]record) error {
	recs := map[string]record{}
	for name, r := range old {
		recs[name] = r
	}
	for _, o := range outs {
		if !o.Done || o.Final == nil {
			continue
		}
		if o.FromLedger {
			continue // already there, with the model it was made on
		}
		recs[o.Name()] = record{Experiment: o.Experiment, Model: model, Weights: weights, Base: o.Base, Final: o.Final, Seconds: o.Seconds, Metrics: o.Metrics}
	}
	if len(recs) == 0 {
		return nil
	}
	var b bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		line, err := json.Marshal(recs[name])
		if err != nil {
			return fmt.Errorf("writing the bench ledger: %s: %w", name, err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("writing the bench ledger: %w", err)
	}
	if err := atomicfile.WriteBytes(filepath.Join(out, LedgerFile), b.Bytes()); err != nil {
		return fmt.Errorf("writing the bench ledger: %w", err)
	}
	return nil
}

// ledgerNote is the line the report adds when some of its runs came from
// the ledger alone.
func ledgerNote(outs []Outcome) string {
	var names []string
	for _, o := range outs {
		if o.FromLedger {
			names = append(names, o.Name())
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("%d of the runs (%s) are read from %s: their run folders are not on this machine.", len(names), strings.Join(names, ", "), LedgerFile)
}
