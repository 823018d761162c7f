// Package loopback finds free ports on 127.0.0.1.
package loopback

import "net"

// FreePort asks the kernel for a free loopback port (it may be taken
// again before the caller binds it; callers retry or fail clearly).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
