package learner

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"
)

// FuzzRankHandshake: whatever a peer sends to the ranks' port, the run's
// side of the handshake returns (within its deadline), never panics, and
// admits only a peer that answered its challenge with the right proof —
// which random bytes never do.
func FuzzRankHandshake(f *testing.F) {
	for _, s := range []string{
		`{"host":"h","pid":1,"proof":"00","challenge":"` + strings.Repeat("ab", 32) + `"}` + "\n",
		"\n", "{}\n", `{"host":` + "\n", strings.Repeat("x", 5000) + "\n", `{"proof":null}` + "\n",
	} {
		f.Add([]byte(s))
	}
	secret := []byte("the secret shared by the hosts")
	old := handshakeTimeout
	handshakeTimeout = 50 * time.Millisecond
	f.Cleanup(func() { handshakeTimeout = old })
	f.Fuzz(func(t *testing.T, peer []byte) {
		a, b := net.Pipe()
		defer a.Close()
		go func() {
			br := bufio.NewReader(b)
			br.ReadString('\n') // the challenge
			b.SetWriteDeadline(time.Now().Add(handshakeTimeout))
			b.Write(peer)
			b.Close() // then hang up: the run must not wait for more
		}()
		if _, _, err := admitRank(a, secret); err == nil {
			t.Fatalf("admitted a peer that sent %q", peer)
		}
	})
}

// FuzzRankCommands: a rank fed any lines (an authenticated run that went
// wrong, or a bug) answers each with a reply or stops with an error; it
// never panics. Lines with "load" are left out: a load starts a real
// process group.
func FuzzRankCommands(f *testing.F) {
	for _, s := range []string{
		`{"op":"step","rows":[{"id":"a","ids":[1,2]}],"lr":1}`,
		`{"op":"rescore","seqs":[[1,2,3]]}`,
		`{"op":"save","dir":"/tmp"}`,
		`{"op":"sft","data":[],"sft":{"epochs":1}}`,
		`{"op":"nonsense"}`, `not json`, `{"op":"close"}`, `[]`, `{"op":null}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lines string) {
		if strings.Contains(lines, "load") || strings.Contains(lines, `\u`) {
			return
		}
		var out strings.Builder
		_ = ServeRank(context.Background(), "cpu", strings.NewReader(lines), &out)
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if l == "" {
				continue
			}
			var r rankReply
			if err := json.Unmarshal([]byte(l), &r); err != nil || r.OK {
				t.Fatalf("for %q the rank answered %q: want an error reply", lines, l)
			}
		}
	})
}
