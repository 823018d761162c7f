package loopback

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestFreePortCanBeBound(t *testing.T) {
	p, err := FreePort()
	if err != nil || p <= 0 || p > 65535 {
		t.Fatalf("FreePort: %d, %v", p, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		t.Fatalf("port %d: %v", p, err)
	}
	l.Close()
}

func TestProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"00000000:7530":                         "0.0.0.0:30000",
		"00000000000000000000000001000000:0050": "[::1]:80",
		"00000000000000000000000000000000:0016": "[::]:22",
	} {
		if got := procAddr(in); got != want {
			t.Errorf("procAddr(%s) = %s, want %s", in, got, want)
		}
	}
}

// Listening finds this process's own listeners, and Exposed tells a
// loopback one from one on every interface.
func TestListeningAndExposed(t *testing.T) {
	lo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Close()
	all, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	got, err := Listening(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	has := func(port int) string {
		for _, a := range got {
			if strings.HasSuffix(a, ":"+strconv.Itoa(port)) {
				return a
			}
		}
		return ""
	}
	loA, allA := has(lo.Addr().(*net.TCPAddr).Port), has(all.Addr().(*net.TCPAddr).Port)
	if loA == "" || allA == "" {
		t.Fatalf("listening %v: want both %v and %v", got, lo.Addr(), all.Addr())
	}
	if ex := Exposed([]string{loA, allA}); len(ex) != 1 || ex[0] != allA {
		t.Errorf("Exposed(%s, %s) = %v, want only %s", loA, allA, ex, allA)
	}
}
