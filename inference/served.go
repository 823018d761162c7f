package inference

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/seedctl/seedctl/internal/atomicfile"
)

// A served copy is what a vLLM or SGLang server loads from disk: a
// checkpoint folder's model files and nothing else, with tied embeddings
// written out. Two facts measured on vLLM 0.32 (testdata/vllm-recordings):
//
//   - its reload_weights (and a restart, and SGLang's
//     update_weights_from_disk) loads every *.safetensors of the folder, so a
//     trainer checkpoint's optimizer.safetensors beside the weights fails the
//     reload with HTTP 500 ("Attempted to load nested weight
//     'embed_tokens.weight.exp_avg'");
//   - for a checkpoint that ties its embeddings (no lm_head.weight, config
//     tie_word_embeddings true: Qwen2.5-3B, Qwen3-1.7B, the tiny bases), the
//     layerwise reload updates every layer but keeps the LM head the server
//     started with, logging only a warning. An untied copy — lm_head.weight
//     written as a copy of the embeddings, tie_word_embeddings false —
//     reloads right, and computes the same function.

// ErrTiedServedDir means a running vLLM was started from a folder whose
// checkpoint ties its embeddings: its reload would never update the head.
var ErrTiedServedDir = errors.New("the served folder ties its embeddings")

const (
	embedTensor = "model.embed_tokens.weight"
	headTensor  = "lm_head.weight"
	indexFile   = "model.safetensors.index.json"
	singleFile  = "model.safetensors"
)

// ServedCopyInfo says what WriteServedCopy wrote.
type ServedCopyInfo struct {
	// Untied: the checkpoint tied its embeddings and the copy does not.
	Untied bool
	// Files are the files written, sorted.
	Files []string
}

// WriteServedCopy makes dst (created if missing) hold checkpoint src as a
// server should load it: config, generation config, tokenizer and other
// non-weight files, the model's weight files only (never an optimizer's
// state or other *.safetensors), with tied embeddings untied. Weight
// files of dst that src does not have are removed. Each file is written
// to a temporary name and renamed.
func WriteServedCopy(src, dst string) (ServedCopyInfo, error) {
	var info ServedCopyInfo
	if SameDir(src, dst) {
		return info, fmt.Errorf("writing a served copy of %s: the served folder %s is the checkpoint itself", src, dst)
	}
	cfgRaw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		return info, fmt.Errorf("writing a served copy of %s: %w", src, err)
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(cfgRaw, &cfg); err != nil {
		return info, fmt.Errorf("writing a served copy of %s: config.json: %w", src, err)
	}
	weights, index, err := modelWeightFiles(src)
	if err != nil {
		return info, fmt.Errorf("writing a served copy of %s: %w", src, err)
	}
	tied, embedFile, err := checkpointTies(src, cfg, weights, index)
	if err != nil {
		return info, fmt.Errorf("writing a served copy of %s: %w", src, err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return info, fmt.Errorf("writing a served copy of %s: %w", src, err)
	}
	written := map[string]bool{}
	// Weights first, config last: a server restarted in between reads the
	// old config with weights it can still load.
	for _, w := range weights {
		if tied && w == embedFile {
			err = appendTensorCopy(filepath.Join(src, w), filepath.Join(dst, w), embedTensor, headTensor)
		} else {
			err = copyFileAtomic(filepath.Join(src, w), filepath.Join(dst, w))
		}
		if err != nil {
			return info, fmt.Errorf("writing a served copy of %s: %s: %w", src, w, err)
		}
		written[w] = true
	}
	if index != nil {
		if tied {
			index.WeightMap[headTensor] = embedFile
		}
		b, err := json.MarshalIndent(index, "", "  ")
		if err == nil {
			err = writeFileAtomic(filepath.Join(dst, indexFile), append(b, '\n'))
		}
		if err != nil {
			return info, fmt.Errorf("writing a served copy of %s: %s: %w", src, indexFile, err)
		}
		written[indexFile] = true
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return info, fmt.Errorf("writing a served copy of %s: %w", src, err)
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || written[name] || name == "config.json" || isWeightLike(name) || strings.HasPrefix(name, ".") {
			continue
		}
		if err := copyFileAtomic(filepath.Join(src, name), filepath.Join(dst, name)); err != nil {
			return info, fmt.Errorf("writing a served copy of %s: %s: %w", src, name, err)
		}
		written[name] = true
	}
	if tied {
		cfg["tie_word_embeddings"] = json.RawMessage("false")
		if cfgRaw, err = json.MarshalIndent(cfg, "", "  "); err != nil {
			return info, fmt.Errorf("writing a served copy of %s: config.json: %w", src, err)
		}
		cfgRaw = append(cfgRaw, '\n')
	}
	if err := writeFileAtomic(filepath.Join(dst, "config.json"), cfgRaw); err != nil {
		return info, fmt.Errorf("writing a served copy of %s: config.json: %w", src, err)
	}
	written["config.json"] = true
	// Weight files of an earlier copy that this one does not have (a
	// sharded checkpoint replaced by a single file, or the reverse).
	old, err := os.ReadDir(dst)
	if err != nil {
		return info, fmt.Errorf("writing a served copy of %s: %w", src, err)
	}
	for _, e := range old {
		if (isWeightLike(e.Name()) || e.Name() == indexFile) && !written[e.Name()] {
			if err := os.Remove(filepath.Join(dst, e.Name())); err != nil {
				return info, fmt.Errorf("writing a served copy of %s: removing the stale %s: %w", src, e.Name(), err)
			}
		}
	}
	for n := range written {
		info.Files = append(info.Files, n)
	}
	sort.Strings(info.Files)
	info.Untied = tied
	return info, nil
}

// SameDir says whether two paths name one folder: compared absolute, with
// symbolic links resolved where the path exists (a served folder that is
// the checkpoint's under another name would have its weights overwritten).
func SameDir(a, b string) bool {
	resolve := func(p string) string {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		return filepath.Clean(p)
	}
	return resolve(a) == resolve(b)
}

// ServedDirTies says whether the checkpoint in dir ties its embeddings as
// a server loading it would (config tie_word_embeddings, or no
// lm_head.weight among its weights). A folder with no config is not tied.
func ServedDirTies(dir string) (bool, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return false, fmt.Errorf("%s/config.json: %w", dir, err)
	}
	weights, index, err := modelWeightFiles(dir)
	if err != nil {
		return false, err
	}
	tied, _, err := checkpointTies(dir, cfg, weights, index)
	return tied, err
}

