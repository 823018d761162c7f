package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/seedctl/seedctl/orchestrator"
	"github.com/seedctl/seedctl/trainer"
)

// run --nproc N: the orchestrator stays one process; its learner is rank 0
// of a data-parallel group over c10d (trainer.ProcessGroup), and ranks
// 1..N-1 are child processes (`seedctl learner-rank`) that load the same
// policy and take the same commands over their stdin (one JSON object a
// line) and answer on their stdout. Each RL step sends every rank the
// rows; each trains on its share (row i to rank i mod N), the gradients
// are summed across the group and all ranks step alike. Stage-1 SFT runs
// the same way. Rescoring is spread over the ranks (every rank holds the
// same weights); checkpoints are rank 0's, with each rank's optimizer
// shard beside them under --zero.

// rankRequest is one command to a worker rank.
type rankRequest struct {
	Op   string                    `json:"op"` // "load", "step", "sft", "save", "rescore", "rescore_ref", "close"
	Rows []orchestrator.Row        `json:"rows,omitempty"`
	LR   float64                   `json:"lr,omitempty"`
	Data []orchestrator.SFTExample `json:"data,omitempty"`
	SFT  *orchestrator.SFTOptions  `json:"sft,omitempty"`
	Spec *orchestrator.LearnerSpec `json:"spec,omitempty"` // "load", the first line: what to load
	Zero bool                      `json:"zero,omitempty"` // "load": shard the optimizer (ZeRO-1)
	Dir  string                    `json:"dir,omitempty"`  // "save": write this rank's optimizer shard there
	Seqs [][]int                   `json:"seqs,omitempty"` // "rescore", "rescore_ref": this rank's share
}

// rankReply is a worker's answer.
type rankReply struct {
	OK      bool        `json:"ok"`
	Refused bool        `json:"refused,omitempty"`
	Error   string      `json:"error,omitempty"`
	LogP    [][]float32 `json:"logp,omitempty"` // "rescore", "rescore_ref"
}

// distTimeout bounds the rendezvous and every collective: a rank that
// died makes the others fail after it rather than hang.
var distTimeout = 5 * time.Minute

// rankStarted, when set (tests), is told of each worker rank's process.
var rankStarted func(rank int, p *os.Process)

// rankProc is a running worker rank.
type rankProc struct {
	rank int
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
}

func (p *rankProc) send(req rankRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("learner rank %d: sending %s: %w", p.rank, req.Op, err)
	}
	return nil
}

func (p *rankProc) reply() (rankReply, error) {
	if !p.out.Scan() {
		err := p.out.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return rankReply{}, fmt.Errorf("learner rank %d stopped answering (died?): %w", p.rank, err)
	}
	var r rankReply
	if err := json.Unmarshal(p.out.Bytes(), &r); err != nil {
		return r, fmt.Errorf("learner rank %d: bad answer %q: %w", p.rank, p.out.Text(), err)
	}
	return r, nil
}

// distLearner is rank 0 plus the worker processes.
type distLearner struct {
	*gotchLearner
	workers []*rankProc
	zero    bool
}

// newDistLearner starts nproc learner ranks on this host (CPU, Gloo);
// zero shards the optimizer across them (ZeRO-1: each rank keeps 1/N of
// the moments and saves its shard beside rank 0's checkpoint).
func newDistLearner(device string, nproc int, zero bool) orchestrator.LearnerFactory {
	return func(spec orchestrator.LearnerSpec) (orchestrator.Learner, error) {
		port, err := freeLoopbackPort()
		if err != nil {
			return nil, fmt.Errorf("--nproc %d: a port for the rendezvous: %w", nproc, err)
		}
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		d := &distLearner{zero: zero}
		fail := func(err error) (orchestrator.Learner, error) {
			d.stopWorkers()
			return nil, err
		}
		for r := 1; r < nproc; r++ {
			cmd := exec.Command(self, "learner-rank", "--device", device)
			cmd.Env = append(os.Environ(), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
				"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(nproc), "SEEDCTL_DIST_TIMEOUT="+distTimeout.String())
			cmd.Stderr = os.Stderr
			in, err := cmd.StdinPipe()
			if err != nil {
				return fail(err)
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				return fail(err)
			}
			if err := cmd.Start(); err != nil {
				return fail(fmt.Errorf("starting learner rank %d: %w", r, err))
			}
			if rankStarted != nil {
				rankStarted(r, cmd.Process)
			}
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 1<<20), 1<<30)
			p := &rankProc{rank: r, cmd: cmd, in: in, out: sc}
			d.workers = append(d.workers, p)
			if err := p.send(rankRequest{Op: "load", Spec: &spec, Zero: zero}); err != nil {
				return fail(err)
			}
		}
		cfg := trainer.DefaultDistConfig()
		cfg.Port, cfg.Rank, cfg.World, cfg.Timeout = port, 0, nproc, distTimeout
		g, err := trainer.NewProcessGroup(cfg)
		if err != nil {
			return fail(fmt.Errorf("--nproc %d: %w", nproc, err))
		}
		l, err := loadLearner(device, spec, g, zero)
		if err != nil {
			g.Close()
			return fail(err)
		}
		d.gotchLearner = l
		for _, p := range d.workers {
			if r, err := p.reply(); err != nil || !r.OK {
				d.Close()
				return nil, fmt.Errorf("learner rank %d loading %s: %v%s", p.rank, spec.Policy, err, r.Error)
			}
		}
		// Every rank starts from rank 0's weights (they loaded the same
		// checkpoint; this makes it so whatever happened).
		if err := l.m.BroadcastParams(l.g, 0); err != nil {
			d.Close()
			return nil, err
		}
		for _, p := range d.workers {
			if r, err := p.reply(); err != nil || !r.OK {
				d.Close()
				return nil, fmt.Errorf("learner rank %d: the weights' broadcast: %v%s", p.rank, err, r.Error)
			}
		}
		return d, nil
	}
}

