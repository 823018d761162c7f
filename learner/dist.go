package learner

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
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/orchestrator"
	"github.com/seedctl/seedctl/trainer"
)

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
	Dist *rankDist                 `json:"dist,omitempty"` // "load": the group to join
}

// rankDist is the process group a rank joins (its torchrun variables).
type rankDist struct {
	Addr string `json:"addr"`
	Port int    `json:"port"`
	// Store is the file the ranks meet in when they are all on one host
	// (no rendezvous port is opened then).
	Store    string  `json:"store,omitempty"`
	Rank     int     `json:"rank"`
	World    int     `json:"world"`
	TimeoutS float64 `json:"timeout_s"`
	// Backend is the run's (from its --device): every rank uses it.
	Backend string `json:"backend,omitempty"`
}

// config is the group for a rank whose model is on device: an NCCL
// rank's GPU is its CUDA device. A device of the other kind than the
// run's fails, naming both.
func (d rankDist) config(device string) (trainer.DistConfig, error) {
	c := trainer.DefaultDistConfig()
	c.Addr, c.Port, c.Rank, c.World, c.Store = d.Addr, d.Port, d.Rank, d.World, d.Store
	c.Timeout = time.Duration(d.TimeoutS * float64(time.Second))
	c.Backend = d.Backend
	if c.Backend == "" {
		c.Backend = trainer.BackendGloo
	}
	if own := trainer.BackendFor(device); own != c.Backend {
		return c, fmt.Errorf("rank %d: the run's ranks use %s but this rank's device is %s (%s): give every host the run's --device kind", d.Rank, c.Backend, device, own)
	}
	c.Device, _ = trainer.CUDAIndex(device)
	return c, c.Validate()
}

// RankDevice is the device of the local-th of a host's ranks: with
// --device cuda each takes its own GPU, cuda:local (torchrun's LOCAL_RANK
// convention); CPU ranks share the CPU. An explicit cuda:N names one GPU,
// so it serves one rank per host.
func RankDevice(device string, local, perHost int) (string, error) {
	switch {
	case device == "cuda":
		return fmt.Sprintf("cuda:%d", local), nil
	case trainer.BackendFor(device) == trainer.BackendNCCL && perHost > 1:
		return "", fmt.Errorf("--device %s names one GPU but %d ranks run on this host: give --device cuda (rank k takes cuda:k)", device, perHost)
	}
	return device, nil
}

// rankReply is a worker's answer.
type rankReply struct {
	OK      bool        `json:"ok"`
	Refused bool        `json:"refused,omitempty"`
	Error   string      `json:"error,omitempty"`
	LogP    [][]float32 `json:"logp,omitempty"` // "rescore", "rescore_ref"
}

// DefaultDistTimeout bounds the rendezvous and every collective unless
// --dist-timeout says otherwise: a rank that died makes the others fail
// after it rather than hang.
const DefaultDistTimeout = 5 * time.Minute

// DistOptions is run's data-parallel layout.
type DistOptions struct {
	Device string
	NProc  int // ranks on this host, rank 0 (this process) included
	// World is every rank; the World-NProc beyond this host dial in at
	// Listen (seedctl learner-node on the other hosts).
	World  int
	Listen string
	// MasterAddr and MasterPort are c10d's rendezvous (rank 0's TCPStore)
	// when ranks run on several hosts: this host as the other hosts reach
	// it. One host (World == NProc): the ranks meet in a file store in a
	// private temporary folder and no rendezvous port is opened.
	MasterAddr string
	MasterPort int
	Zero       bool
	Timeout    time.Duration
	// Self is the seedctl executable this host's worker ranks run as
	// "Self learner-rank --device D" ("": this process's executable).
	Self string
	// Hooks (nil in seedctl): Started is told of each local worker rank's
	// process, Listening of the address the other hosts' ranks dial.
	Started   func(rank int, p *os.Process)
	Listening func(addr string)
}

