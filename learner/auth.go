package learner

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"time"
)

// The learner port (seedctl run --world-size W above --nproc, --listen)
// admits only ranks that prove they know a secret shared by every host,
// and ranks obey only a run that proves the same. The secret is read from
// RankSecretEnv on each host, never from a flag or a config (which end up
// in shell histories, process lists and logs), and never travels: each
// side answers the other's random challenge with an HMAC-SHA256 of it.
//
//	run  → rank: {"challenge": C1}
//	rank → run:  {"host", "pid", "proof": HMAC(secret, "rank:"+C1), "challenge": C2}
//	run  → rank: {"proof": HMAC(secret, "run:"+C2)}
//
// Each line is at most handshakeMaxBytes and the whole exchange must end
// within handshakeTimeout; handshakes run concurrently, so silent or slow
// peers cannot keep a real rank out. What follows is not encrypted or
// integrity-protected: the port, like c10d's own rendezvous (MASTER_PORT,
// which PyTorch leaves unauthenticated too), belongs on a network of your
// own hosts.
const RankSecretEnv = "SEEDCTL_RANK_SECRET"

const (
	handshakeMaxBytes = 4096
	// pendingHandshakes bounds connections being checked at once (more
	// are closed on arrival), and pendingPerHost those from one source
	// address: a newcomer past it closes that address's oldest pending
	// one. A flood from one address holds pendingPerHost slots at most
	// and leaves the rest to other hosts' ranks; a rank whose handshake
	// is closed by it retries (JoinRunRetrying).
	pendingHandshakes = 256
	pendingPerHost    = 4
	minSecretLen      = 16
)

// handshakeTimeout bounds the whole handshake (a variable for tests).
var handshakeTimeout = 10 * time.Second

// RankSecret reads the shared secret.
func RankSecret() ([]byte, error) {
	s := os.Getenv(RankSecretEnv)
	if len(s) < minSecretLen {
		return nil, fmt.Errorf("ranks on other hosts authenticate with a shared secret: set %s to the same value (at least %d characters, e.g. from `openssl rand -hex 32`) in the environment of the run and of every learner-node", RankSecretEnv, minSecretLen)
	}
	return []byte(s), nil
}

// rankHello is a dialling rank's answer to the run's challenge.
type rankHello struct {
	Host      string `json:"host"`
	PID       int    `json:"pid"`
	Proof     string `json:"proof"`
	Challenge string `json:"challenge"`
}

type challengeLine struct {
	Challenge string `json:"challenge"`
}

type proofLine struct {
	Proof string `json:"proof,omitempty"`
	// Error is the run's refusal of a rank whose proof was wrong: the
	// rank stops instead of retrying.
	Error string `json:"error,omitempty"`
}

func newChallenge() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// proof is HMAC-SHA256(secret, role:challenge), hex.
func proof(secret []byte, role, challenge string) string {
	m := hmac.New(sha256.New, secret)
	io.WriteString(m, role+":"+challenge)
	return hex.EncodeToString(m.Sum(nil))
}

func proofOK(secret []byte, role, challenge, got string) bool {
	want := proof(secret, role, challenge)
	return hmac.Equal([]byte(want), []byte(got))
}

// readHandshakeLine reads one line of at most handshakeMaxBytes into v.
func readHandshakeLine(br *bufio.Reader, v any) error {
	var line []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			return err
		}
		line = append(line, chunk...)
		if len(line) > handshakeMaxBytes {
			return fmt.Errorf("a handshake line over %d bytes", handshakeMaxBytes)
		}
		if !isPrefix {
			break
		}
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("a handshake line that is not the expected JSON: %w", err)
	}
	return nil
}

func writeLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// errNotARank is a peer that failed the handshake.
var errNotARank = errors.New("not an authenticated learner rank")

