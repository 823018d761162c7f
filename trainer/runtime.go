package trainer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sugarme/gotch"
)

// RuntimeInfo describes the libtorch this binary runs on, as observed in the
// running process (not as configured at build time).
type RuntimeInfo struct {
	LibtorchVersion string // e.g. "1.13.1"; "unknown" when no source tells
	VersionSource   string // where the version came from
	LibtorchPath    string // libtorch_cpu as mapped into this process
	CUDAAvailable   bool
	CUDADevices     int64
	BLAS            BLASInfo
	// Attention is the attention kernel this build uses (AttentionKernel).
	Attention string
	// CUDABuild: libtorch's CUDA library is loaded (a CUDA build, whether
	// or not a GPU is visible).
	CUDABuild bool
}

// Device is "CUDA" when libtorch sees a GPU, else "CPU".
func (r RuntimeInfo) Device() string {
	if r.CUDAAvailable {
		return "CUDA"
	}
	return "CPU"
}

// BLASKind classifies the BLAS implementation libtorch's CPU kernels call.
type BLASKind string

const (
	BLASOpenBLAS  BLASKind = "OpenBLAS"
	BLASMKL       BLASKind = "MKL"
	BLASBLIS      BLASKind = "BLIS"
	BLASAtlas     BLASKind = "ATLAS"
	BLASReference BLASKind = "reference BLAS"
	// BLASBuiltin means no separate BLAS library is mapped: the libtorch
	// archives from pytorch.org link MKL statically.
	BLASBuiltin BLASKind = "built into libtorch"
)

// BLASInfo names the BLAS library mapped into the process.
type BLASInfo struct {
	Kind BLASKind
	Path string
	// Core is the kernel set OpenBLAS runs (BLASCore), Forced the
	// OPENBLAS_CORETYPE it was given, and AVX512 whether the CPU could run
	// AVX-512 kernels.
	Core   string
	Forced string
	AVX512 bool
	// Best is the fastest kernel set the CPU runs (CPUBestBLASCore);
	// Detected, what OpenBLAS had picked itself when FixBLASCore restarted
	// the process with OPENBLAS_CORETYPE=Best ("" when it did not).
	Best     string
	Detected string
}

// Misdetected reports whether OpenBLAS, left to detect the CPU, runs
// pre-AVX2 kernels on a CPU with better ones (MisdetectedBLASCore).
func (b BLASInfo) Misdetected() bool { return MisdetectedBLASCore(b.Forced, b.Core, b.Best) }

// ForcedAVX2 reports whether OPENBLAS_CORETYPE holds OpenBLAS to AVX2
// kernels on an AVX-512 CPU (ForcedAVX2Kernels).
func (b BLASInfo) ForcedAVX2() bool { return ForcedAVX2Kernels(b.Forced, b.Core, b.AVX512) }

// withKernels fills in which kernels OpenBLAS runs, the OPENBLAS_CORETYPE
// it was given and whether the CPU has AVX-512.
func (b BLASInfo) withKernels() BLASInfo {
	b.Core, b.Forced, b.AVX512 = BLASCore(), os.Getenv(BLASCoreEnv), CPUHasAVX512()
	b.Best, b.Detected = CPUBestBLASCore(), os.Getenv(BLASDetectedEnv)
	return b
}

// Kernels is the kernel part of BLASInfo (Core, Forced, AVX512) without
// Runtime's inspection of the loaded libraries, for a check at start-up.
func Kernels() BLASInfo { return BLASInfo{}.withKernels() }

// Slow reports whether this BLAS is the unoptimised reference implementation
// (Debian's default libblas3), roughly 35x slower than OpenBLAS here.
func (b BLASInfo) Slow() bool { return b.Kind == BLASReference }

// ErrLibtorchNotMapped means the process has no libtorch_cpu mapped, which
// should be impossible for a binary that links gotch.
var ErrLibtorchNotMapped = errors.New("libtorch_cpu is not mapped into this process")

// Runtime inspects the running process: which libtorch and BLAS libraries
// the dynamic loader picked, and whether CUDA is usable.
func Runtime() (RuntimeInfo, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return RuntimeInfo{}, fmt.Errorf("inspecting loaded libraries: %w", err)
	}
	defer f.Close()
	libs, err := mappedLibraries(f)
	if err != nil {
		return RuntimeInfo{}, fmt.Errorf("inspecting loaded libraries: %w", err)
	}
	info := RuntimeInfo{BLAS: classifyBLAS(libs).withKernels()}
	for _, l := range libs {
		switch base := filepath.Base(l); {
		case strings.HasPrefix(base, "libtorch_cpu.so") && info.LibtorchPath == "":
			info.LibtorchPath = l
		case strings.HasPrefix(base, "libtorch_cuda.so"):
			info.CUDABuild = true
		}
	}
	if info.LibtorchPath == "" {
		return info, ErrLibtorchNotMapped
	}
	info.LibtorchVersion, info.VersionSource = libtorchVersion(info.LibtorchPath)
	info.Attention = AttentionKernel()
	info.CUDAAvailable = gotch.CUDA.IsAvailable()
	if info.CUDAAvailable {
		info.CUDADevices = gotch.CUDA.DeviceCount()
	}
	return info, nil
}

