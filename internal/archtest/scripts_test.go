package archtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestScriptsParse: every shell script under scripts/ (and setup.sh)
// parses with bash -n, and every Python file and Python heredoc in them
// compiles with python3 (the GPU check runs on a machine where a syntax
// error costs the whole try).
func TestScriptsParse(t *testing.T) {
	var sh, py []string
	for _, pat := range []string{"../../scripts/*.sh", "../../scripts/*/*.sh", "../../setup.sh", "../../.ci/run"} {
		m, _ := filepath.Glob(pat)
		sh = append(sh, m...)
	}
	for _, pat := range []string{"../../scripts/*/*.py", "../../trainer/testdata/*.py"} {
		m, _ := filepath.Glob(pat)
		py = append(py, m...)
	}
	if len(sh) < 4 || len(py) < 2 {
		t.Fatalf("found %d shell scripts and %d Python files: the globs are wrong", len(sh), len(py))
	}
	dir := t.TempDir()
	for _, f := range sh {
		if out, err := exec.Command("bash", "-n", f).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", f, err, out)
		}
		// Python heredocs: "$PY" - ... <<'EOF' … EOF.
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i < len(lines); i++ {
			if !strings.Contains(lines[i], `"$PY" -`) || !strings.HasSuffix(lines[i], "<<'EOF'") {
				continue
			}
			var body []string
			for i++; i < len(lines) && lines[i] != "EOF"; i++ {
				body = append(body, lines[i])
			}
			p := filepath.Join(dir, filepath.Base(f)+"-"+strings.Repeat("x", len(py))+".py")
			os.WriteFile(p, []byte(strings.Join(body, "\n")+"\n"), 0o644)
			py = append(py, p)
		}
	}
	for _, f := range py {
		cmd := exec.Command("python3", "-m", "py_compile", f)
		cmd.Env = append(os.Environ(), "PYTHONPYCACHEPREFIX="+filepath.Join(dir, "pycache")) // not beside the sources
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("python3 -m py_compile %s: %v\n%s", f, err, out)
		}
	}
}
