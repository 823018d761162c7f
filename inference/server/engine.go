// Package server is seedctl's embedded OpenAI-compatible inference server
// over the trainer's model: vLLM-shaped /v1/completions and
// /v1/chat/completions, SGLang's /update_weights_from_disk, continuous
// batching with per-sequence KV caches and prefix reuse. It runs on CPU (or
// CUDA when libtorch has it) and stands in for vLLM/SGLang in the embedded
// default and in tests.
package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/tokenizer"
	"github.com/seedctl/seedctl/trainer"
)

// Config configures the engine and its HTTP server.
type Config struct {
	ModelDir  string // Hugging Face checkpoint folder
	ModelName string // served model id; the folder's base name by default
	Version   string // weight version of the initial checkpoint
	DType     string // "float32" (default) or "bfloat16"
	Device    string // "cpu" (default), "cuda"
	// MaxModelLen bounds prompt + completion tokens; 0 means the checkpoint's
	// max_position_embeddings capped at 8192.
	MaxModelLen int
	// MaxBatch bounds sequences decoded together.
	MaxBatch int
	// MaxPrefills bounds new sequences admitted per engine step (their
	// prompts prefilled together), so decoding sequences are not starved by
	// a burst of arrivals.
	MaxPrefills int
	// PrefixCacheEntries finished sequences are kept so later prompts that
	// extend them skip recomputing the shared prefix; 0 disables.
	PrefixCacheEntries int
	// MinPrefixReuse is the shortest shared prefix worth reusing.
	MinPrefixReuse int
	// APIKey, when set, is required as a bearer token on /v1 and admin routes.
	APIKey string
	// ScoreBatchTokens bounds the padded tokens of one scoring forward
	// (echo with logprobs); a prompt longer than it is scored alone.
	ScoreBatchTokens int
	// MaxSequences bounds prompts × n of one request.
	MaxSequences int
	// ReadTimeout and IdleTimeout override the server's ReadTimeout and
	// IdleTimeout (0: those).
	ReadTimeout, IdleTimeout time.Duration
	// HostSampling draws every decode step's tokens on the host from the
	// whole logits read back, as before sampling moved into libtorch (for
	// benchmarks side by side; the draws are the same but for rounding at
	// a boundary between two ids).
	HostSampling bool
}

// DefaultConfig returns the defaults for dir.
func DefaultConfig(dir string) Config {
	return Config{ModelDir: dir, MaxBatch: 64, MaxPrefills: 32, PrefixCacheEntries: 64, MinPrefixReuse: 8, Version: "0", ScoreBatchTokens: 4096, MaxSequences: 1024}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.ModelDir == "" {
		return errors.New("server config: ModelDir is empty")
	}
	if c.MaxBatch < 1 || c.MaxPrefills < 1 {
		return fmt.Errorf("server config: MaxBatch %d and MaxPrefills %d must be at least 1", c.MaxBatch, c.MaxPrefills)
	}
	if c.MaxModelLen < 0 || c.PrefixCacheEntries < 0 || c.MinPrefixReuse < 0 || c.ScoreBatchTokens < 0 || c.MaxSequences < 0 {
		return errors.New("server config: MaxModelLen, PrefixCacheEntries, MinPrefixReuse, ScoreBatchTokens and MaxSequences must not be negative")
	}
	return (trainer.ModelOptions{DType: c.DType, Device: c.Device}).Validate()
}

// snapshot is one loaded checkpoint. Sequences keep the snapshot they
// started on, so a weight update never changes a request in flight.
type snapshot struct {
	model   *trainer.Model
	tok     *tokenizer.Tokenizer
	tcfg    *tokenizer.Config
	chat    *tokenizer.ChatTemplate
	eos     map[int]bool
	version string
	dir     string
	maxLen  int
	loaded  time.Time

	refs    int // sequences running on it (engine goroutine only)
	retired bool
}