// mappedLibraries returns the distinct shared objects in a /proc/PID/maps
// listing, in first-mapped order.
func mappedLibraries(r io.Reader) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		p := strings.Join(fields[5:], " ")
		if !strings.HasPrefix(p, "/") || !strings.Contains(filepath.Base(p), ".so") || seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return out, sc.Err()
}

// classifyBLAS picks the BLAS among mapped libraries. Debian selects
// libblas.so.3 through alternatives, so the mapped (resolved) path tells
// OpenBLAS's drop-in from the reference implementation.
func classifyBLAS(libs []string) BLASInfo {
	var ref BLASInfo
	for _, l := range libs {
		base := strings.ToLower(filepath.Base(l))
		dir := strings.ToLower(filepath.Dir(l))
		switch {
		case strings.HasPrefix(base, "libopenblas") || strings.Contains(dir, "openblas"):
			return BLASInfo{Kind: BLASOpenBLAS, Path: l}
		case strings.HasPrefix(base, "libmkl"):
			return BLASInfo{Kind: BLASMKL, Path: l}
		case strings.HasPrefix(base, "libblis") || strings.Contains(dir, "blis"):
			return BLASInfo{Kind: BLASBLIS, Path: l}
		case strings.Contains(dir, "atlas"):
			return BLASInfo{Kind: BLASAtlas, Path: l}
		case strings.HasPrefix(base, "libblas.so") && ref.Path == "":
			ref = BLASInfo{Kind: BLASReference, Path: l}
		}
	}
	if ref.Path != "" {
		return ref
	}
	return BLASInfo{Kind: BLASBuiltin}
}

var (
	versionHeaderRe = regexp.MustCompile(`#define TORCH_VERSION\s*\\?\s*"([0-9][0-9.]*)"`)
	sonameVersionRe = regexp.MustCompile(`\.so\.([0-9]+(?:\.[0-9]+)*)$`)
	pyVersionRe     = regexp.MustCompile(`(?m)^__version__ = '([0-9][^']*)'`)
)

// libtorchVersion finds the version of the libtorch at libPath. Sources, in
// order of trust: the archive's build-version file, the Debian package that
// owns the file (Debian's 1.13.1 headers say 1.13.0), the version header, the
// soname.
func libtorchVersion(libPath string) (version, source string) {
	root := filepath.Dir(filepath.Dir(libPath))
	if b, err := os.ReadFile(filepath.Join(root, "build-version")); err == nil {
		v := strings.TrimSpace(string(b))
		if i := strings.IndexByte(v, '+'); i > 0 {
			v = v[:i]
		}
		return v, filepath.Join(root, "build-version")
	}
	if b, err := os.ReadFile(filepath.Join(root, "version.py")); err == nil { // a Python torch package
		if m := pyVersionRe.FindSubmatch(b); m != nil {
			return string(m[1]), filepath.Join(root, "version.py")
		}
	}
	if v, pkg, ok := debianPackageVersion(libPath); ok {
		return v, "Debian package " + pkg
	}
	for _, h := range []string{
		filepath.Join(root, "include/torch/csrc/api/include/torch/version.h"),
		"/usr/include/torch/csrc/api/include/torch/version.h",
	} {
		if b, err := os.ReadFile(h); err == nil {
			if m := versionHeaderRe.FindSubmatch(b); m != nil {
				return string(m[1]), h
			}
		}
	}
	if m := sonameVersionRe.FindStringSubmatch(libPath); m != nil {
		return m[1], "soname"
	}
	return "unknown", "none"
}

func debianPackageVersion(path string) (version, pkg string, ok bool) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		return "", "", false
	}
	out, err := exec.Command("dpkg-query", "-S", path).Output()
	if err != nil {
		return "", "", false
	}
	// "libtorch1.13:amd64: /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0"
	pkg, _, found := strings.Cut(strings.TrimSpace(string(out)), ": ")
	if !found || strings.Contains(pkg, ",") {
		return "", "", false
	}
	out, err = exec.Command("dpkg-query", "-W", "-f", "${Version}", pkg).Output()
	if err != nil {
		return "", "", false
	}
	v := string(bytes.TrimSpace(out))
	if i := strings.IndexAny(v, "+~-"); i > 0 {
		v = v[:i]
	}
	if i := strings.IndexByte(v, ':'); i >= 0 { // epoch
		v = v[i+1:]
	}
	return v, pkg + " " + string(bytes.TrimSpace(out)), v != ""
}
