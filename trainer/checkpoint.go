package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"unsafe"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/seedctl/seedctl/internal/atomicfile"
)

// Hugging Face checkpoint layout (what vLLM, SGLang and transformers load):
// config.json, model.safetensors or model-0000N-of-0000M.safetensors with
// model.safetensors.index.json, generation_config.json and tokenizer files.

const (
	configFile      = "config.json"
	genConfigFile   = "generation_config.json"
	singleWeights   = "model.safetensors"
	shardIndexFile  = "model.safetensors.index.json"
	defaultShardMax = 5 << 30 // transformers' default max_shard_size
)

// tokenizerFiles are copied along with a checkpoint when present.
var tokenizerFiles = []string{
	"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
	"vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json",
}

// ErrCheckpoint marks a checkpoint folder that cannot be loaded.
var ErrCheckpoint = errors.New("bad checkpoint")

var stToGotch = map[string]gotch.DType{"F32": gotch.Float, "BF16": gotch.BFloat16, "F16": gotch.Half}

// LoadCheckpoint reads a Hugging Face checkpoint folder into a model with
// the given options (weights are converted to opt's dtype).
func LoadCheckpoint(dir string, opt ModelOptions) (*Model, error) {
	cfg, err := LoadModelConfig(filepath.Join(dir, configFile))
	if err != nil {
		return nil, fmt.Errorf("loading checkpoint %s: %w", dir, err)
	}
	files, where, err := weightFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("loading checkpoint %s: %w", dir, err)
	}
	shards := map[string]*safetensorsFile{}
	defer func() {
		for _, s := range shards {
			s.Close()
		}
	}()
	for _, f := range files {
		s, err := openSafetensors(filepath.Join(dir, f))
		if err != nil {
			return nil, fmt.Errorf("loading checkpoint %s: %w", dir, err)
		}
		shards[f] = s
	}
	if where == nil { // single file: everything is in it
		where = map[string]string{}
		for _, n := range shards[files[0]].names() {
			where[n] = files[0]
		}
	}
	dt, err := opt.dtype()
	if err != nil {
		return nil, err
	}
	dev, err := opt.device()
	if err != nil {
		return nil, err
	}
	src := func(name string, shape []int64) (t *ts.Tensor, err error) {
		file, ok := where[name]
		if !ok {
			return nil, fmt.Errorf("loading checkpoint %s: tensor %s is missing (config.json %s needs it): %w", dir, name, cfg.Architectures, ErrCheckpoint)
		}
		s := shards[file]
		if s == nil {
			return nil, fmt.Errorf("loading checkpoint %s: the index maps %s to %s, which is not a shard: %w", dir, name, file, ErrCheckpoint)
		}
		b, e, err := s.read(name)
		if err != nil {
			return nil, fmt.Errorf("loading checkpoint %s: %w", dir, err)
		}
		if _, ok := stToGotch[e.DType]; !ok {
			return nil, fmt.Errorf("loading checkpoint %s: %s tensor %s has dtype %s; want F32, BF16 or F16: %w", dir, file, name, e.DType, ErrCheckpoint)
		}
		if !equalShape(e.Shape, shape) {
			return nil, fmt.Errorf("loading checkpoint %s: %s tensor %s has shape %v, config.json implies %v: %w", dir, file, name, e.Shape, shape, ErrCheckpoint)
		}
		defer guard(&err, "loading "+name)
		t = tensorFromBytes(b, e.DType, e.Shape)
		// A NaN or an infinity in the weights is refused here, naming
		// the tensor, not found later through a server's failing replies
		// (x − x is NaN exactly where x is not finite).
		zero := must(t.Sub(t, false))
		sum := must(zero.Sum(gotch.Double, true))
		bad := math.IsNaN(scalarFloat(sum))
		drop(sum)
		if bad {
			drop(t)
			return nil, fmt.Errorf("loading checkpoint %s: %s tensor %s holds NaN or infinite values: %w", dir, file, name, ErrCheckpoint)
		}
		t = must(t.Totype(dt, true))
		return must(t.To(dev, true)), nil
	}
	m, err := newModel(cfg, opt, src)
	if err != nil {
		if errors.Is(err, ErrCheckpoint) {
			return nil, err
		}
		return nil, fmt.Errorf("loading checkpoint %s: %w", dir, err)
	}
	return m, nil
}

