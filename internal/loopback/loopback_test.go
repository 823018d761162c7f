package loopback

import (
	"net"
	"strconv"
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