func loadSnapshot(dir, version string, cfg Config) (*snapshot, error) {
	m, err := trainer.LoadCheckpoint(dir, trainer.ModelOptions{DType: cfg.DType, Device: cfg.Device})
	if err != nil {
		return nil, err
	}
	tok, tcfg, err := tokenizer.Load(dir)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("loading the tokenizer of %s: %w", dir, err)
	}
	s := &snapshot{model: m, tok: tok, tcfg: tcfg, eos: map[int]bool{}, version: version, dir: dir, loaded: time.Now()}
	if ct, err := tcfg.CompileChatTemplate(); err == nil {
		s.chat = ct
	} else if !errors.Is(err, tokenizer.ErrNoChatTemplate) {
		m.Close()
		return nil, fmt.Errorf("loading %s: %w", dir, err)
	}
	for _, id := range m.Config().EOSIDs() {
		s.eos[id] = true
	}
	if id, ok := tok.TokenID(tcfg.EOSToken); ok && tcfg.EOSToken != "" {
		s.eos[id] = true
	}
	s.maxLen = cfg.MaxModelLen
	if s.maxLen == 0 {
		s.maxLen = min(max(m.Config().MaxPositionEmbeddings, 1), 8192)
	}
	return s, nil
}

// genJob is one sequence to generate (one choice of one prompt).
type genJob struct {
	ctx       context.Context
	prompt    []int
	maxTokens int
	params    samplingParams
	seed      *int64
	stopIDs   map[int]bool
	stops     []string
	ignoreEOS bool
	keepSpec  bool // stop strings see special tokens (skip_special_tokens false)
	events    chan genEvent

	snap   *snapshot
	cache  *trainer.SeqCache
	rng    *rand.Rand
	gen    []tokenChoice
	last   int // the sampled token not yet fed to the model
	cached int // prompt tokens reused from the prefix cache
	start  int // where the prompt's own tokens start (after the reused prefix)
}

// genEvent is a token, or the end of a sequence.
type genEvent struct {
	tok    *tokenChoice
	done   bool
	finish string // "stop" or "length"
	err    error
	cached int
	snap   *snapshot
}

type scoreJob struct {
	prompts [][]int
	snap    *snapshot
	result  chan scoreResult
}

type scoreResult struct {
	logprobs [][]float64 // per prompt; entry 0 is NaN (no context)
	err      error
}

type swapMsg struct {
	snap *snapshot
	done chan struct{}
}

// Engine schedules all model work on one goroutine: libtorch ops run with
// their own intra-op threads, and one scheduler keeps batching simple.
type Engine struct {
	cfg Config
	log zerolog.Logger

	jobs   chan []*genJob // one request's sequences arrive together
	scores chan *scoreJob
	swaps  chan swapMsg
	quit   chan struct{}
	done   chan struct{}

	mu      sync.RWMutex
	current *snapshot // guarded by mu for readers outside the loop

	// engine goroutine state
	active  []*genJob
	waiting []*genJob // submitted, not yet admitted, in arrival order
	prefix  []*prefixEntry
	clock   int64
	// samplers keep each sampling goroutine's scratch between steps.
	samplers []*sampler

	statsMu sync.Mutex
	stats   Stats
}

// Stats are cumulative engine counters.
type Stats struct {
	Requests        int64
	PromptTokens    int64
	CachedTokens    int64
	GeneratedTokens int64
	DecodeSteps     int64
	BatchedSeqs     int64 // sum of batch sizes over decode steps
	PrefillBatches  int64 // batched prefill forwards
	PrefilledSeqs   int64 // prompts they ran (shared prompts once)
}

type prefixEntry struct {
	cache *trainer.SeqCache
	used  int64
}