// weightFiles lists the safetensors files of dir and, for sharded
// checkpoints, the tensor → file map of the index.
func weightFiles(dir string) ([]string, map[string]string, error) {
	idxPath := filepath.Join(dir, shardIndexFile)
	if b, err := os.ReadFile(idxPath); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &idx); err != nil {
			return nil, nil, fmt.Errorf("%s: %v: %w", idxPath, err, ErrCheckpoint)
		}
		if len(idx.WeightMap) == 0 {
			return nil, nil, fmt.Errorf("%s: field weight_map is empty: %w", idxPath, ErrCheckpoint)
		}
		set := map[string]bool{}
		for name, f := range idx.WeightMap {
			if f == "" || strings.ContainsAny(f, `/\`) {
				return nil, nil, fmt.Errorf("%s: weight_map[%q] = %q is not a file name in the folder: %w", idxPath, name, f, ErrCheckpoint)
			}
			set[f] = true
		}
		return slices.Sorted(maps.Keys(set)), idx.WeightMap, nil
	}
	if _, err := os.Stat(filepath.Join(dir, singleWeights)); err != nil {
		return nil, nil, fmt.Errorf("no %s or %s in %s: %w", singleWeights, shardIndexFile, dir, ErrCheckpoint)
	}
	return []string{singleWeights}, nil, nil
}

// tensorFromBytes copies little-endian safetensors data into a CPU tensor.
func tensorFromBytes(b []byte, stDType string, shape []int64) *ts.Tensor {
	dt := stToGotch[stDType]
	t := must(ts.Empty(shape, dt, gotch.CPU))
	if len(b) == 0 {
		return t
	}
	p, err := t.DataPtr()
	must0(err)
	copy(unsafe.Slice((*byte)(p), len(b)), b)
	return t
}

// tensorBytes returns t's data as little-endian bytes of stDType.
func tensorBytes(t *ts.Tensor, stDType string) []byte {
	c := must(t.Totype(stToGotch[stDType], false))
	defer drop(c)
	return hostCopy[byte](c)
}

// InitRandom builds a model with freshly initialised weights: normal with
// std initializer_range for matrices, ones for norms, zeros for biases, as
// transformers does. Each tensor has its own stream derived from seed and its
// name, so the same seed gives the same weights whatever the order.
func InitRandom(cfg *ModelConfig, opt ModelOptions, seed uint64) (*Model, error) {
	dt, err := opt.dtype()
	if err != nil {
		return nil, err
	}
	dev, err := opt.device()
	if err != nil {
		return nil, err
	}
	std := cfg.InitializerRange
	src := func(name string, shape []int64) (t *ts.Tensor, err error) {
		defer guard(&err, "initialising "+name)
		vals := make([]float32, numel(shape))
		switch {
		case strings.HasSuffix(name, "norm.weight"):
			for i := range vals {
				vals[i] = 1
			}
		case strings.HasSuffix(name, ".bias"):
		default:
			h := fnv.New64a()
			h.Write([]byte(name))
			r := rand.New(rand.NewPCG(seed, h.Sum64()))
			for i := range vals {
				vals[i] = float32(r.NormFloat64() * std)
			}
		}
		t = fromSlice(vals, shape)
		t = must(t.Totype(dt, true))
		return must(t.To(dev, true)), nil
	}
	return newModel(cfg, opt, src)
}

// SaveOptions control how a checkpoint is written.
type SaveOptions struct {
	// DType of the stored tensors: "" (the model's), "float32", "bfloat16" or "float16".
	DType string
	// MaxShardBytes splits weights into shards with an index above this size;
	// 0 means transformers' default (5 GB).
	MaxShardBytes int64
	// TokenizerFrom copies tokenizer files (and generation_config.json) from
	// this folder, e.g. the checkpoint the model was loaded from.
	TokenizerFrom string
	// WriteExtra writes further files into the folder before it is renamed
	// into place (a freshly trained tokenizer, for instance).
	WriteExtra func(tmpDir string) error
}

func (o SaveOptions) stDType(model gotch.DType) (string, string, error) {
	switch o.DType {
	case "":
		if model == gotch.BFloat16 {
			return "BF16", "bfloat16", nil
		}
		return "F32", "float32", nil
	case "float32", "fp32":
		return "F32", "float32", nil
	case "bfloat16", "bf16":
		return "BF16", "bfloat16", nil
	case "float16", "fp16":
		return "F16", "float16", nil
	}
	return "", "", fmt.Errorf("save dtype %q: want float32, bfloat16 or float16", o.DType)
}

// Save writes the model as a Hugging Face checkpoint into dir atomically:
// everything goes to a temporary folder beside it, which is then renamed into
// place, so a crash leaves either the old folder or the new one.
func (m *Model) Save(dir string, opt SaveOptions) (err error) {
	st, torchName, err := opt.stDType(m.dtype)
	if err != nil {
		return err
	}
	maxShard := opt.MaxShardBytes
	if maxShard <= 0 {
		maxShard = defaultShardMax
	}
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("saving checkpoint %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("saving checkpoint %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)                      // a no-op once renamed
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it private
		return fmt.Errorf("saving checkpoint %s: %w", dir, err)
	}
	if err := m.writeInto(tmp, st, torchName, maxShard, opt); err != nil {
		return fmt.Errorf("saving checkpoint %s: %w", dir, err)
	}
	if err := replaceDir(tmp, dir); err != nil {
		return fmt.Errorf("saving checkpoint %s: %w", dir, err)
	}
	return nil
}

func (m *Model) writeInto(tmp, st, torchName string, maxShard int64, opt SaveOptions) (err error) {
	defer guard(&err, "writing weights")
	cfg := *m.cfg
	cfg.TorchDtype = torchName
	cb, err := json.MarshalIndent(&cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(tmp, configFile), append(cb, '\n')); err != nil {
		return err
	}
	// Shards: parameters in order, a new shard when the next would overflow.
	var shards [][]stTensor
	var cur []stTensor
	var curBytes, total int64
	for _, p := range m.params {
		b := tensorBytes(p.t, st)
		if len(cur) > 0 && curBytes+int64(len(b)) > maxShard {
			shards = append(shards, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, stTensor{name: p.name, dtype: st, shape: p.shape, data: b})
		curBytes += int64(len(b))
		total += int64(len(b))
	}
	shards = append(shards, cur)
	meta := map[string]string{"format": "pt"}
	if len(shards) == 1 {
		if err := writeShard(filepath.Join(tmp, singleWeights), shards[0], meta); err != nil {
			return err
		}
	} else {
		weightMap := map[string]string{}
		for i, sh := range shards {
			name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
			for _, t := range sh {
				weightMap[t.name] = name
			}
			if err := writeShard(filepath.Join(tmp, name), sh, meta); err != nil {
				return err
			}
		}
		idx := map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}
		ib, _ := json.MarshalIndent(idx, "", "  ")
		if err := writeFileSync(filepath.Join(tmp, shardIndexFile), append(ib, '\n')); err != nil {
			return err
		}
	}
	if opt.TokenizerFrom != "" {
		for _, f := range append(tokenizerFiles, genConfigFile) {
			if err := copyIfExists(filepath.Join(opt.TokenizerFrom, f), filepath.Join(tmp, f)); err != nil {
				return err
			}
		}
	}
	if _, err := os.Stat(filepath.Join(tmp, genConfigFile)); errors.Is(err, os.ErrNotExist) {
		gc := map[string]any{"_from_model_config": true}
		if m.cfg.BOSTokenID != nil {
			gc["bos_token_id"] = *m.cfg.BOSTokenID
		}
		if m.cfg.EOSTokenID != nil {
			gc["eos_token_id"] = m.cfg.EOSTokenID
		}
		gb, _ := json.MarshalIndent(gc, "", "  ")
		if err := writeFileSync(filepath.Join(tmp, genConfigFile), append(gb, '\n')); err != nil {
			return err
		}
	}
	if opt.WriteExtra != nil {
		if err := opt.WriteExtra(tmp); err != nil {
			return err
		}
	}
	return nil
}

// writeShard writes a safetensors file atomically (atomicfile): in a
// checkpoint's temporary folder, or the optimizer state beside a
// checkpoint.
func writeShard(path string, tensors []stTensor, meta map[string]string) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		if err := writeSafetensors(w, tensors, meta); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	})
}

func writeFileSync(path string, b []byte) error { return atomicfile.WriteBytes(path, b) }

func copyIfExists(src, dst string) error {
	in, err := os.Open(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// replaceDir moves tmp to dir. An existing dir is first moved aside and
// removed only after the new one is in place.
func replaceDir(tmp, dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return os.Rename(tmp, dir)
	}
	old := tmp + ".old"
	if err := os.Rename(dir, old); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.Rename(old, dir)
		return err
	}
	return os.RemoveAll(old)
}

// TensorInfo describes one stored tensor, for inspection.
type TensorInfo struct {
	Name  string
	DType string
	Shape []int64
	File  string
}

// CheckpointInfo is what inspect reports without building a model.
type CheckpointInfo struct {
	Config     *ModelConfig
	Arch       Arch
	Tensors    []TensorInfo
	Params     int64
	DTypes     map[string]int64 // parameters per dtype
	Files      []string
	TotalBytes int64
}

// InspectCheckpoint reads config.json and the safetensors headers only.
func InspectCheckpoint(dir string) (*CheckpointInfo, error) {
	cfg, err := LoadModelConfig(filepath.Join(dir, configFile))
	if err != nil {
		return nil, fmt.Errorf("inspecting %s: %w", dir, err)
	}
	arch, _ := cfg.Arch()
	files, _, err := weightFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("inspecting %s: %w", dir, err)
	}
	info := &CheckpointInfo{Config: cfg, Arch: arch, DTypes: map[string]int64{}, Files: files}
	for _, f := range files {
		s, err := openSafetensors(filepath.Join(dir, f))
		if err != nil {
			return nil, fmt.Errorf("inspecting %s: %w", dir, err)
		}
		for _, n := range s.names() {
			e := s.header[n]
			info.Tensors = append(info.Tensors, TensorInfo{Name: n, DType: e.DType, Shape: e.Shape, File: f})
			info.Params += numel(e.Shape)
			info.DTypes[e.DType] += numel(e.Shape)
			info.TotalBytes += e.Offsets[1] - e.Offsets[0]
		}
		s.Close()
	}
	sort.Slice(info.Tensors, func(i, j int) bool { return info.Tensors[i].Name < info.Tensors[j].Name })
	return info, nil
}

// ParamChecksum is a cheap fingerprint of the weights (sum of |w| in
// float64), for tests and logs that need to see weights change.
func (m *Model) ParamChecksum() (sum float64, err error) {
	defer guard(&err, "checksumming parameters")
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	quiesceGC()
	withoutGrad(func() {
		for _, p := range m.params {
			a := must(must(p.t.Abs(false)).Sum(gotch.Double, true))
			sum += scalarFloat(a)
			drop(a)
		}
	})
	if math.IsNaN(sum) {
		return sum, fmt.Errorf("checksumming parameters: NaN in the weights")
	}
	return sum, nil
}