// Validate refuses a layout that cannot work, naming the flag.
func (o DistOptions) Validate() error {
	switch {
	case o.NProc < 1:
		return fmt.Errorf("--nproc %d: want 1 or more learner ranks", o.NProc)
	case o.World != 0 && o.World < o.NProc:
		return fmt.Errorf("--world-size %d is below --nproc %d (the world counts this host's ranks too)", o.World, o.NProc)
	case o.World > o.NProc && o.MasterAddr == "":
		return fmt.Errorf("--world-size %d with --nproc %d: ranks on other hosts need --master-addr, this host's address as they reach it", o.World, o.NProc)
	case o.World > o.NProc && o.Listen == "":
		return fmt.Errorf("--world-size %d: give --listen HOST:PORT for the other hosts' ranks to dial", o.World)
	case o.Timeout <= 0:
		return fmt.Errorf("--dist-timeout %v must be positive", o.Timeout)
	case o.MasterPort < 0 || o.MasterPort > 65535:
		return fmt.Errorf("--master-port %d must be in 1..65535 (0: a free port, one host only)", o.MasterPort)
	}
	if o.World > o.NProc {
		if _, err := RankSecret(); err != nil {
			return fmt.Errorf("--world-size %d: %w", o.World, err)
		}
	}
	return nil
}

// CheckBuild refuses what this build cannot do with these ranks: ZeRO
// without ranks to shard over, and a process group whose backend (Gloo for
// CPU ranks, NCCL for CUDA ones) the build lacks; available is
// trainer.DistAvailable.
func (o DistOptions) CheckBuild(available func(backend string) bool) error {
	ranks, backend := o.Ranks(), trainer.BackendFor(o.Device)
	switch {
	case o.Zero && ranks < 2:
		return errors.New("--zero shards the optimizer across learner ranks: give --nproc 2 or more")
	case ranks < 2:
		return nil
	case backend == trainer.BackendGloo && !available(backend):
		return fmt.Errorf("%d learner ranks: this libtorch build has no Gloo process group (Debian's libtorch with libgloo-dev has: ./setup.sh)", ranks)
	case !available(backend):
		return fmt.Errorf("%d learner ranks with --device %s: this build has no NCCL process group (it needs a CUDA libtorch 2.x and, when seedctl is built, NCCL's and CUDA's headers: docs/gpu.md, \"Data parallelism over c10d\")", ranks, o.Device)
	}
	_, err := RankDevice(o.Device, 0, o.NProc)
	return err
}

// Ranks is every rank of the group.
func (o DistOptions) Ranks() int { return max(o.World, o.NProc) }

// rankProc is a running worker rank: a child process on this host or a
// connection from a rank on another.
type rankProc struct {
	rank int
	host string // "" on this host
	in   io.WriteCloser
	out  *bufio.Scanner
	// stop waits for the rank to end after "close" (killing a child that
	// does not within 30 s) or hangs up on a remote one.
	stop func()
}

func (p *rankProc) name() string {
	if p.host != "" {
		return fmt.Sprintf("learner rank %d (on %s)", p.rank, p.host)
	}
	return fmt.Sprintf("learner rank %d", p.rank)
}

func (p *rankProc) send(req rankRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: sending %s: %w", p.name(), req.Op, err)
	}
	return nil
}

func (p *rankProc) reply() (rankReply, error) {
	if !p.out.Scan() {
		err := p.out.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return rankReply{}, fmt.Errorf("%s stopped answering (died?): %w", p.name(), err)
	}
	var r rankReply
	if err := json.Unmarshal(p.out.Bytes(), &r); err != nil {
		return r, fmt.Errorf("%s: bad answer %q: %w", p.name(), p.out.Text(), err)
	}
	return r, nil
}

func lineScanner(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	return sc
}

// distLearner is rank 0 plus the worker processes.
type distLearner struct {
	*gotchLearner
	workers  []*rankProc
	zero     bool
	storeDir string // the one-host rendezvous' folder ("" for a TCP one)
}

// removeStore deletes the one-host rendezvous' folder.
func (d *distLearner) removeStore() {
	if d.storeDir != "" {
		os.RemoveAll(d.storeDir)
		d.storeDir = ""
	}
}