// admitRank runs the run's side of the handshake on conn; the reader it
// returns holds whatever the rank sent after it.
func admitRank(conn net.Conn, secret []byte) (rankHello, *bufio.Reader, error) {
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	defer conn.SetDeadline(time.Time{})
	br := bufio.NewReaderSize(conn, handshakeMaxBytes)
	c1, err := newChallenge()
	if err != nil {
		return rankHello{}, nil, err
	}
	if err := writeLine(conn, challengeLine{c1}); err != nil {
		return rankHello{}, nil, fmt.Errorf("%w: sending the challenge: %v", errNotARank, err)
	}
	var h rankHello
	if err := readHandshakeLine(br, &h); err != nil {
		return h, nil, fmt.Errorf("%w: %v", errNotARank, err)
	}
	if !proofOK(secret, "rank", c1, h.Proof) {
		_ = writeLine(conn, proofLine{Error: "wrong proof of " + RankSecretEnv + ": the run's secret is a different one"})
		return h, nil, fmt.Errorf("%w: wrong proof of %s (a different secret?)", errNotARank, RankSecretEnv)
	}
	if h.Host == "" || len(h.Challenge) < 32 {
		return h, nil, fmt.Errorf("%w: no host name or challenge in its hello", errNotARank)
	}
	if err := writeLine(conn, proofLine{Proof: proof(secret, "run", h.Challenge)}); err != nil {
		return h, nil, fmt.Errorf("%w: answering its challenge: %v", errNotARank, err)
	}
	return h, br, nil
}

// JoinRun runs a dialling rank's side of the handshake; the reader it
// returns holds the run's commands that follow.
func JoinRun(conn net.Conn, secret []byte, host string, pid int) (*bufio.Reader, error) {
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	defer conn.SetDeadline(time.Time{})
	br := bufio.NewReaderSize(conn, 1<<20)
	var ch challengeLine
	if err := readHandshakeLine(br, &ch); err != nil {
		return nil, fmt.Errorf("the run's challenge: %w", err)
	}
	if len(ch.Challenge) < 32 {
		return nil, errors.New("the run sent no challenge: is this a seedctl run's --listen address?")
	}
	c2, err := newChallenge()
	if err != nil {
		return nil, err
	}
	if err := writeLine(conn, rankHello{Host: host, PID: pid, Proof: proof(secret, "rank", ch.Challenge), Challenge: c2}); err != nil {
		return nil, fmt.Errorf("answering the run's challenge: %w", err)
	}
	var p proofLine
	if err := readHandshakeLine(br, &p); err != nil {
		return nil, fmt.Errorf("the run closed the handshake (busy, or a different %s?): %w", RankSecretEnv, err)
	}
	if p.Error != "" {
		return nil, fmt.Errorf("%w: %s", ErrRankRefused, p.Error)
	}
	if !proofOK(secret, "run", c2, p.Proof) {
		return nil, fmt.Errorf("%w: the peer at this address did not prove it knows %s: not taking its commands", ErrRankRefused, RankSecretEnv)
	}
	return br, nil
}

// ErrRankRefused is a handshake that retrying cannot mend: the run said
// this rank's secret is wrong, or the peer could not prove it knows it.
var ErrRankRefused = errors.New("refused")

// JoinRunRetrying dials the run at addr and joins it, retrying dials and
// handshakes that fail for any reason but ErrRankRefused (a run not up
// yet, a handshake slot lost to other connections, a dropped connection)
// with exponential backoff from 250 ms to 5 s, jittered, for up to wait.
func JoinRunRetrying(ctx context.Context, addr string, secret []byte, host string, pid int, wait time.Duration) (net.Conn, *bufio.Reader, error) {
	start := time.Now()
	deadline := start.Add(wait)
	delay := 250 * time.Millisecond
	for tries := 1; ; tries++ {
		conn, err := DialRun(ctx, addr, time.Until(deadline))
		if err != nil {
			return nil, nil, err
		}
		in, err := JoinRun(conn, secret, host, pid)
		if err == nil {
			return conn, in, nil
		}
		conn.Close()
		if errors.Is(err, ErrRankRefused) || time.Now().Add(delay).After(deadline) {
			return nil, nil, fmt.Errorf("joining the run at %s (%d tries in %v): %w", addr, tries, time.Since(start).Round(time.Millisecond), err)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(delay/2 + time.Duration(mrand.Int64N(int64(delay/2)+1))):
		}
		delay = min(2*delay, 5*time.Second)
	}
}
