package procmem

import (
	"runtime"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name   string
		status string
		want   Usage
		ok     bool
	}{
		{"both", "Name:\tseedctl\nVmHWM:\t 5279956 kB\nVmRSS:\t 1827408 kB\nThreads:\t12\n", Usage{Resident: 1827408 << 10, Peak: 5279956 << 10}, true},
		{"no peak", "VmRSS:\t 10 kB\n", Usage{}, false},
		{"not kB", "VmHWM:\t 1 MB\nVmRSS:\t 1 kB\n", Usage{}, false},
		{"not a number", "VmHWM:\t x kB\nVmRSS:\t 1 kB\n", Usage{}, false},
	}
	for _, tc := range tests {
		got, err := parse([]byte(tc.status))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v (ok %v)", tc.name, got, err, tc.want, tc.ok)
		}
	}
}

// This process's figures: a resident set that grows when memory is
// touched, never above its peak.
func TestRead(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/self/status is Linux's")
	}
	before, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	after, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if after.Resident < before.Resident+32<<20 || after.Peak < after.Resident {
		t.Errorf("before %+v, after touching 64 MiB %+v", before, after)
	}
	runtime.KeepAlive(buf)
}
