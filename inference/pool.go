package inference

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/rs/zerolog"
)

// ErrNoEndpoints means every endpoint of a Pool failed and was dropped.
var ErrNoEndpoints = errors.New("no inference endpoint left")

// Pool spreads one policy's inference over several servers (N vLLM or
// SGLang servers: one per GPU, or one per tensor-parallel group). Requests
// go to the live endpoint with the least outstanding work (prompt plus
// reply tokens in flight), and requests whose prompts open alike (the G
// samples of one task's turn) go to the same endpoint so its prefix cache
// serves them. Release and Publish go to every endpoint and succeed only
// when every live one did. An endpoint that fails — after its own client's
// retries — is dropped with a log line naming it and its work is redone on
// the others; with none left, calls fail with ErrNoEndpoints. A request an
// endpoint refuses as such (IsRequestError) fails the call and drops no
// endpoint.
type Pool struct {
	log     zerolog.Logger
	mu      sync.Mutex
	members []*poolMember
}

type poolMember struct {
	name string
	b    Backend
	work int64 // outstanding tokens
	dead error
}

// affinityTokens is how much of a prompt decides its endpoint: prompts
// that agree on this many leading tokens (or agree entirely, when shorter)
// share an endpoint.
const affinityTokens = 256

// NewPool pools backends, named (their URLs) for logs and errors.
func NewPool(names []string, backends []Backend, log zerolog.Logger) (*Pool, error) {
	if len(backends) == 0 || len(names) != len(backends) {
		return nil, fmt.Errorf("inference pool: %d names for %d backends (want at least one of each, as many names as backends)", len(names), len(backends))
	}
	p := &Pool{log: log}
	for i, b := range backends {
		if b == nil {
			return nil, fmt.Errorf("inference pool: endpoint %s has no backend", names[i])
		}
		p.members = append(p.members, &poolMember{name: names[i], b: b})
	}
	return p, nil
}

// Live names the endpoints not dropped, in the order given.
func (p *Pool) Live() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, m := range p.members {
		if m.dead == nil {
			out = append(out, m.name)
		}
	}
	return out
}

