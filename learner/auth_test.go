package learner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// Both sides prove the secret; a different secret fails on both.
func TestRankHandshake(t *testing.T) {
	secret := []byte("the secret shared by the hosts")
	run := func(RankSecret []byte) (hello rankHello, runErr, rankErr error) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		done := make(chan error, 1)
		go func() {
			_, err := JoinRun(b, RankSecret, "hostB", 42)
			if err != nil {
				b.Close()
			}
			done <- err
		}()
		hello, _, runErr = admitRank(a, secret)
		if runErr != nil {
			a.Close()
		}
		return hello, runErr, <-done
	}
	h, runErr, rankErr := run(secret)
	if runErr != nil || rankErr != nil || h.Host != "hostB" || h.PID != 42 {
		t.Fatalf("same secret: run %v, rank %v, hello %+v", runErr, rankErr, h)
	}
	_, runErr, rankErr = run([]byte("another secret of the same size"))
	if runErr == nil || rankErr == nil || !strings.Contains(runErr.Error(), "wrong proof") {
		t.Errorf("different secrets: run %v, rank %v; want both refused", runErr, rankErr)
	}
}

// A rank dialling something that is not the run (or a run with another
// secret) takes no command from it.
func TestRankRefusesAnUnprovenRun(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		br := bufio.NewReader(a)
		writeLine(a, challengeLine{strings.Repeat("ab", 32)})
		br.ReadLine()
		writeLine(a, proofLine{Proof: "00"})                // a wrong proof
		writeLine(a, map[string]any{"op": "step", "lr": 1}) // then a command
	}()
	if _, err := JoinRun(b, []byte("the secret shared by the hosts"), "h", 1); err == nil || !strings.Contains(err.Error(), "did not prove") {
		t.Errorf("JoinRun: %v", err)
	}
}

// Silent peers, a huge line and idle connections do not keep the real
// rank out: it is admitted at once, and the others are dropped.
func TestAcceptRanksIgnoresHostilePeers(t *testing.T) {
	t.Setenv(RankSecretEnv, "the secret shared by the hosts")
	old := handshakeTimeout
	handshakeTimeout = 2 * time.Second
	defer func() { handshakeTimeout = old }()
	at, res := startAccept(2, 1)
	var hostile []net.Conn
	for range 5 { // idle connections
		c, err := net.Dial("tcp", at)
		if err != nil {
			t.Fatal(err)
		}
		hostile = append(hostile, c)
	}
	big, _ := net.Dial("tcp", at) // one line of 10 MB
	hostile = append(hostile, big)
	go big.Write([]byte(strings.Repeat("x", 10<<20)))
	defer func() {
		for _, c := range hostile {
			c.Close()
		}
	}()
	start := time.Now()
	c, err := net.Dial("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := JoinRun(c, []byte("the secret shared by the hosts"), "hostB", 7); err != nil {
		t.Fatalf("the real rank: %v", err)
	}
	r := <-res
	if r.err != nil || len(r.ps) != 1 || !strings.Contains(r.ps[0].host, "hostB pid 7") {
		t.Fatalf("acceptRanks: %v %+v", r.err, r.ps)
	}
	if el := time.Since(start); el > handshakeTimeout {
		t.Errorf("the real rank waited %v behind hostile peers", el)
	}
	// The admitted rank gets commands on the authenticated connection.
	if err := r.ps[0].send(rankRequest{Op: "close"}); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	var req rankRequest
	if json.Unmarshal([]byte(line), &req) != nil || req.Op != "close" {
		t.Errorf("the rank read %q", line)
	}
	r.ps[0].stop()
}

// Without the secret the layout is refused before anything listens.
func TestOtherHostsNeedTheSecret(t *testing.T) {
	t.Setenv(RankSecretEnv, "")
	err := DistOptions{NProc: 1, World: 2, Listen: "127.0.0.1:0", MasterAddr: "h", Timeout: time.Second}.Validate()
	if err == nil || !strings.Contains(err.Error(), RankSecretEnv) {
		t.Errorf("validate without the secret: %v", err)
	}
	t.Setenv(RankSecretEnv, "short")
	if err := (DistOptions{NProc: 1, World: 2, Listen: "127.0.0.1:0", MasterAddr: "h", Timeout: time.Second}).Validate(); err == nil {
		t.Error("a 5-character secret was accepted")
	}
	if err := (DistOptions{NProc: 2, Timeout: time.Second}).Validate(); err != nil {
		t.Errorf("one host needs no secret: %v", err)
	}
}

