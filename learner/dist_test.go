package learner

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/seedctl/seedctl/orchestrator"
	"github.com/seedctl/seedctl/trainer"
)

// Ranks of other hosts that never dial in stop the run at --dist-timeout,
// saying how many came; a rank whose host lacks the policy's path says so
// before the rendezvous; the flags refuse a layout that cannot work.
func TestOtherHostsRanksFailClearly(t *testing.T) {
	if !trainer.DistAvailable(trainer.BackendGloo) {
		t.Skip("this libtorch build has no Gloo process group")
	}
	t.Setenv(RankSecretEnv, "the secret shared by the hosts")
	spec := orchestrator.LearnerSpec{Policy: "/nowhere/policy", Reference: "/nowhere/policy", Temperature: 1}
	start := time.Now()
	_, err := Dist(DistOptions{Device: "cpu", NProc: 1, World: 3, Listen: "127.0.0.1:0", MasterAddr: "127.0.0.1", MasterPort: 29999, Timeout: 2 * time.Second}, zerolog.Nop())(spec)
	if err == nil || !strings.Contains(err.Error(), "0 of 2 dialled in within 2s (--dist-timeout)") {
		t.Errorf("no other host's rank came: %v", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("gave up after %v", d)
	}
	var out bytes.Buffer
	in := `{"op":"load","spec":{"policy":"/nowhere/policy"},"dist":{"addr":"127.0.0.1","port":29999,"rank":1,"world":2,"timeout_s":5}}` + "\n"
	if err := ServeRank(context.Background(), "cpu", strings.NewReader(in), &out); err == nil || !strings.Contains(out.String(), "same path on every host") {
		t.Errorf("a rank without the policy's path: %v, answered %s", err, out.String())
	}
	for _, c := range []struct {
		o    DistOptions
		want string
	}{
		{DistOptions{NProc: 2, World: 1, Timeout: time.Second}, "below --nproc"},
		{DistOptions{NProc: 1, World: 2, Listen: ":0", Timeout: time.Second}, "--master-addr"},
		{DistOptions{NProc: 1, World: 2, MasterAddr: "h", Timeout: time.Second}, "--listen"},
		{DistOptions{NProc: 2, Timeout: 0}, "--dist-timeout"},
	} {
		if err := c.o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want it to name %s", c.o, err, c.want)
		}
	}
}

// GPU ranks: each of a host's ranks takes its own GPU, every rank uses
// the run's backend, and a build without NCCL says what it lacks.
func TestGPURanksDevicesAndBackend(t *testing.T) {
	for _, c := range []struct {
		device       string
		local, hosts int
		want, err    string
	}{
		{"cpu", 3, 4, "cpu", ""},
		{"cuda", 0, 4, "cuda:0", ""},
		{"cuda", 3, 4, "cuda:3", ""},
		{"cuda:2", 0, 1, "cuda:2", ""},
		{"cuda:2", 0, 2, "", "names one GPU but 2 ranks"},
	} {
		got, err := RankDevice(c.device, c.local, c.hosts)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("RankDevice(%q, %d, %d) = %q, %v; want %q, %q", c.device, c.local, c.hosts, got, err, c.want, c.err)
		}
	}
	d := rankDist{Addr: "127.0.0.1", Port: 29500, Rank: 1, World: 2, TimeoutS: 5, Backend: trainer.BackendNCCL}
	cfg, err := d.config("cuda:3")
	if err != nil || cfg.Backend != trainer.BackendNCCL || cfg.Device != 3 {
		t.Errorf("an NCCL rank on cuda:3: %+v, %v", cfg, err)
	}
	if _, err := d.config("cpu"); err == nil || !strings.Contains(err.Error(), "use nccl but this rank's device is cpu") {
		t.Errorf("a CPU rank in an NCCL run: %v", err)
	}
	d.Backend = "" // a run before backends: Gloo
	if cfg, err := d.config("cpu"); err != nil || cfg.Backend != trainer.BackendGloo {
		t.Errorf("a CPU rank: %+v, %v", cfg, err)
	}
	none := func(string) bool { return false }
	all := func(string) bool { return true }
	for _, c := range []struct {
		o         DistOptions
		available func(string) bool
		err       string
	}{
		{DistOptions{Device: "cuda", NProc: 2}, none, "no NCCL process group"},
		{DistOptions{Device: "cpu", NProc: 2}, none, "no Gloo process group"},
		{DistOptions{Device: "cuda", NProc: 1}, none, ""},
		{DistOptions{Device: "cuda", NProc: 4, World: 8}, all, ""},
		{DistOptions{Device: "cuda:1", NProc: 2}, all, "names one GPU"},
		{DistOptions{Device: "cuda:1", NProc: 1, World: 2}, all, ""},
		{DistOptions{Device: "cpu", NProc: 1, Zero: true}, all, "--zero"},
	} {
		err := c.o.CheckBuild(c.available)
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.err)
		}
	}
}