// Dist starts o.NProc learner ranks on this host (CPU, Gloo)
// and waits for the o.World-o.NProc of the other hosts to dial in; o.Zero
// shards the optimizer across them (ZeRO-1: each rank keeps 1/N of the
// moments and saves its shard beside rank 0's checkpoint).
func Dist(o DistOptions, log zerolog.Logger) orchestrator.LearnerFactory {
	return func(spec orchestrator.LearnerSpec) (orchestrator.Learner, error) {
		if err := o.Validate(); err != nil {
			return nil, err
		}
		world := o.Ranks()
		addr, port := o.MasterAddr, o.MasterPort
		if addr == "" {
			addr = "127.0.0.1"
		}
		var store, storeDir string
		switch {
		case world == o.NProc:
			// One host: the ranks meet in a file in a folder only this
			// user can reach, and no rendezvous port is opened.
			dir, err := os.MkdirTemp("", "seedctl-rendezvous-")
			if err != nil {
				return nil, fmt.Errorf("--nproc %d: a folder for the rendezvous: %w", o.NProc, err)
			}
			storeDir, store, port = dir, filepath.Join(dir, "store"), 0
		case port == 0:
			return nil, fmt.Errorf("--world-size %d: give --master-port (a free port here that the other hosts reach)", world)
		case !trainer.RendezvousBindsAddr():
			log.Warn().Int("port", port).Msg("this libtorch (1.13) listens for the rendezvous on every interface, not --master-addr alone: keep the port behind a firewall (libtorch 2.x binds --master-addr)")
		}
		backend := trainer.BackendFor(o.Device)
		dev0, err := RankDevice(o.Device, 0, o.NProc)
		if err != nil {
			os.RemoveAll(storeDir)
			return nil, err
		}
		d := &distLearner{zero: o.Zero, storeDir: storeDir}
		fail := func(err error) (orchestrator.Learner, error) {
			d.stopWorkers()
			d.removeStore()
			return nil, err
		}
		// The other hosts' ranks first: they may be waiting already, and
		// the rendezvous needs every rank.
		if world > o.NProc {
			remote, err := acceptRanks(o, world-o.NProc, log)
			if err != nil {
				return fail(err)
			}
			d.workers = append(d.workers, remote...)
		}
		self := o.Self
		if self == "" {
			if self, err = os.Executable(); err != nil {
				return fail(err)
			}
		}
		for r := 1; r < o.NProc; r++ {
			dev, err := RankDevice(o.Device, r, o.NProc)
			if err != nil {
				return fail(err)
			}
			p, err := startLocalRank(self, dev, r, o.Started)
			if err != nil {
				return fail(err)
			}
			d.workers = append(d.workers, p)
		}
		slices.SortFunc(d.workers, func(a, b *rankProc) int { return a.rank - b.rank }) // rescoring gathers in rank order
		for _, p := range d.workers {
			dist := &rankDist{Addr: addr, Port: port, Store: store, Rank: p.rank, World: world, TimeoutS: o.Timeout.Seconds(), Backend: backend}
			if err := p.send(rankRequest{Op: "load", Spec: &spec, Zero: o.Zero, Dist: dist}); err != nil {
				return fail(err)
			}
		}
		// Each rank first says whether it can load the policy at all (a
		// host without the shared filesystem fails here, not after the
		// rendezvous' timeout).
		for _, p := range d.workers {
			if r, err := p.reply(); err != nil || !r.OK {
				return fail(fmt.Errorf("%s before the rendezvous: %v%s", p.name(), err, r.Error))
			}
		}
		cfg, err := rankDist{Addr: addr, Port: port, Store: store, Rank: 0, World: world, TimeoutS: o.Timeout.Seconds(), Backend: backend}.config(dev0)
		if err != nil {
			return fail(err)
		}
		g, err := trainer.NewProcessGroup(cfg)
		if err != nil {
			return fail(fmt.Errorf("--nproc %d, world %d: %w", o.NProc, world, err))
		}
		l, err := loadLearner(dev0, spec, g, o.Zero)
		if err != nil {
			g.Close()
			return fail(err)
		}
		d.gotchLearner = l
		for _, p := range d.workers {
			if r, err := p.reply(); err != nil || !r.OK {
				d.Close()
				return nil, fmt.Errorf("%s loading %s: %v%s", p.name(), spec.Policy, err, r.Error)
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
				return nil, fmt.Errorf("%s: the weights' broadcast: %v%s", p.name(), err, r.Error)
			}
		}
		return d, nil
	}
}