// exchange sends each worker its request, runs rank 0's part and collects
// the workers' answers (a refused step is not a failure); the failures
// are joined.
func (d *distLearner) exchange(reqFor func(p *rankProc) rankRequest, own func() error) ([]rankReply, error) {
	for _, p := range d.workers {
		if err := p.send(reqFor(p)); err != nil {
			return nil, err
		}
	}
	errs := []error{own()}
	replies := make([]rankReply, len(d.workers))
	for i, p := range d.workers {
		r, err := p.reply()
		switch {
		case err != nil:
			errs = append(errs, err)
		case !r.OK && !r.Refused:
			errs = append(errs, fmt.Errorf("learner rank %d: %s", p.rank, r.Error))
		}
		replies[i] = r
	}
	return replies, errors.Join(errs...)
}

// together sends the same request to every worker (see exchange).
func (d *distLearner) together(req rankRequest, own func() error) error {
	_, err := d.exchange(func(*rankProc) rankRequest { return req }, own)
	return err
}

func (d *distLearner) Step(ctx context.Context, rows []orchestrator.Row, lr float64) (orchestrator.StepStats, error) {
	var st orchestrator.StepStats
	err := d.together(rankRequest{Op: "step", Rows: rows, LR: lr}, func() (err error) {
		st, err = d.gotchLearner.Step(ctx, rows, lr)
		return err
	})
	var refused *orchestrator.RefusedError
	if errors.As(err, &refused) && len(unwrapAll(err)) == 1 {
		return nil, refused
	}
	return st, err
}

func unwrapAll(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func (d *distLearner) SFT(ctx context.Context, data []orchestrator.SFTExample, o orchestrator.SFTOptions, progress func(step, steps int, loss float64)) error {
	return d.together(rankRequest{Op: "sft", Data: data, SFT: &o}, func() error {
		return d.gotchLearner.SFT(ctx, data, o, progress)
	})
}

// Rescore spreads the sequences over the ranks (sequence i to rank i mod
// N; all hold the same weights) and gathers their log-probs in order.
func (d *distLearner) Rescore(ctx context.Context, seqs [][]int) ([][]float32, error) {
	return d.rescore(ctx, "rescore", seqs, d.gotchLearner.Rescore)
}

// RescoreRef is Rescore under the reference policy.
func (d *distLearner) RescoreRef(ctx context.Context, seqs [][]int) ([][]float32, error) {
	return d.rescore(ctx, "rescore_ref", seqs, d.gotchLearner.RescoreRef)
}

func (d *distLearner) rescore(ctx context.Context, op string, seqs [][]int, own func(context.Context, [][]int) ([][]float32, error)) ([][]float32, error) {
	n := len(d.workers) + 1
	if len(seqs) < n {
		return own(ctx, seqs) // fewer sequences than ranks: not worth spreading
	}
	share := func(r int) [][]int { return trainer.RankShare(seqs, r, n) }
	var mine [][]float32
	replies, err := d.exchange(func(p *rankProc) rankRequest { return rankRequest{Op: op, Seqs: share(p.rank)} },
		func() (err error) { mine, err = own(ctx, share(0)); return err })
	if err != nil {
		return nil, err
	}
	parts := [][][]float32{mine}
	for i, r := range replies {
		if want := len(share(d.workers[i].rank)); len(r.LogP) != want {
			return nil, fmt.Errorf("learner rank %d: %d log-prob rows for %d sequences", d.workers[i].rank, len(r.LogP), want)
		}
		parts = append(parts, r.LogP)
	}
	out := make([][]float32, len(seqs))
	for i := range seqs {
		out[i] = parts[i%n][i/n]
	}
	return out, nil
}

// Save writes rank 0's checkpoint; with a sharded optimizer every rank
// writes its shard into the folder before it is renamed into place.
func (d *distLearner) Save(ctx context.Context, dir string) error {
	if !d.zero {
		return d.gotchLearner.Save(ctx, dir)
	}
	return d.gotchLearner.save(dir, func(tmp string) error {
		return d.together(rankRequest{Op: "save", Dir: tmp}, func() error { return nil })
	})
}

func (d *distLearner) stopWorkers() {
	for _, p := range d.workers {
		_ = p.send(rankRequest{Op: "close"})
		p.in.Close()
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-done
		}
	}
	d.workers = nil
}