// isWeightLike: files a server might load as weights (vLLM globs
// *.safetensors, and *.bin or *.pt when there are none).
func isWeightLike(name string) bool {
	for _, ext := range []string{".safetensors", ".bin", ".pt", ".pth"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

type weightIndex struct {
	Metadata  map[string]any    `json:"metadata,omitempty"`
	WeightMap map[string]string `json:"weight_map"`
}

// modelWeightFiles lists the checkpoint's weight files: the shards its
// index names, or model.safetensors.
func modelWeightFiles(dir string) ([]string, *weightIndex, error) {
	raw, err := os.ReadFile(filepath.Join(dir, indexFile))
	if err == nil {
		var idx weightIndex
		if err := json.Unmarshal(raw, &idx); err != nil || len(idx.WeightMap) == 0 {
			return nil, nil, fmt.Errorf("%s: not a weight index (%v)", indexFile, err)
		}
		set := map[string]bool{}
		for _, f := range idx.WeightMap {
			if f != filepath.Base(f) || !strings.HasSuffix(f, ".safetensors") {
				return nil, nil, fmt.Errorf("%s names %q, not a safetensors file beside it", indexFile, f)
			}
			set[f] = true
		}
		var files []string
		for f := range set {
			files = append(files, f)
		}
		sort.Strings(files)
		return files, &idx, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, singleFile)); err != nil {
		return nil, nil, fmt.Errorf("no %s and no %s: %w", singleFile, indexFile, err)
	}
	return []string{singleFile}, nil, nil
}

// checkpointTies says whether the checkpoint ties its embeddings, and
// which weight file holds the embeddings.
func checkpointTies(dir string, cfg map[string]json.RawMessage, weights []string, index *weightIndex) (bool, string, error) {
	hasHead, embedFile := false, ""
	if index != nil {
		_, hasHead = index.WeightMap[headTensor]
		embedFile = index.WeightMap[embedTensor]
	} else {
		h, err := readSafetensorsHeader(filepath.Join(dir, weights[0]))
		if err != nil {
			return false, "", err
		}
		_, hasHead = h.entries[headTensor]
		if _, ok := h.entries[embedTensor]; ok {
			embedFile = weights[0]
		}
	}
	var tieFlag bool
	flagSet := false
	if raw, ok := cfg["tie_word_embeddings"]; ok {
		if err := json.Unmarshal(raw, &tieFlag); err != nil {
			return false, "", fmt.Errorf("config.json: tie_word_embeddings: %w", err)
		}
		flagSet = true
	}
	tied := tieFlag || (!flagSet && !hasHead)
	if !tied {
		if !hasHead {
			return false, "", fmt.Errorf("config.json says tie_word_embeddings false but the weights have no %s", headTensor)
		}
		return false, embedFile, nil
	}
	if embedFile == "" {
		return false, "", fmt.Errorf("the checkpoint ties its embeddings but has no %s to copy the head from", embedTensor)
	}
	// A tied checkpoint that also stores a head: the server ignores the
	// stored one, so the copy's head is the embeddings (overwritten below).
	return true, embedFile, nil
}

type stHeader struct {
	raw       map[string]json.RawMessage
	entries   map[string]stTensor
	dataStart int64
	dataLen   int64
}

type stTensor struct {
	DType   string   `json:"dtype"`
	Shape   []int64  `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// readSafetensorsHeader reads and checks a safetensors file's header.
func readSafetensorsHeader(path string) (*stHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var lb [8]byte
	if _, err := io.ReadFull(f, lb[:]); err != nil {
		return nil, fmt.Errorf("%s: reading the header length: %w", path, err)
	}
	hl := int64(binary.LittleEndian.Uint64(lb[:]))
	if hl <= 0 || hl > 100<<20 || 8+hl > st.Size() {
		return nil, fmt.Errorf("%s: header length %d does not fit a %d-byte file", path, hl, st.Size())
	}
	hb := make([]byte, hl)
	if _, err := io.ReadFull(f, hb); err != nil {
		return nil, fmt.Errorf("%s: reading the header: %w", path, err)
	}
	h := &stHeader{entries: map[string]stTensor{}, dataStart: 8 + hl, dataLen: st.Size() - 8 - hl}
	if err := json.Unmarshal(hb, &h.raw); err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	for name, v := range h.raw {
		if name == "__metadata__" {
			continue
		}
		var t stTensor
		if err := json.Unmarshal(v, &t); err != nil {
			return nil, fmt.Errorf("%s: tensor %s: %w", path, name, err)
		}
		if t.Offsets[0] < 0 || t.Offsets[1] < t.Offsets[0] || t.Offsets[1] > h.dataLen {
			return nil, fmt.Errorf("%s: tensor %s lies outside the file", path, name)
		}
		h.entries[name] = t
	}
	return h, nil
}

// appendTensorCopy writes src to dst with tensor from's bytes stored again
// under the name to (replacing a stored to, whose bytes stay unused).
func appendTensorCopy(src, dst, from, to string) error {
	h, err := readSafetensorsHeader(src)
	if err != nil {
		return err
	}
	t, ok := h.entries[from]
	if !ok {
		return fmt.Errorf("%s has no tensor %s", src, from)
	}
	size := t.Offsets[1] - t.Offsets[0]
	nt := stTensor{DType: t.DType, Shape: t.Shape, Offsets: [2]int64{h.dataLen, h.dataLen + size}}
	nb, err := json.Marshal(nt)
	if err != nil {
		return err
	}
	h.raw[to] = nb
	hb, err := json.Marshal(h.raw)
	if err != nil {
		return err
	}
	// The header is padded with spaces to 8 bytes, as the format's writers do.
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return writeAtomic(dst, func(w io.Writer) error {
		var lb [8]byte
		binary.LittleEndian.PutUint64(lb[:], uint64(len(hb)))
		if _, err := w.Write(lb[:]); err != nil {
			return err
		}
		if _, err := w.Write(hb); err != nil {
			return err
		}
		if _, err := io.Copy(w, io.NewSectionReader(in, h.dataStart, h.dataLen)); err != nil {
			return err
		}
		_, err := io.Copy(w, io.NewSectionReader(in, h.dataStart+t.Offsets[0], size))
		return err
	})
}

func writeFileAtomic(dst string, b []byte) error {
	return writeAtomic(dst, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// writeAtomic writes dst through a temporary file in its folder, synced
// and renamed into place (atomicfile).
func writeAtomic(dst string, write func(io.Writer) error) error {
	return atomicfile.Write(dst, write)
}