// startLocalRank starts rank r on this host as a child process that takes
// its commands on stdin.
func startLocalRank(self, device string, r int, started func(int, *os.Process)) (*rankProc, error) {
	cmd := exec.Command(self, "learner-rank", "--device", device)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting learner rank %d: %w", r, err)
	}
	if started != nil {
		started(r, cmd.Process)
	}
	return &rankProc{rank: r, in: in, out: lineScanner(out), stop: func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}}, nil
}

// acceptRanks listens at o.Listen until n ranks of other hosts have dialled
// in (each says hello with its host), numbering them o.NProc, o.NProc+1, …
// in the order they arrive; it gives up after o.Timeout, saying how many
// came.
func acceptRanks(o DistOptions, n int, log zerolog.Logger) ([]*rankProc, error) {
	secret, err := RankSecret()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %s for the other hosts' ranks: %w", o.Listen, err)
	}
	defer ln.Close()
	log.Info().Str("listen", ln.Addr().String()).Int("ranks", n).Msgf("waiting for %d learner ranks of other hosts: seedctl learner-node --connect %s --nproc K there, with %s set as here", n, ln.Addr(), RankSecretEnv)
	if o.Listening != nil {
		o.Listening(ln.Addr().String())
	}
	type admitted struct {
		conn  net.Conn
		hello rankHello
		in    *bufio.Reader
	}
	// Every connection is checked in its own goroutine within
	// handshakeTimeout: a silent or slow peer holds no one up.
	ranks := make(chan admitted)
	done := make(chan struct{})
	defer close(done)
	slots := make(chan struct{}, pendingHandshakes)
	var mu sync.Mutex
	pending := map[string][]net.Conn{} // handshakes under way by source address, oldest first
	drop := func(host string, c net.Conn) {
		if i := slices.Index(pending[host], c); i >= 0 {
			pending[host] = slices.Delete(pending[host], i, i+1)
		}
		if len(pending[host]) == 0 {
			delete(pending, host)
		}
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // the listener closed
			}
			select {
			case slots <- struct{}{}:
			default:
				log.Warn().Str("from", conn.RemoteAddr().String()).Msgf("more than %d connections to the ranks' port at once; closed", pendingHandshakes)
				conn.Close()
				continue
			}
			host, _, _ := net.SplitHostPort(conn.RemoteAddr().String())
			mu.Lock()
			if q := pending[host]; len(q) >= pendingPerHost {
				// One address holds its share already: its oldest
				// handshake goes (a rank answers in milliseconds; what
				// is still pending is idle), the newcomer is heard.
				log.Debug().Str("from", q[0].RemoteAddr().String()).Msgf("more than %d handshakes at once from %s; the oldest closed", pendingPerHost, host)
				q[0].Close()
				drop(host, q[0])
			}
			pending[host] = append(pending[host], conn)
			mu.Unlock()
			go func() {
				defer func() { <-slots }()
				h, in, err := admitRank(conn, secret)
				mu.Lock()
				evicted := !slices.Contains(pending[host], conn)
				drop(host, conn)
				mu.Unlock()
				if evicted { // closed for a newer handshake from its address
					conn.Close()
					return
				}
				if err != nil {
					log.Warn().Str("from", conn.RemoteAddr().String()).Err(err).Msg("refused a connection to the ranks' port")
					conn.Close()
					return
				}
				select {
				case ranks <- admitted{conn, h, in}:
				case <-done:
					conn.Close()
				}
			}()
		}
	}()
	timer := time.NewTimer(o.Timeout)
	defer timer.Stop()
	var out []*rankProc
	for len(out) < n {
		select {
		case a := <-ranks:
			conn := a.conn
			p := &rankProc{rank: o.NProc + len(out), host: fmt.Sprintf("%s pid %d", a.hello.Host, a.hello.PID), in: conn, out: lineScanner(a.in), stop: func() { conn.Close() }}
			out = append(out, p)
			log.Info().Int("rank", p.rank).Str("host", a.hello.Host).Int("pid", a.hello.PID).Str("from", conn.RemoteAddr().String()).Msgf("learner rank %d dialled in and authenticated (%d of %d)", p.rank, len(out), n)
		case <-timer.C:
			for _, p := range out {
				p.stop()
			}
			return nil, fmt.Errorf("waiting for the other hosts' learner ranks at %s: %d of %d dialled in within %v (--dist-timeout)", ln.Addr(), len(out), n, o.Timeout)
		}
	}
	return out, nil
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
			errs = append(errs, fmt.Errorf("%s: %s", p.name(), r.Error))
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

