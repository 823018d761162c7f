// Package procmem reads this process's resident memory from the kernel
// (Linux's /proc/self/status): the resident set now and its peak.
package procmem

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Usage is the resident set in bytes: now (VmRSS) and its peak since the
// process started (VmHWM).
type Usage struct{ Resident, Peak uint64 }

// Read returns this process's Usage; an error where /proc is absent (not
// Linux) or unreadable.
func Read() (Usage, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return Usage{}, fmt.Errorf("reading the resident set: %w", err)
	}
	return parse(b)
}

// parse reads VmRSS and VmHWM ("VmRSS:	 1826648 kB") from a status file.
func parse(status []byte) (Usage, error) {
	var u Usage
	var got int
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		key, rest, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok || (string(key) != "VmRSS" && string(key) != "VmHWM") {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return Usage{}, fmt.Errorf("/proc/self/status: %s is %q, want a count of kB", key, rest)
		}
		kb, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return Usage{}, fmt.Errorf("/proc/self/status: %s: %w", key, err)
		}
		if string(key) == "VmRSS" {
			u.Resident = kb << 10
		} else {
			u.Peak = kb << 10
		}
		got++
	}
	if got != 2 {
		return Usage{}, fmt.Errorf("/proc/self/status: no VmRSS and VmHWM lines")
	}
	return u, nil
}
