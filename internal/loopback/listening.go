package loopback

import (
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// Listening is the local address ("127.0.0.1:8080", "[::]:22") of every
// TCP socket process pid listens on, read from /proc (Linux only; an
// error elsewhere). Tests use it to check what a component exposes.
func Listening(pid int) ([]string, error) {
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", fdDir, err)
	}
	mine := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fdDir + "/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue // no IPv6
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" || !mine[fs[9]] { // 0A: LISTEN; 9: the inode
				continue
			}
			out = append(out, procAddr(fs[1]))
		}
	}
	return out, nil
}

// Exposed is the subset of addrs (host:port) not on a loopback address.
func Exposed(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		host, _, _ := net.SplitHostPort(a)
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			out = append(out, a)
		}
	}
	return out
}

// procAddr turns /proc/net/tcp's "0100007F:1F90" (hex; each 32-bit word
// of the address in host byte order, little-endian here) into
// "127.0.0.1:8080".
func procAddr(s string) string {
	hexIP, hexPort, _ := strings.Cut(s, ":")
	port, _ := strconv.ParseUint(hexPort, 16, 16)
	raw, _ := hex.DecodeString(hexIP)
	ip := make(net.IP, len(raw))
	for i := 0; i+4 <= len(raw); i += 4 {
		ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10))
}
