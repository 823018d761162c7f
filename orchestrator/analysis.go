package orchestrator

// Hindsight analysis in stage 2: which analyzer writes the skills, the
// requests, and the pipe that analyses finished groups while the rollout
// goes on.

import (
	"context"
	"fmt"
	"sync"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/rollout"
	"github.com/seedctl/seedctl/skills"
)

// analyzeAt runs an analyzer over requests and stamps its records with
// the iteration k they belong to.
func analyzeAt(ctx context.Context, an skills.Analyzer, reqs []skills.Request, k int) ([]skills.Record, error) {
	recs, err := an.Analyze(ctx, reqs)
	for i := range recs {
		recs[i].Iteration = k
	}
	return recs, err
}

// analyze runs an analyzer over trajectories with their critical-step
// candidates, in chunks, with progress.
func (r *run) analyze(ctx context.Context, an skills.Analyzer, trajs []*rollout.Trajectory, label string, k int) ([]skills.Record, error) {
	reqs := r.analysisRequests(trajs)
	prog := r.progress(label + " analysis")
	var recs []skills.Record
	const chunk = 64
	for lo := 0; lo < len(reqs); lo += chunk {
		part, err := analyzeAt(ctx, an, reqs[lo:min(lo+chunk, len(reqs))], k)
		if err != nil {
			return nil, err
		}
		recs = append(recs, part...)
		prog(rollout.Status{Done: len(recs), Total: len(reqs)})
	}
	return recs, nil
}

// analysisRequests are the analyzer's requests for trajs, group by group:
// every step a candidate when the analyzer chooses the critical steps,
// else the steps CriticalSteps picks by comparing the group's samples.
func (r *run) analysisRequests(trajs []*rollout.Trajectory) []skills.Request {
	cc := skills.DefaultCriticalConfig()
	cc.Gamma, cc.K = r.cfg.Gamma, r.cfg.MaxStepSkills
	var reqs []skills.Request
	if r.cfg.SkillMode == string(skills.EpisodeOnly) {
		// The public code's episode_only analysis: summary and episode
		// skill alone, no critical steps to choose.
		for _, t := range trajs {
			reqs = append(reqs, skills.Request{Traj: t, EpisodeOnly: true})
		}
		return reqs
	}
	for _, g := range skills.Groups(trajs) {
		if r.cfg.CriticalSteps == CriticalLLM {
			for _, t := range g {
				all := make([]int, len(t.Steps))
				for i := range all {
					all[i] = i
				}
				reqs = append(reqs, skills.Request{Traj: t, Candidates: all, ChooseSteps: true})
			}
			continue
		}
		crit := skills.CriticalSteps(g, cc)
		for _, t := range g {
			reqs = append(reqs, skills.Request{Traj: t, Candidates: crit[t.ID]})
		}
	}
	return reqs
}

// analysisPipe analyzes each task's group as soon as its rollouts have all
// ended, while the other groups still play: the hindsight requests share
// the server's batches with the rollout's last turns instead of waiting
// for them. Records come out in group order, as analyze gives them.
type analysisPipe struct {
	r      *run
	an     skills.Analyzer
	k      int
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	recs   map[int][]skills.Record // by group
	err    error
}

// pipeGroups bounds the groups analyzed at once (each G requests).
const pipeGroups = 8

func (r *run) pipeAnalysis(ctx context.Context, an skills.Analyzer, k int) *analysisPipe {
	ctx, cancel := context.WithCancel(ctx)
	return &analysisPipe{r: r, an: an, k: k, ctx: ctx, cancel: cancel, sem: make(chan struct{}, pipeGroups), recs: map[int][]skills.Record{}}
}

// groupDone starts the analysis of one finished group (nil-safe: runs
// without SEED's analysis pass nil).
func (p *analysisPipe) groupDone(g int, trajs []*rollout.Trajectory) {
	if p == nil {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.sem <- struct{}{}
		defer func() { <-p.sem }()
		if p.ctx.Err() != nil {
			return
		}
		recs, err := analyzeAt(p.ctx, p.an, p.r.analysisRequests(trajs), p.k)
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			if p.err == nil {
				p.err = fmt.Errorf("group %d: %w", g, err)
				p.cancel()
			}
			return
		}
		p.recs[g] = recs
	}()
}

// wait returns every group's records in group order, once all are in;
// a group never handed over (a rollout that failed) is analyzed now.
func (p *analysisPipe) wait(trajs []*rollout.Trajectory, label string) ([]skills.Record, error) {
	p.wg.Wait()
	defer p.cancel()
	if p.err != nil {
		return nil, p.err
	}
	prog := p.r.progress(label + " analysis")
	var out []skills.Record
	groups := skills.Groups(trajs)
	for _, g := range groups {
		recs, ok := p.recs[g[0].Group]
		if !ok {
			var err error
			if recs, err = analyzeAt(p.ctx, p.an, p.r.analysisRequests(g), p.k); err != nil {
				return nil, err
			}
		}
		out = append(out, recs...)
	}
	prog(rollout.Status{Done: len(out), Total: len(out)})
	return out, nil
}

// abandon stops the analyses in flight (the rollout failed).
func (p *analysisPipe) abandon() {
	if p != nil {
		p.cancel()
		p.wg.Wait()
	}
}

// analysisTokens counts what the analyzer wrote (first answers and repair
// answers) and read (prompts), in the policy's tokens: the cost of
// self-analysis for T4, whichever analyzer ran.
func (r *run) analysisTokens(recs []skills.Record) (gen, prompt int, err error) {
	count := func(s string) (int, error) {
		if s == "" {
			return 0, nil
		}
		ids, err := r.policy.Tok.Encode(s)
		if err != nil {
			return 0, fmt.Errorf("counting analysis tokens: %w", err)
		}
		return len(ids), nil
	}
	for _, rec := range recs {
		for _, s := range []string{rec.Raw, rec.RepairRaw} {
			n, err := count(s)
			if err != nil {
				return 0, 0, err
			}
			gen += n
		}
		n, err := count(rec.Prompt)
		if err != nil {
			return 0, 0, err
		}
		prompt += n
	}
	return gen, prompt, nil
}

func (r *run) iterationAnalyzer(k int) (skills.Analyzer, error) {
	switch r.cfg.Algo {
	case AlgoStaticSkill:
		return r.stage1Analyzer()
	case AlgoPrivilegedSkill:
		if r.privileged == nil {
			b, err := envadapters.Lookup(r.cfg.Env.Name)
			if err != nil {
				return nil, fmt.Errorf("privileged teacher: %w", err)
			}
			r.privileged = &skills.PrivilegedAnalyzer{Env: b, Options: r.cfg.rolloutConfig(0).EnvOptions}
		}
		return r.privileged, nil
	case AlgoTransferSkill:
		if r.transfer == nil {
			b, err := envadapters.Lookup(r.cfg.Env.Name)
			if err != nil {
				return nil, fmt.Errorf("transfer teacher: %w", err)
			}
			r.transfer = &skills.TransferAnalyzer{Env: b, Options: r.cfg.rolloutConfig(0).EnvOptions}
		}
		return r.transfer, nil
	default:
		return &skills.SelfAnalyzer{Policy: r.policy, MaxTokens: r.cfg.AnalysisTokens, Temperature: 0, K: r.cfg.MaxStepSkills, Snapshot: fmt.Sprintf("iter-%d", k-1), NoRepair: !r.cfg.AnalysisRepair, MinWords: r.cfg.analysisMinWords()}, nil
	}
}