// RescoreTeacher runs on rank 0 alone: the teacher is loaded there only,
// and its distributions stay in this process.
func (d *distLearner) RescoreTeacher(ctx context.Context, seqs [][]int, want [][]bool, topK int) ([][]float32, [][]*orchestrator.TokenDist, error) {
	return d.gotchLearner.RescoreTeacher(ctx, seqs, want, topK)
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
			return nil, fmt.Errorf("%s: %d log-prob rows for %d sequences", d.workers[i].name(), len(r.LogP), want)
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
		p.stop()
	}
	d.workers = nil
}

func (d *distLearner) Close() {
	d.stopWorkers()
	if d.gotchLearner != nil {
		d.gotchLearner.Close()
	}
	d.removeStore()
}

// DialRun dials a run's ranks port, retrying every second for up to wait.
func DialRun(ctx context.Context, addr string, wait time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(wait)
	for {
		conn, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("dialling the run at %s for %v: %w", addr, wait, err)
		}
		time.Sleep(time.Second)
	}
}

// ServeRank is one worker rank (seedctl learner-rank): it takes the run's
// commands, one JSON object a line, from in and answers each on out, until
// "close" or the end of in.
func ServeRank(ctx context.Context, device string, stdin io.Reader, stdout io.Writer) error {
	// torchrun's variables when set; a "load" carrying the group wins.
	cfg, fromEnv, err := trainer.DistConfigFromEnv()
	if err != nil {
		return fmt.Errorf("learner-rank: torchrun's variables (WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT): %w", err)
	}
	if fromEnv {
		// torchrun's LOCAL_RANK picks this rank's GPU, as in PyTorch.
		if lr := os.Getenv("LOCAL_RANK"); lr != "" && device == "cuda" {
			device = "cuda:" + lr
		}
		cfg.Backend = trainer.BackendFor(device)
		cfg.Device, _ = trainer.CUDAIndex(device)
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
		if l == nil && req.Op != "load" && req.Op != "close" {
			answer(fail(fmt.Errorf("rank %d: %q before \"load\": nothing is loaded yet", cfg.Rank, req.Op)))
			continue
		}
		if l != nil && req.Op == "load" {
			answer(fail(fmt.Errorf("rank %d: a second \"load\": this rank has its policy", cfg.Rank)))
			continue
		}
		switch req.Op {
		case "load":
			if req.Spec == nil {
				answer(fail(errors.New("load without a spec")))
				continue
			}
			switch {
			case req.Dist != nil:
				if cfg, err = req.Dist.config(device); err != nil {
					answer(fail(err))
					return err
				}
			case !fromEnv:
				err := errors.New("learner-rank: a load without the group to join, and no torchrun variables (WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT)")
				answer(fail(err))
				return err
			}
			if _, err := os.Stat(req.Spec.Policy); err != nil {
				host, _ := os.Hostname()
				err = fmt.Errorf("rank %d on %s: the policy %s: %w (the model and the run folder must be at the same path on every host: a shared filesystem)", cfg.Rank, host, req.Spec.Policy, err)
				answer(fail(err))
				return err
			}
			answer(rankReply{OK: true}) // checked: now the rendezvous
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