// NewEngine loads cfg.ModelDir and starts the scheduler.
func NewEngine(cfg Config, log zerolog.Logger) (*Engine, error) {
	if cfg.ModelName == "" {
		cfg.ModelName = filepath.Base(filepath.Clean(cfg.ModelDir))
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	snap, err := loadSnapshot(cfg.ModelDir, cfg.Version, cfg)
	if err != nil {
		return nil, fmt.Errorf("starting the inference engine: %w", err)
	}
	e := &Engine{
		cfg: cfg, log: log, current: snap,
		jobs: make(chan []*genJob, 1024), scores: make(chan *scoreJob, 64), swaps: make(chan swapMsg),
		quit: make(chan struct{}), done: make(chan struct{}),
	}
	go e.loop()
	log.Info().Str("model", cfg.ModelName).Str("dir", cfg.ModelDir).Str("version", cfg.Version).
		Int("max_model_len", snap.maxLen).Msg("inference engine ready")
	return e, nil
}

// Close stops the scheduler; requests in flight end with an error.
func (e *Engine) Close() {
	select {
	case <-e.quit:
	default:
		close(e.quit)
	}
	<-e.done
}

// snap is the snapshot new requests get, for /v1/models and headers.
func (e *Engine) snap() *snapshot {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.current
}

// Version is the weight version being served to new requests.
func (e *Engine) Version() string { return e.snap().version }

// Stats returns a copy of the counters.
func (e *Engine) Stats() Stats {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.stats
}

// ErrClosed means the engine was shut down.
var ErrClosed = errors.New("inference engine closed")

// Swap loads dir and serves it to new requests; sequences in flight finish
// on the weights they started with.
func (e *Engine) Swap(ctx context.Context, dir, version string) error {
	snap, err := loadSnapshot(dir, version, e.cfg)
	if err != nil {
		return fmt.Errorf("updating weights from %s: %w", dir, err)
	}
	msg := swapMsg{snap: snap, done: make(chan struct{})}
	select {
	case e.swaps <- msg:
	case <-ctx.Done():
		snap.model.Close()
		return ctx.Err()
	case <-e.quit:
		snap.model.Close()
		return ErrClosed
	}
	<-msg.done
	e.log.Info().Str("dir", dir).Str("version", version).Msg("weights updated")
	return nil
}

// submit hands the engine all sequences of one request at once, so they
// are admitted together where the batch has room (the n samples of a
// prompt then share one prefill) instead of one by one as they arrive.
func (e *Engine) submit(ctx context.Context, js ...*genJob) error {
	select {
	case e.jobs <- js:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.quit:
		return ErrClosed
	}
}

// score returns teacher-forced log-probs of every prompt token after the first.
func (e *Engine) score(ctx context.Context, prompts [][]int) ([][]float64, *snapshot, error) {
	j := &scoreJob{prompts: prompts, result: make(chan scoreResult, 1)}
	select {
	case e.scores <- j:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-e.quit:
		return nil, nil, ErrClosed
	}
	select {
	case r := <-j.result:
		return r.logprobs, j.snap, r.err
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// idleTrimDelay is how long the engine stays idle before it trims.
const idleTrimDelay = 250 * time.Millisecond

func (e *Engine) loop() {
	defer close(e.done)
	defer e.shutdown()
	// After work, once the engine has stayed idle for idleTrimDelay, the
	// freed KV caches' pages leave the resident set (the process trains
	// too); a stream of single requests pays for no trim between them.
	busy := false
	var trim <-chan time.Time
	for {
		if len(e.active) == 0 && len(e.waiting) == 0 {
			if busy {
				trim, busy = time.After(idleTrimDelay), false
			}
			select {
			case <-trim:
				trim = nil
				trainer.TrimHeap()
				continue
			case js := <-e.jobs:
				trim = nil
				e.waiting = append(e.waiting, js...) // and whatever came with it
			case s := <-e.scores:
				e.runScore(s)
				busy = true
				continue
			case m := <-e.swaps:
				e.swap(m)
				continue
			case <-e.quit:
				return
			}
		}
		// Take what has arrived without waiting, then admit what the batch
		// has room for and step it. Weight swaps, scoring and Close are
		// taken whatever the load; new sequences only while fewer than a
		// batch wait (the rest stay in the channel, which pushes back on
		// submitters).
	drain:
		for {
			jobs := e.jobs
			if len(e.waiting) >= e.cfg.MaxBatch {
				jobs = nil
			}
			select {
			case js := <-jobs:
				e.waiting = append(e.waiting, js...)
			case s := <-e.scores:
				e.runScore(s)
			case m := <-e.swaps:
				e.swap(m)
			case <-e.quit:
				return
			default:
				break drain
			}
		}
		if n := min(len(e.waiting), e.cfg.MaxPrefills, e.cfg.MaxBatch-len(e.active)); n > 0 {
			admitted := e.waiting[:n:n]
			e.waiting = append([]*genJob(nil), e.waiting[n:]...)
			e.admit(admitted)
		}
		if len(e.active) > 0 {
			e.decodeStep()
			busy = true
		}
	}
}

func (e *Engine) shutdown() {
	for _, j := range e.active {
		e.finish(j, "", ErrClosed)
	}
	e.active = nil
	for _, j := range e.waiting {
		j.events <- genEvent{done: true, err: ErrClosed}
	}
	e.waiting = nil
	for _, p := range e.prefix {
		p.cache.Free()
	}
	e.prefix = nil
	for {
		select {
		case js := <-e.jobs:
			for _, j := range js {
				j.events <- genEvent{done: true, err: ErrClosed}
			}
		case s := <-e.scores:
			s.result <- scoreResult{err: ErrClosed}
		default:
			return
		}
	}
}

func (e *Engine) swap(m swapMsg) {
	old := e.current
	e.mu.Lock()
	e.current = m.snap
	e.mu.Unlock()
	// Cached prefixes hold keys of the old weights.
	for _, p := range e.prefix {
		p.cache.Free()
	}
	e.prefix = nil
	old.retired = true
	e.maybeRelease(old)
	close(m.done)
}

func (e *Engine) maybeRelease(s *snapshot) {
	if s.retired && s.refs == 0 && s != e.current {
		s.model.Close()
	}
}

func (e *Engine) admit(js []*genJob) {
	var ready []*genJob
	for _, j := range js {
		if err := j.ctx.Err(); err != nil {
			continue // the requester is gone
		}
		j.snap = e.current
		j.snap.refs++
		seed := uint64(time.Now().UnixNano())
		if j.seed != nil {
			seed = uint64(*j.seed)
		}
		j.rng = rand.New(rand.NewPCG(seed, 0x5eed))
		j.start = e.reusePrefix(j)
		ready = append(ready, j)
	}
	e.prefillAll(ready)
}

// started takes a prefilled job on: its first token, or its end.
func (e *Engine) started(j *genJob, last []float32, err error) {
	if err != nil {
		e.finish(j, "", err)
		return
	}
	e.statsMu.Lock()
	e.stats.Requests++
	e.stats.PromptTokens += int64(len(j.prompt))
	e.stats.CachedTokens += int64(j.cached)
	e.statsMu.Unlock()
	if j.maxTokens == 0 {
		e.finish(j, "length", nil)
		return
	}
	c, err := e.sampler(0).sample(last, j.params, j.rng)
	if err != nil {
		e.finish(j, "", fmt.Errorf("sampling the first token: %w", err))
		return
	}
	if e.emit(j, c) {
		e.active = append(e.active, j)
	}
}

// sampled is one job's draw, or why there is none.
type sampled struct {
	c   tokenChoice
	err error
}

// parallelSampleLogits is how many logits (rows × vocabulary) a decode
// step must have before its sampling is split among goroutines: below
// it, starting them costs about what they save.
const parallelSampleLogits = 16384

// sampler returns the k-th sampling goroutine's sampler.
func (e *Engine) sampler(k int) *sampler {
	for len(e.samplers) <= k {
		e.samplers = append(e.samplers, &sampler{})
	}
	return e.samplers[k]
}

// sampleAll draws each job's next token from its row of logits. Rows are
// split among up to GOMAXPROCS goroutines once the step is large enough
// (libtorch is idle meanwhile): a Qwen vocabulary costs milliseconds per
// row in Go. Each job draws from its own generator, so how the rows are
// split changes nothing; emitting stays on the loop.
func (e *Engine) sampleAll(js []*genJob, logits [][]float32) []sampled {
	out := make([]sampled, len(js))
	workers := 1
	if len(js) > 1 && len(js)*len(logits[0]) >= parallelSampleLogits {
		workers = min(runtime.GOMAXPROCS(0), len(js))
	}
	for k := range workers {
		e.sampler(k)
	}
	if workers == 1 {
		for i, j := range js {
			out[i].c, out[i].err = e.samplers[0].sample(logits[i], j.params, j.rng)
		}
		return out
	}
	var wg sync.WaitGroup
	for k := range workers {
		wg.Add(1)
		go func(s *sampler) {
			defer wg.Done()
			for i := k; i < len(js); i += workers {
				out[i].c, out[i].err = s.sample(logits[i], js[i].params, js[i].rng)
			}
		}(e.samplers[k])
	}
	wg.Wait()
	return out
}

// needsHost reports whether p's cut (top-k, top-p) needs the whole row of
// logits on the host.
func (p samplingParams) needsHost(vocab int) bool {
	return (p.TopK > 0 && p.TopK < vocab) || (p.TopP > 0 && p.TopP < 1)
}

// libtorchDrawLogits is how many logits (rows × vocabulary) a decode step
// must have before its tokens are drawn inside libtorch: below it, reading
// them back and sampling on the host costs less than the draw's dozen
// libtorch ops (BenchmarkSamplingInLibtorch: at a 308-id vocabulary the
// draw was 0.87× the host's tokens/s for one request and 1.01× at 64; at
// Qwen's 151,936 ids 1.07–1.36× and 2.4–2.6×).
var libtorchDrawLogits = 1 << 16 // a variable for tests

// sampleStep draws each job's next token from a decode step's logits.
// Rows without a top-k or top-p cut are drawn inside libtorch
// (StepLogits.Draw): a few numbers per row come back instead of the whole
// vocabulary's logits. Each draw takes one uniform from the job's own
// generator, as the host sampler does, so a seeded request's stream is
// unchanged. Rows with a cut, every row of a step with fewer than
// libtorchDrawLogits logits, and every row with HostSampling are read
// back and sampled on the host.
func (e *Engine) sampleStep(js []*genJob, sl *trainer.StepLogits) []sampled {
	out := make([]sampled, len(js))
	specs := make([]trainer.DrawSpec, len(js))
	vocab := js[0].snap.model.Config().VocabSize
	onHost := e.cfg.HostSampling || len(js)*vocab < libtorchDrawLogits
	var host []int
	for i, j := range js {
		if onHost || j.params.needsHost(vocab) {
			host = append(host, i)
			continue // greedy, drawing nothing
		}
		specs[i] = trainer.DrawSpec{Temperature: j.params.Temperature, TopLogprobs: j.params.TopLogprobs}
	}
	if len(host) < len(js) {
		drawn, err := sl.Draw(specs, func(i int) float64 { return js[i].rng.Float64() })
		if err != nil {
			for i := range out {
				out[i].err = err
			}
			return out
		}
		for i, d := range drawn {
			if d.Err != nil {
				out[i].err = d.Err
				continue
			}
			c := tokenChoice{ID: d.ID, LogProb: d.LogProb}
			for _, t := range d.Top {
				c.Top = append(c.Top, tokenLogProb{ID: t.ID, LogProb: t.LogProb})
			}
			out[i].c = c
		}
	}
	if len(host) == 0 {
		return out
	}
	hj := make([]*genJob, len(host))
	rows := make([][]float32, len(host))
	row := sl.Row
	if len(host) == len(js) { // one read-back, not one per row
		all, err := sl.All()
		row = func(i int) ([]float32, error) {
			if err != nil {
				return nil, err
			}
			return all[i], nil
		}
	}
	for k, i := range host {
		row, err := row(i)
		if err != nil {
			for _, i := range host {
				out[i] = sampled{err: err}
			}
			return out
		}
		hj[k], rows[k] = js[i], row
	}
	for k, r := range e.sampleAll(hj, rows) {
		out[host[k]] = r
	}
	return out
}

// reusePrefix gives j a fork of the longest cached prefix of its prompt
// worth reusing and returns where its own tokens start (0, with no cache
// set, when there is none).
func (e *Engine) reusePrefix(j *genJob) int {
	if e.cfg.PrefixCacheEntries == 0 || j.snap != e.current {
		return 0
	}
	best, bestN := -1, 0
	for i, p := range e.prefix {
		n := commonPrefix(p.cache.Tokens(), j.prompt)
		if n > bestN {
			best, bestN = i, n
		}
	}
	// At least one prompt token must run to get the next-token logits.
	bestN = min(bestN, len(j.prompt)-1)
	if best < 0 || bestN < e.cfg.MinPrefixReuse {
		return 0
	}
	fork, err := e.prefix[best].cache.Fork(bestN)
	if err != nil {
		return 0
	}
	e.clock++
	e.prefix[best].used = e.clock
	j.cache, j.cached = fork, bestN
	return bestN
}

// prefillAll runs the jobs' prompts — the part after a reused prefix —
// in batched forwards (trainer.ExtendBatch), grouped by length so little
// goes to padding, each at most ScoreBatchTokens new tokens wide (and four
// times that with the pasts). A prompt several jobs share without a
// cached prefix (the n samples of one request) runs once; the others fork it.
// promptKey is a map key for a prompt's token ids: their bytes.
func promptKey(ids []int) string {
	b := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint32(b, uint32(id))
	}
	return string(b)
}

func (e *Engine) prefillAll(js []*genJob) {
	type group struct {
		lead   *genJob
		others []*genJob
	}
	byPrompt := map[string]*group{}
	var groups []*group
	for _, j := range js {
		if j.cache == nil {
			key := promptKey(j.prompt)
			if g, ok := byPrompt[key]; ok && g.lead.snap == j.snap {
				g.others = append(g.others, j)
				continue
			}
			g := &group{lead: j}
			byPrompt[key] = g
			groups = append(groups, g)
			continue
		}
		groups = append(groups, &group{lead: j})
	}
	newLen := func(g *group) int { return len(g.lead.prompt) - g.lead.start }
	sort.SliceStable(groups, func(a, b int) bool { return newLen(groups[a]) < newLen(groups[b]) })
	budget := max(e.cfg.ScoreBatchTokens, 1)
	for lo := 0; lo < len(groups); {
		hi, widest := lo+1, len(groups[lo].lead.prompt)
		for hi < len(groups) && groups[hi].lead.snap == groups[lo].lead.snap {
			w := max(widest, len(groups[hi].lead.prompt))
			if (hi-lo+1)*newLen(groups[hi]) > budget || (hi-lo+1)*w > 4*budget {
				break
			}
			widest = w
			hi++
		}
		batch := groups[lo:hi]
		m := batch[0].lead.snap.model
		caches := make([]*trainer.SeqCache, len(batch))
		news := make([][]int, len(batch))
		for i, g := range batch {
			if g.lead.cache == nil {
				g.lead.cache = m.NewSeqCache()
			}
			caches[i], news[i] = g.lead.cache, g.lead.prompt[g.lead.start:]
		}
		logits, err := m.ExtendBatch(caches, news)
		e.statsMu.Lock()
		e.stats.PrefillBatches++
		e.stats.PrefilledSeqs += int64(len(batch))
		e.statsMu.Unlock()
		for i, g := range batch {
			if err != nil {
				// A failed forward may have left some layers extended: the
				// cache is not kept as a prefix.
				caches[i].Free()
				g.lead.cache = nil
				for _, j := range append([]*genJob{g.lead}, g.others...) {
					e.started(j, nil, err)
				}
				continue
			}
			for _, j := range g.others {
				fork, ferr := caches[i].Fork(len(j.prompt))
				j.cache = fork
				e.started(j, logits[i], ferr)
			}
			e.started(g.lead, logits[i], nil)
		}
		lo = hi
	}
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// emit records a sampled token and reports whether the sequence goes on.
func (e *Engine) emit(j *genJob, c tokenChoice) bool {
	j.gen = append(j.gen, c)
	j.last = c.ID
	select {
	case j.events <- genEvent{tok: &c}:
	case <-j.ctx.Done():
		e.finish(j, "", j.ctx.Err())
		return false
	}
	e.statsMu.Lock()
	e.stats.GeneratedTokens++
	e.statsMu.Unlock()
	switch {
	case (!j.ignoreEOS && j.snap.eos[c.ID]) || j.stopIDs[c.ID]:
		e.finish(j, "stop", nil)
		return false
	case len(j.stops) > 0 && hitsStop(j):
		e.finish(j, "stop", nil)
		return false
	case len(j.gen) >= j.maxTokens || len(j.prompt)+len(j.gen) >= j.snap.maxLen:
		e.finish(j, "length", nil)
		return false
	}
	return true
}

func hitsStop(j *genJob) bool {
	ids := make([]int, len(j.gen))
	for i, g := range j.gen {
		ids[i] = g.ID
	}
	text := decodeText(j.snap.tok, ids, !j.keepSpec, true)
	for _, s := range j.stops {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}

// finish ends a sequence and hands its cache to the prefix cache.
func (e *Engine) finish(j *genJob, reason string, err error) {
	select {
	case j.events <- genEvent{done: true, finish: reason, err: err, cached: j.cached, snap: j.snap}:
	case <-j.ctx.Done(): // the requester is gone
	}
	if j.cache != nil {
		e.keepPrefix(j)
		j.cache = nil
	}
	if j.snap != nil {
		j.snap.refs--
		e.maybeRelease(j.snap)
	}
}

func (e *Engine) keepPrefix(j *genJob) {
	if e.cfg.PrefixCacheEntries == 0 || j.snap != e.current || j.cache.Len() == 0 {
		j.cache.Free()
		return
	}
	j.cache.Own() // out of its decode group: the group's other rows are not kept alive by it
	e.clock++
	e.prefix = append(e.prefix, &prefixEntry{cache: j.cache, used: e.clock})
	if len(e.prefix) > e.cfg.PrefixCacheEntries {
		lru := 0
		for i, p := range e.prefix {
			if p.used < e.prefix[lru].used {
				lru = i
			}
		}
		e.prefix[lru].cache.Free()
		e.prefix = append(e.prefix[:lru], e.prefix[lru+1:]...)
	}
}

// maxSequences is the most prompts × n one request may ask for.
func (e *Engine) maxSequences() int {
	if e.cfg.MaxSequences > 0 {
		return e.cfg.MaxSequences
	}
	return DefaultConfig("").MaxSequences
}

// testHookAfterGrouping, set by tests only, runs in decodeStep between the
// look at the jobs' contexts and the decode.
var testHookAfterGrouping func(e *Engine)

// decodeStep advances every active sequence by one token, one batched
// forward per snapshot.
func (e *Engine) decodeStep() {
	// One look at each job's context decides both whether it is finished
	// and whether it is decoded: a job cancelled after that look is decoded
	// once more (its cache is still there) and finished on the next step.
	// (Two looks let a job be finished, its cache freed, then decoded.)
	groups := map[*snapshot][]*genJob{}
	var order []*snapshot
	for _, j := range e.active {
		if err := j.ctx.Err(); err != nil {
			e.finish(j, "", err)
			continue
		}
		if _, ok := groups[j.snap]; !ok {
			order = append(order, j.snap)
		}
		groups[j.snap] = append(groups[j.snap], j)
	}
	if testHookAfterGrouping != nil {
		testHookAfterGrouping(e)
	}
	var next []*genJob
	for _, s := range order {
		js := groups[s]
		caches := make([]*trainer.SeqCache, len(js))
		ids := make([]int, len(js))
		for i, j := range js {
			caches[i], ids[i] = j.cache, j.last
		}
		logits, err := s.model.DecodeBatchLogits(caches, ids)
		e.statsMu.Lock()
		e.stats.DecodeSteps++
		e.stats.BatchedSeqs += int64(len(js))
		e.statsMu.Unlock()
		if err != nil {
			e.log.Error().Err(err).Int("batch", len(js)).Msg("batched decode failed")
			for _, j := range js {
				e.finish(j, "", err)
			}
			continue
		}
		choices := e.sampleStep(js, logits)
		logits.Free()
		for i, j := range js {
			if err := choices[i].err; err != nil {
				e.finish(j, "", fmt.Errorf("sampling token %d: %w", len(j.gen)+1, err))
				continue
			}
			if e.emit(j, choices[i].c) {
				next = append(next, j)
			}
		}
	}
	e.active = next
}

func (e *Engine) runScore(s *scoreJob) {
	snap := e.current
	s.snap = snap
	// Bounded micro-batches of target log-probs (trainer.RescoreAt): the
	// peak is one micro-batch's logits, never the whole request's
	// B×T×vocabulary tensor. One-token prompts have nothing to score.
	var seqs [][]int
	var at []int
	for i, p := range s.prompts {
		if len(p) >= 2 {
			seqs = append(seqs, p)
			at = append(at, i)
		}
	}
	out := make([][]float64, len(s.prompts))
	for i, p := range s.prompts {
		out[i] = make([]float64, len(p))
		out[i][0] = nanValue
	}
	if len(seqs) > 0 {
		limit := e.cfg.ScoreBatchTokens
		if limit < 2 {
			limit = snap.maxLen
		}
		lp, err := snap.model.RescoreAt(seqs, limit, 1)
		if err != nil {
			s.result <- scoreResult{err: err}
			return
		}
		for k, i := range at {
			for t := 1; t < len(s.prompts[i]); t++ {
				out[i][t] = float64(lp[k][t])
			}
		}
	}
	e.statsMu.Lock()
	e.stats.Requests++
	e.statsMu.Unlock()
	s.result <- scoreResult{logprobs: out}
}

// nanValue marks the first prompt token, which has no log-prob.
var nanValue = math.NaN()

// decodeText decodes generated ids. Unless final, an incomplete character
// at the end is held back (the next token may complete it); other invalid
// bytes become U+FFFD, as Hugging Face decodes them.
func decodeText(tok *tokenizer.Tokenizer, ids []int, skipSpecial, final bool) string {
	b, err := tok.DecodeBytes(ids, tokenizer.DecodeOptions{SkipSpecial: skipSpecial})
	if err != nil {
		return ""
	}
	if !final {
		for k := 1; k <= 3 && k <= len(b); k++ {
			if r := b[len(b)-k]; r >= 0xC0 { // a lead byte
				if !utf8.FullRune(b[len(b)-k:]) {
					b = b[:len(b)-k]
				}
				break
			} else if r < 0x80 {
				break
			}
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// checkModelDir reports whether dir looks like a checkpoint, before loading.
func checkModelDir(dir string) error {
	if dir == "" {
		return errors.New("model_path is empty")
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return fmt.Errorf("model_path %s: %w", dir, err)
	}
	return nil
}
