package trainer

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/sugarme/gotch"
	ts "github.com/sugarme/gotch/ts"
)

// StepLogits is one decode step's next-token logits [B, V] (float32),
// kept in libtorch so that tokens can be drawn there (Draw) instead of
// reading every logit back to the host. Free it after use.
type StepLogits struct {
	t     *ts.Tensor
	dev   gotch.Device
	rows  int
	vocab int
}

// Rows is the number of sequences the step decoded.
func (l *StepLogits) Rows() int { return l.rows }

// Row copies row i's logits to the host (for decoding settings Draw does
// not cover).
func (l *StepLogits) Row(i int) (out []float32, err error) {
	if i < 0 || i >= l.rows {
		return nil, fmt.Errorf("reading logits row %d of %d", i, l.rows)
	}
	defer guard(&err, "reading a row of logits")
	withoutGrad(func() {
		r := must(l.t.Narrow(0, int64(i), 1, false))
		out = toSlice[float32](r)
		drop(r)
	})
	return out, nil
}

// All copies every row's logits to the host in one read-back.
func (l *StepLogits) All() (out [][]float32, err error) {
	defer guard(&err, "reading logits")
	withoutGrad(func() { out = rows2D(l.t) })
	return out, nil
}

// Free releases the logits.
func (l *StepLogits) Free() {
	if l != nil && l.t != nil {
		drop(l.t)
		l.t = nil
	}
}

// DrawSpec is one row's decoding setting for Draw.
type DrawSpec struct {
	Temperature float64 // ≤ 0: greedy, the first most likely id
	TopLogprobs int     // most likely alternatives to report
}

// TokenLogProb is an id with its log-probability.
type TokenLogProb struct {
	ID      int
	LogProb float64
}

// Drawn is one row's token: its id, its log-probability under the raw
// (untempered) distribution, the most likely alternatives (ties: lower id
// first), or Err when the row's logits have no finite maximum.
type Drawn struct {
	ID      int
	LogProb float64
	Top     []TokenLogProb
	Err     error
}

// ErrNonFiniteLogits: a row of logits with a NaN, a +Inf, or no finite
// value at all (a broken checkpoint or diverged training).
var ErrNonFiniteLogits = errors.New("the model's logits are not finite (NaN, +Inf, or all -Inf): the checkpoint is broken or its training diverged")

// drawBlock is how many vocabulary entries one block of the two-level
// inverse-CDF search holds: the host reads every block's sum, then one
// block's weights per row (2 × 8 KB for a Qwen-sized vocabulary, instead
// of 600 KB of logits).
const drawBlock = 2048

// Draw picks each row's next token inside libtorch, reading back only a
// few numbers per row. A row at temperature T > 0 draws by inverse CDF
// from softmax(logits/T) with one uniform u ∈ [0, 1) that uniform(i)
// returns (called once per such row, in row order, and never for greedy
// or non-finite rows): the first id, in id order, where the cumulative
// probability reaches u × the total, as the host sampler does. So a
// request's random stream is unchanged; the pick can differ from the
// host's only when u × total falls within float32 rounding of a boundary
// between two ids. Greedy rows take the first most likely id. Top-k and
// top-p cuts are not drawn here (copy the Row instead).
//
// The work is libtorch's fused softmax, per-block sums and maxima of the
// vocabulary (drawBlock entries), one gathered block per row of the
// probabilities and of the logits, and top-k where alternatives are
// asked: every pass over the vocabulary is vectorised and threaded.
func (l *StepLogits) Draw(specs []DrawSpec, uniform func(i int) float64) (out []Drawn, err error) {
	if len(specs) != l.rows {
		return nil, fmt.Errorf("drawing tokens: %d settings for %d rows", len(specs), l.rows)
	}
	defer guard(&err, "drawing tokens")
	out = make([]Drawn, l.rows)
	withoutGrad(func() { l.draw(specs, uniform, out) })
	return out, nil
}