// live returns the live members; with none, ErrNoEndpoints naming why
// each was dropped.
func (p *Pool) live() ([]*poolMember, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*poolMember
	var why []string
	for _, m := range p.members {
		if m.dead == nil {
			out = append(out, m)
		} else {
			why = append(why, m.name+": "+m.dead.Error())
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w (%s)", ErrNoEndpoints, strings.Join(why, "; "))
	}
	return out, nil
}

// drop marks m dead after err, unless the caller's context ended (then
// the failure says nothing about the endpoint).
func (p *Pool) drop(ctx context.Context, m *poolMember, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	if m.dead == nil {
		m.dead = fmt.Errorf("%s: %w", what, err)
		left := 0
		for _, o := range p.members {
			if o.dead == nil {
				left++
			}
		}
		p.log.Error().Err(err).Str("endpoint", m.name).Int("endpoints_left", left).Msgf("inference endpoint %s failed while %s; dropped it, %d left", m.name, what, left)
	}
	p.mu.Unlock()
}

// assign spreads items (with their work and affinity keys) over members by
// least outstanding work, items of one key together, in order of first
// appearance. It adds the work to the members' counters; the caller
// subtracts it when done.
func (p *Pool) assign(members []*poolMember, keys []uint64, work []int64) map[*poolMember][]int {
	type bucket struct {
		items []int
		work  int64
	}
	var order []uint64
	buckets := map[uint64]*bucket{}
	for i, k := range keys {
		b := buckets[k]
		if b == nil {
			b = &bucket{}
			buckets[k] = b
			order = append(order, k)
		}
		b.items = append(b.items, i)
		b.work += work[i]
	}
	out := map[*poolMember][]int{}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range order {
		b := buckets[k]
		best := members[0]
		for _, m := range members[1:] {
			if m.work < best.work {
				best = m
			}
		}
		best.work += b.work
		out[best] = append(out[best], b.items...)
	}
	return out
}

func (p *Pool) done(m *poolMember, w int64) {
	p.mu.Lock()
	m.work -= w
	p.mu.Unlock()
}

func promptKey(ids []int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, id := range ids[:min(len(ids), affinityTokens)] {
		for k := range b {
			b[k] = byte(id >> (8 * k))
		}
		h.Write(b[:])
	}
	return h.Sum64()
}

// spread runs items on the live members until each is done or no member
// is left: call runs one member's share (indices into the items) and
// returns an error when the member failed as a whole.
func (p *Pool) spread(ctx context.Context, what string, keys []uint64, work []int64, call func(ctx context.Context, m *poolMember, idx []int) error) error {
	pending := make([]int, len(keys))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		members, err := p.live()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		k, w := make([]uint64, len(pending)), make([]int64, len(pending))
		for j, i := range pending {
			k[j], w[j] = keys[i], work[i]
		}
		shares := p.assign(members, k, w)
		var mu sync.Mutex
		var retry []int
		var refused error
		var wg sync.WaitGroup
		for m, js := range shares {
			idx := make([]int, len(js))
			var mw int64
			for n, j := range js {
				idx[n] = pending[j]
				mw += w[j]
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := call(ctx, m, idx)
				p.done(m, mw)
				if IsRequestError(err) {
					mu.Lock()
					refused = fmt.Errorf("%s on %s: %w", what, m.name, err)
					mu.Unlock()
				} else if err != nil {
					p.drop(ctx, m, what, err)
					mu.Lock()
					retry = append(retry, idx...)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if refused != nil {
			return refused
		}
		pending = retry
	}
	return nil
}

// scatter runs items over the pool's live endpoints (spread), each
// endpoint's share through call (a Backend method expression), and returns the results in item order.
func scatter[In, Out any](ctx context.Context, p *Pool, what string, items []In, keys []uint64, work []int64, call func(Backend, context.Context, []In) ([]Out, error)) ([]Out, error) {
	out := make([]Out, len(items))
	err := p.spread(ctx, what, keys, work, func(ctx context.Context, m *poolMember, idx []int) error {
		sub := make([]In, len(idx))
		for n, i := range idx {
			sub[n] = items[i]
		}
		res, err := call(m.b, ctx, sub)
		if err != nil {
			return err
		}
		if len(res) != len(sub) {
			return fmt.Errorf("%d answers to %d inputs: %w", len(res), len(sub), ErrServer)
		}
		for n, i := range idx {
			out[i] = res[n]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Generate spreads the requests over the live endpoints; results come back
// in request order.
func (p *Pool) Generate(ctx context.Context, reqs []GenRequest) ([]GenResult, error) {
	keys, work := make([]uint64, len(reqs)), make([]int64, len(reqs))
	for i, r := range reqs {
		keys[i], work[i] = promptKey(r.Prompt), int64(len(r.Prompt)+r.MaxTokens)
	}
	return scatter(ctx, p, "generating", reqs, keys, work, Backend.Generate)
}

// Score spreads the sequences over the live endpoints.
func (p *Pool) Score(ctx context.Context, seqs [][]int) ([][]float64, error) {
	keys, work := make([]uint64, len(seqs)), make([]int64, len(seqs))
	for i, s := range seqs {
		keys[i], work[i] = uint64(i), int64(len(s))
	}
	return scatter(ctx, p, "scoring", seqs, keys, work, Backend.Score)
}

// Each runs f on every live endpoint at once (to publish, release, or
// verify each one after a publish), dropping those it fails on; it fails
// when none is left.
func (p *Pool) Each(ctx context.Context, what string, f func(ctx context.Context, name string, b Backend) error) error {
	members, err := p.live()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx, m.name, m.b); err != nil {
				p.drop(ctx, m, what, err)
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := p.live(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Release frees every live endpoint's accelerator memory.
func (p *Pool) Release(ctx context.Context) error {
	return p.Each(ctx, "releasing memory", func(ctx context.Context, _ string, b Backend) error { return b.Release(ctx) })
}

// Publish makes every live endpoint serve dir; an endpoint that fails is
// dropped, so the next iteration never samples from old weights.
func (p *Pool) Publish(ctx context.Context, dir, version string) error {
	return p.Each(ctx, "publishing "+version, func(ctx context.Context, _ string, b Backend) error { return b.Publish(ctx, dir, version) })
}

// Health is nil when every live endpoint answers (those that do not are
// dropped) and at least one is left.
func (p *Pool) Health(ctx context.Context) error {
	return p.Each(ctx, "checking health", func(ctx context.Context, _ string, b Backend) error { return b.Health(ctx) })
}

// Close closes every endpoint's backend, dropped ones included.
func (p *Pool) Close() error {
	var errs []error
	for _, m := range p.members {
		if err := m.b.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing %s: %w", m.name, err))
		}
	}
	return errors.Join(errs...)
}