func (d *distLearner) Close() {
	d.stopWorkers()
	if d.gotchLearner != nil {
		d.gotchLearner.Close()
	}
}

func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// learnerRankCommand is a worker rank of run --nproc (not for users: the
// run starts it with torchrun's variables set and talks to it on stdin
// and stdout).
func learnerRankCommand() *cli.Command {
	return &cli.Command{
		Name:   "learner-rank",
		Usage:  "one learner rank of seedctl run --nproc N (started by the run; commands on stdin)",
		Hidden: true,
		Flags:  []cli.Flag{&cli.StringFlag{Name: "device", Value: "cpu", Usage: "trainer device"}},
		Action: func(c *cli.Context) error {
			return serveLearnerRank(c.Context, c.String("device"), os.Stdin, os.Stdout)
		},
	}
}

func serveLearnerRank(ctx context.Context, device string, stdin io.Reader, stdout io.Writer) error {
	cfg, ok, err := trainer.DistConfigFromEnv()
	if err != nil || !ok {
		return cli.Exit(fmt.Sprintf("learner-rank: torchrun's variables (WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT): %v", err), 2)
	}
	if t, err := time.ParseDuration(os.Getenv("SEEDCTL_DIST_TIMEOUT")); err == nil {
		cfg.Timeout = t
	}
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 1<<20), 1<<30)
	var mu sync.Mutex
	answer := func(r rankReply) {
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.Marshal(r)
		stdout.Write(append(b, '\n'))
	}
	fail := func(err error) rankReply { return rankReply{Error: err.Error()} }
	var l *gotchLearner
	defer func() {
		if l != nil {
			l.Close()
		}
	}()
	for in.Scan() {
		var req rankRequest
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			answer(fail(fmt.Errorf("rank %d: bad request: %w", cfg.Rank, err)))
			continue
		}
		switch req.Op {
		case "load":
			if req.Spec == nil {
				answer(fail(errors.New("load without a spec")))
				continue
			}
			g, err := trainer.NewProcessGroup(cfg)
			if err != nil {
				answer(fail(err))
				return err
			}
			if l, err = loadLearner(device, *req.Spec, g, req.Zero); err != nil {
				g.Close()
				answer(fail(err))
				return err
			}
			answer(rankReply{OK: true})
			if err := l.m.BroadcastParams(l.g, 0); err != nil {
				answer(fail(err))
				return err
			}
			answer(rankReply{OK: true})
		case "step":
			_, err := l.Step(ctx, req.Rows, req.LR)
			var refused *orchestrator.RefusedError
			switch {
			case errors.As(err, &refused):
				answer(rankReply{Refused: true, Error: err.Error()})
			case err != nil:
				answer(fail(err))
			default:
				answer(rankReply{OK: true})
			}
		case "sft":
			if err := l.SFT(ctx, req.Data, *req.SFT, nil); err != nil {
				answer(fail(err))
			} else {
				answer(rankReply{OK: true})
			}
		case "rescore", "rescore_ref":
			f := l.Rescore
			if req.Op == "rescore_ref" {
				f = l.RescoreRef
			}
			if lp, err := f(ctx, req.Seqs); err != nil {
				answer(fail(err))
			} else {
				answer(rankReply{OK: true, LogP: lp})
			}
		case "save":
			if err := l.opt.SaveState(req.Dir); err != nil {
				answer(fail(err))
			} else {
				answer(rankReply{OK: true})
			}
		case "close":
			return nil
		default:
			answer(fail(fmt.Errorf("rank %d: unknown op %q", cfg.Rank, req.Op)))
		}
	}
	return in.Err()
}