func (l *StepLogits) draw(specs []DrawSpec, uniform func(i int) float64, out []Drawn) {
	b, v := l.rows, l.vocab
	invT := make([]float32, b)
	tempered, kmax := false, 0
	for i, s := range specs {
		invT[i] = 1
		if s.Temperature > 0 && s.Temperature != 1 {
			invT[i], tempered = float32(1/s.Temperature), true
		}
		kmax = max(kmax, min(s.TopLogprobs, v))
	}
	// The sampling distribution: softmax(logits/T) (T = 1 for greedy rows).
	var probs *ts.Tensor
	if tempered {
		it := upload(invT, []int64{int64(b), 1}, l.dev)
		scaled := must(l.t.Mul(it, false))
		drop(it)
		probs = must(scaled.Softmax(1, gotch.Float, true))
	} else {
		probs = must(l.t.Softmax(1, gotch.Float, false))
	}
	defer drop(probs)
	sums := blockReduce(probs, b, v, false) // each block's probability
	maxes := blockReduce(l.t, b, v, true)   // each block's largest logit
	rowMax := make([]float64, b)
	for i := range maxes {
		rowMax[i] = math.Inf(-1)
		for _, x := range maxes[i] {
			if x > rowMax[i] || math.IsNaN(x) {
				rowMax[i] = x
			}
			if math.IsNaN(rowMax[i]) {
				break
			}
		}
		if math.IsNaN(rowMax[i]) || math.IsInf(rowMax[i], 0) {
			out[i].Err = ErrNonFiniteLogits
		}
	}
	// Each row's block: where u × total falls, or the first holding the
	// row's largest logit.
	blockOf := make([]int64, b)
	rs := make([]float64, b)
	for i, s := range specs {
		switch {
		case out[i].Err != nil:
		case s.Temperature <= 0:
			for j, x := range maxes[i] {
				if x == rowMax[i] {
					blockOf[i] = int64(j)
					break
				}
			}
		default:
			total := 0.0
			for _, x := range sums[i] {
				total += x
			}
			r := uniform(i) * total
			last := len(sums[i]) - 1
			for last > 0 && sums[i][last] <= 0 {
				last--
			}
			j := 0
			for ; j < last; j++ {
				if r <= sums[i][j] && sums[i][j] > 0 {
					break
				}
				r -= sums[i][j]
			}
			blockOf[i], rs[i] = int64(j), r
		}
	}
	idx := blockIndex(blockOf, v, l.dev)
	pBlocks := gatherRows(probs, idx, b)
	lBlocks := gatherRows(l.t, idx, b)
	drop(idx)
	// Raw log-sum-exp of the rows drawn at T ≠ 1 (the others read their
	// log-prob off the softmax).
	var lse []float64
	if tempered {
		t := must(l.t.Logsumexp([]int64{1}, false, false))
		lse = toSlice[float64](must(t.Totype(gotch.Double, true)))
	}
	for i, s := range specs {
		if out[i].Err != nil {
			continue
		}
		base := int(blockOf[i]) * drawBlock
		k := -1
		if s.Temperature <= 0 {
			for j, x := range lBlocks[i] {
				if base+j < v && float64(x) == rowMax[i] {
					k = j
					break
				}
			}
		} else {
			r, last := rs[i], -1
			for j, x := range pBlocks[i] {
				if base+j >= v {
					break
				}
				if x > 0 {
					last = j
				}
				r -= float64(x)
				if r <= 0 && x > 0 {
					k = j
					break
				}
			}
			if k < 0 { // rounding between the block's sum and its entries
				k = last
			}
		}
		if k < 0 {
			panic(torchError{fmt.Errorf("row %d: no entry of block %d holds the row's largest logit %v", i, blockOf[i], rowMax[i])})
		}
		out[i].ID = base + k
		if invT[i] == 1 {
			out[i].LogProb = math.Log(float64(pBlocks[i][k]))
		} else {
			out[i].LogProb = float64(lBlocks[i][k]) - lse[i]
		}
	}
	if kmax == 0 {
		return
	}
	// Alternatives: the largest logits, one more than asked so that a tie
	// at the cut is settled by id; log-probs against the chosen id's.
	k := min(kmax+1, v)
	vals, ids, err := l.t.Topk(int64(k), 1, true, true, false)
	must0(err)
	topV, topI := toSlice[float32](vals), toSlice[int64](ids)
	drop(vals, ids)
	for i, s := range specs {
		if out[i].Err != nil || s.TopLogprobs <= 0 {
			continue
		}
		// log p(x) = logit(x) − lse, the lse taken from the chosen id.
		rowLSE := float64(lBlocks[i][out[i].ID-int(blockOf[i])*drawBlock]) - out[i].LogProb
		row := make([]TokenLogProb, k)
		for j := range row {
			row[j] = TokenLogProb{ID: int(topI[i*k+j]), LogProb: float64(topV[i*k+j]) - rowLSE}
		}
		sort.SliceStable(row, func(a, c int) bool {
			if row[a].LogProb != row[c].LogProb {
				return row[a].LogProb > row[c].LogProb
			}
			return row[a].ID < row[c].ID
		})
		out[i].Top = row[:min(s.TopLogprobs, len(row))]
	}
}