// Commands before "load", or a second "load", are errors answered to the
// sender, never a crash.
func TestRankCommandsOutOfOrder(t *testing.T) {
	var out strings.Builder
	in := strings.Join([]string{
		`{"op":"step","rows":[],"lr":1}`,
		`{"op":"sft","data":[]}`,
		`{"op":"rescore","seqs":[[1,2]]}`,
		`{"op":"rescore_ref","seqs":[[1,2]]}`,
		`{"op":"save","dir":"/tmp/x"}`,
		`{"op":"close"}`,
	}, "\n") + "\n"
	if err := ServeRank(context.Background(), "cpu", strings.NewReader(in), &out); err != nil {
		t.Fatalf("ServeRank: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("answers %q, want 5", lines)
	}
	for _, l := range lines {
		var r rankReply
		if json.Unmarshal([]byte(l), &r) != nil || r.OK || !strings.Contains(r.Error, `before "load"`) {
			t.Errorf("answer %s", l)
		}
	}
}

// A flood from one address — 40 silent connections, each reopened as soon
// as it is closed — does not keep four real ranks of another host out
// (before, it held all 32 handshake slots and every real join failed with
// "the run's challenge: EOF"); a rank with the wrong secret is told so
// and stops at once instead of retrying.
func TestRanksJoinThroughAFlood(t *testing.T) {
	const secret = "the secret shared by the hosts"
	t.Setenv(RankSecretEnv, secret)
	old := handshakeTimeout
	handshakeTimeout = 3 * time.Second
	defer func() { handshakeTimeout = old }()
	flooder := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	if c, err := flooder.Dial("tcp", "127.0.0.1:1"); err != nil && !strings.Contains(err.Error(), "refused") {
		t.Skipf("no second loopback source address here: %v", err)
	} else if c != nil {
		c.Close()
	}
	at, res := startAccept(5, 4)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := flooder.DialContext(ctx, "tcp", at)
				if err != nil {
					continue
				}
				go func() { <-ctx.Done(); c.Close() }()
				io.Copy(io.Discard, c) // until the run closes it
				c.Close()
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()
	time.Sleep(200 * time.Millisecond) // the flood first

	if _, _, err := JoinRunRetrying(ctx, at, []byte("not the run's secret, at all"), "hostX", 1, time.Minute); !errors.Is(err, ErrRankRefused) {
		t.Errorf("a rank with the wrong secret: %v, want ErrRankRefused", err)
	}
	start := time.Now()
	var joined sync.WaitGroup
	errs := make([]error, 4)
	conns := make([]net.Conn, 4)
	for i := range 4 {
		joined.Add(1)
		go func() {
			defer joined.Done()
			conns[i], _, errs[i] = JoinRunRetrying(ctx, at, []byte(secret), "hostB", 100+i, 30*time.Second)
		}()
	}
	joined.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("real rank %d: %v", i, err)
		} else {
			defer conns[i].Close()
		}
	}
	r := <-res
	if r.err != nil || len(r.ps) != 4 {
		t.Fatalf("acceptRanks through the flood: %d ranks, %v", len(r.ps), r.err)
	}
	for _, p := range r.ps {
		p.stop()
	}
	t.Logf("4 ranks joined through the flood in %v", time.Since(start).Round(time.Millisecond))
}

// acceptResult is what acceptRanks returned.
type acceptResult struct {
	ps  []*rankProc
	err error
}

// startAccept runs acceptRanks for n ranks of a world on a loopback port
// in the background: the address it listens on, and its result to come.
func startAccept(world, n int) (string, <-chan acceptResult) {
	addr := make(chan string, 1)
	res := make(chan acceptResult, 1)
	go func() {
		ps, err := acceptRanks(DistOptions{NProc: 1, World: world, Listen: "127.0.0.1:0", Timeout: time.Minute, Listening: func(a string) { addr <- a }}, n, zerolog.Nop())
		res <- acceptResult{ps, err}
	}()
	return <-addr, res
}
