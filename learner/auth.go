package learner

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	// pendingHandshakes bounds connections being checked at once; more
	// are closed on arrival.
	pendingHandshakes = 32
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
	Proof string `json:"proof"`
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
		return h, nil, fmt.Errorf("%w: wrong proof of %s (a different secret?)", errNotARank, RankSecretEnv)
	}
	if h.Host == "" || len(h.Challenge) < 32 {
		return h, nil, fmt.Errorf("%w: no host name or challenge in its hello", errNotARank)
	}
	if err := writeLine(conn, proofLine{proof(secret, "run", h.Challenge)}); err != nil {
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
		return nil, fmt.Errorf("the run refused this rank (a different %s?) or did not prove itself: %w", RankSecretEnv, err)
	}
	if !proofOK(secret, "run", c2, p.Proof) {
		return nil, fmt.Errorf("the peer at this address did not prove it knows %s: not taking its commands", RankSecretEnv)
	}
	return br, nil
}