// blockReduce returns each row's sums (or maxima) of x over consecutive
// drawBlock-sized blocks of the vocabulary (the last one shorter).
func blockReduce(x *ts.Tensor, b, v int, maxima bool) [][]float64 {
	full := v / drawBlock
	nb := (v + drawBlock - 1) / drawBlock
	reduce := func(t *ts.Tensor, dim int64, keep bool) *ts.Tensor {
		if maxima {
			return must(t.Amax([]int64{dim}, keep, true))
		}
		return must(t.SumDimIntlist([]int64{dim}, keep, gotch.Float, true))
	}
	var parts []*ts.Tensor
	if full > 0 {
		head := must(x.Narrow(1, 0, int64(full*drawBlock), false))
		parts = append(parts, reduce(must(head.View([]int64{int64(b), int64(full), drawBlock}, true)), 2, false))
	}
	if nb > full {
		parts = append(parts, reduce(must(x.Narrow(1, int64(full*drawBlock), int64(v-full*drawBlock), false)), 1, true))
	}
	all := parts[0]
	if len(parts) == 2 {
		all = must(ts.Cat(parts, 1))
		drop(parts...)
	}
	vals := toSlice[float32](all)
	drop(all)
	out := make([][]float64, b)
	for i := range out {
		out[i] = make([]float64, nb)
		for j := range out[i] {
			out[i][j] = float64(vals[i*nb+j])
		}
	}
	return out
}

// blockIndex is the [B, drawBlock] gather index of block blockOf[i] in
// each row i (positions past the vocabulary repeat its last entry; readers
// stop at the vocabulary's end).
func blockIndex(blockOf []int64, v int, dev gotch.Device) *ts.Tensor {
	idx := make([]int64, len(blockOf)*drawBlock)
	for i, j := range blockOf {
		for k := 0; k < drawBlock; k++ {
			idx[i*drawBlock+k] = min(j*drawBlock+int64(k), int64(v-1))
		}
	}
	return upload(idx, []int64{int64(len(blockOf)), drawBlock}, dev)
}

// gatherRows reads the indexed entries of each row of x (float32).
func gatherRows(x *ts.Tensor, idx *ts.Tensor, b int) [][]float32 {
	g := must(x.Gather(1, idx, false, false))
	vals := toSlice[float32](g)
	drop(g)
	out := make([][]float32, b)
	n := len(vals) / b
	for i := range out {
		out[i] = vals[i*n : (i+1)*n]
	}
	return out
}
