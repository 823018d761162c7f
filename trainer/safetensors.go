package trainer

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
)

// The safetensors container: an 8-byte little-endian header length, a JSON
// header mapping tensor names to {dtype, shape, data_offsets} (offsets are
// relative to the end of the header), then the raw little-endian data.

// ErrBadSafetensors marks a malformed or truncated safetensors file.
var ErrBadSafetensors = errors.New("malformed safetensors file")

type stEntry struct {
	DType   string   `json:"dtype"`
	Shape   []int64  `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

var stDTypeSize = map[string]int64{
	"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
}

const maxHeaderBytes = 100 << 20

type safetensorsFile struct {
	path      string
	f         *os.File
	header    map[string]stEntry
	meta      map[string]string
	dataStart int64
}

func numel(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// openSafetensors reads and checks the header: every tensor's bytes must lie
// inside the file and match its dtype and shape, so a truncated or corrupt
// file fails here, naming the file and tensor.
func openSafetensors(path string) (*safetensorsFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint shard: %w", err)
	}
	st, err := parseSafetensorsHeader(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	st.f = f
	return st, nil
}

func parseSafetensorsHeader(f *os.File, path string) (*safetensorsFile, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	size := info.Size()
	var lenBuf [8]byte
	if _, err := io.ReadFull(f, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("%s: reading header length: %w (%w)", path, err, ErrBadSafetensors)
	}
	hl := int64(binary.LittleEndian.Uint64(lenBuf[:]))
	if hl <= 0 || hl > maxHeaderBytes || 8+hl > size {
		return nil, fmt.Errorf("%s: header length %d does not fit a %d-byte file: %w", path, hl, size, ErrBadSafetensors)
	}
	hb := make([]byte, hl)
	if _, err := io.ReadFull(f, hb); err != nil {
		return nil, fmt.Errorf("%s: reading header: %w (%w)", path, err, ErrBadSafetensors)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hb, &raw); err != nil {
		return nil, fmt.Errorf("%s: header is not JSON: %v: %w", path, err, ErrBadSafetensors)
	}
	st := &safetensorsFile{path: path, header: map[string]stEntry{}, dataStart: 8 + hl}
	dataLen := size - st.dataStart
	type span struct {
		name       string
		start, end int64
	}
	var spans []span
	for name, r := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(r, &st.meta); err != nil {
				return nil, fmt.Errorf("%s: __metadata__ must map strings to strings: %w", path, ErrBadSafetensors)
			}
			continue
		}
		var e stEntry
		if err := json.Unmarshal(r, &e); err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %v: %w", path, name, err, ErrBadSafetensors)
		}
		es, ok := stDTypeSize[e.DType]
		if !ok {
			return nil, fmt.Errorf("%s: tensor %q has dtype %q: %w", path, name, e.DType, ErrBadSafetensors)
		}
		for _, d := range e.Shape {
			if d < 0 {
				return nil, fmt.Errorf("%s: tensor %q has negative dimension in shape %v: %w", path, name, e.Shape, ErrBadSafetensors)
			}
		}
		start, end := e.Offsets[0], e.Offsets[1]
		if start < 0 || end < start || end-start != numel(e.Shape)*es {
			return nil, fmt.Errorf("%s: tensor %q: data_offsets %v do not hold %v %s: %w", path, name, e.Offsets, e.Shape, e.DType, ErrBadSafetensors)
		}
		if end > dataLen {
			return nil, fmt.Errorf("%s: tensor %q ends at byte %d of a %d-byte data section (truncated file?): %w", path, name, end, dataLen, ErrBadSafetensors)
		}
		st.header[name] = e
		spans = append(spans, span{name, start, end})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	for i := 1; i < len(spans); i++ {
		if spans[i].start < spans[i-1].end {
			return nil, fmt.Errorf("%s: tensors %q and %q overlap: %w", path, spans[i-1].name, spans[i].name, ErrBadSafetensors)
		}
	}
	return st, nil
}

func (s *safetensorsFile) Close() error { return s.f.Close() }

// names lists the tensors in the file, sorted.
func (s *safetensorsFile) names() []string { return slices.Sorted(maps.Keys(s.header)) }

// read returns the raw bytes of one tensor.
func (s *safetensorsFile) read(name string) ([]byte, stEntry, error) {
	e, ok := s.header[name]
	if !ok {
		return nil, stEntry{}, fmt.Errorf("%s: no tensor %q", s.path, name)
	}
	b := make([]byte, e.Offsets[1]-e.Offsets[0])
	if _, err := s.f.ReadAt(b, s.dataStart+e.Offsets[0]); err != nil {
		return nil, e, fmt.Errorf("%s: reading tensor %q: %w", s.path, name, err)
	}
	return b, e, nil
}

type stTensor struct {
	name  string
	dtype string
	shape []int64
	data  []byte
}

// writeSafetensors writes tensors (in name order) to w.
func writeSafetensors(w io.Writer, tensors []stTensor, meta map[string]string) error {
	sort.Slice(tensors, func(i, j int) bool { return tensors[i].name < tensors[j].name })
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	var off int64
	for _, t := range tensors {
		if int64(len(t.data)) != numel(t.shape)*stDTypeSize[t.dtype] {
			return fmt.Errorf("tensor %q: %d bytes for shape %v %s", t.name, len(t.data), t.shape, t.dtype)
		}
		shape := t.shape
		if shape == nil {
			shape = []int64{}
		}
		header[t.name] = stEntry{DType: t.dtype, Shape: shape, Offsets: [2]int64{off, off + int64(len(t.data))}}
		off += int64(len(t.data))
	}
	hb, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hb)%8 != 0 { // keep the data 8-byte aligned, as the reference writer does
		hb = append(hb, ' ')
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hb)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(hb); err != nil {
		return err
	}
	for _, t := range tensors {
		if _, err := w.Write(t.data); err != nil {
			return err
		}
	}
	return nil
}
