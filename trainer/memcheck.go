package trainer

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// MemCheck is a measured RL step set beside its memory plan.
type MemCheck struct {
	Plan MemoryPlan
	// Resident is the process's resident set after a first step (weights,
	// gradients, optimizer state allocated; the C heap's free memory
	// handed back first); Peak the highest resident set during a second
	// step (VmHWM, reset before it).
	Resident, Peak int64
	StepSeconds    float64
}

// MeasureRLStep runs two RL steps of m on random rows (tokens padded
// tokens in rows of row tokens, the second half of each row trained and
// distilled, entropy bonus on as in the defaults) and measures the
// process's memory (Linux /proc; CPU memory, so run it with the model on
// the CPU). ref, when set, is a loaded reference copy (it only has to be
// resident). The plan is computed for the same input.
func MeasureRLStep(m *Model, opt *Optimizer, ref *Model, tokens, row int, seed uint64) (MemCheck, error) {
	var mc MemCheck
	if row < 2 || tokens < row {
		return mc, fmt.Errorf("memcheck: rows of %d tokens in micro-batches of %d: want 2 ≤ row ≤ tokens", row, tokens)
	}
	var err error
	mc.Plan, err = PlanMemory(MemoryInput{Model: m.cfg, DType: m.DType(), Tokens: tokens, RowTokens: row, Recompute: m.recompute, Reference: ref != nil, Entropy: true, FusedAttention: sdpaAvailable(), CUDA: m.device.IsCuda()})
	if err != nil {
		return mc, err
	}
	r := rand.New(rand.NewPCG(seed, 3))
	var batch []RLSequence
	for i := 0; i < tokens/row; i++ {
		// Rows of row+1 ids: row positions are scored.
		ids := make([]int, row+1)
		train, distill := make([]bool, row+1), make([]bool, row+1)
		old, teacher := make([]float32, row+1), make([]float32, row+1)
		for k := range ids {
			ids[k] = r.IntN(m.cfg.VocabSize)
			if k > row/2 {
				train[k], distill[k] = true, true
				old[k] = -12 // about log(1/V) of a random model over a large vocabulary
				teacher[k] = old[k] + 0.1
			}
		}
		batch = append(batch, RLSequence{ID: fmt.Sprint("row", i), IDs: ids, Train: train, Advantage: r.Float64()*2 - 1, OldLogP: old, TeacherLogP: teacher, Distill: distill})
	}
	cfg := DefaultRLConfig()
	cfg.KLCoef, cfg.MicroBatchTokens = 0, tokens
	if _, err := m.RLStep(opt, batch, cfg); err != nil && !errors.Is(err, ErrNonFinite) {
		return mc, fmt.Errorf("memcheck: first step: %w", err)
	}
	// The heap keeps a step's freed buffers for the next (malloc.go);
	// handed back, the resident set is what is live.
	trimHeap()
	if mc.Resident, err = procStatus("VmRSS"); err != nil {
		return mc, err
	}
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return mc, fmt.Errorf("memcheck: resetting the peak resident set: %w", err)
	}
	st, err := m.RLStep(opt, batch, cfg)
	if err != nil && !errors.Is(err, ErrNonFinite) {
		return mc, fmt.Errorf("memcheck: second step: %w", err)
	}
	mc.StepSeconds = st.Elapsed.Seconds()
	mc.Peak, err = procStatus("VmHWM")
	return mc, err
}

// procStatus reads a "kB" field of /proc/self/status, in bytes.
func procStatus(field string) (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("memcheck: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("memcheck: /proc/self/status %s: %w", field, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("memcheck: /proc/self/status has no %s", field)
}
