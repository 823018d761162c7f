package agentgym

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/envadapters"
	"github.com/seedctl/seedctl/envadapters/household"
)

// FuzzServer: any sequence of bodies on any route of seedctl env serve
// (both dialects) is answered with HTTP 200 and JSON (AgentGym reports
// errors as {"error": …}), never a panic or a 5xx.
func FuzzServer(f *testing.F) {
	b, err := envadapters.Lookup(household.Name)
	if err != nil {
		f.Fatal(err)
	}
	servers := map[bool]http.Handler{}
	for _, ws := range []bool{false, true} {
		d := ALFWorld
		if ws {
			d = WebShop
		}
		s, err := NewServerDialect(b, envadapters.Train, nil, d, zerolog.Nop())
		if err != nil {
			f.Fatal(err)
		}
		servers[ws] = s.Handler()
	}
	routes := []string{"/create", "/reset", "/step", "/close", "/observation?id=0", "/available_actions?env_idx=0", "/instruction_text?env_idx=0", "/detail?id=0", "/nope"}
	f.Add(uint8(1), []byte(`{"id": 0, "game": 3, "world_type": "Text"}`), false)
	f.Add(uint8(2), []byte(`{"id": 0, "action": "go to cabinet 1"}`), false)
	f.Add(uint8(1), []byte(`{"env_idx": 0, "session_id": 2}`), true)
	f.Add(uint8(2), []byte(`{"env_idx": 0, "action": "click[buy now]"}`), true)
	f.Add(uint8(1), []byte(`{"id": -1, "game": 99999999999}`), false)
	f.Add(uint8(2), []byte(`{"id": 0, "action": null}`), false)
	f.Add(uint8(3), []byte(`[1, 2]`), true)
	f.Add(uint8(4), []byte{}, false)
	f.Fuzz(func(t *testing.T, route uint8, body []byte, webshop bool) {
		h := servers[webshop]
		// An environment to act on: create, reset to game 0.
		for _, pre := range [][2]string{{"/create", `{}`}, {"/reset", `{"id": 0, "env_idx": 0, "game": 0, "session_id": 0}`}} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("POST", pre[0], bytes.NewReader([]byte(pre[1]))))
		}
		path := routes[int(route)%len(routes)]
		method := "POST"
		if int(route)%len(routes) >= 4 {
			method = "GET"
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s %s %q: HTTP %d %s", method, path, body, rec.Code, rec.Body.String())
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %s %q: answer %q is not JSON", method, path, body, rec.Body.String())
		}
	})
}
