// Package tfevents writes TensorBoard event files: TFRecord framing
// (little-endian length, masked CRC-32C of the length, the payload, masked
// CRC-32C of the payload) around tensorflow.Event protocol buffers, with
// scalars as Summary.Value.simple_value. The messages are encoded with
// google.golang.org/protobuf's wire package from their field numbers
// (tensorflow/core/util/event.proto, tensorflow/core/framework/summary.proto),
// so no generated code or protoc is needed.
package tfevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the messages written.
const (
	eventWallTime    = 1 // double
	eventStep        = 2 // int64
	eventFileVersion = 3 // string
	eventSummary     = 5 // Summary
	summaryValue     = 1 // repeated Summary.Value
	valueTag         = 1 // string
	valueSimple      = 2 // float
)

// FileVersion is the first event of every file.
const FileVersion = "brain.Event:2"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's masked CRC-32C.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// Writer appends events to one file.
type Writer struct {
	f    *os.File
	path string
}

// Prefix starts every event file's name.
const Prefix = "events.out.tfevents."

// Open returns a writer on dir's event file: an existing one (a resumed
// run) is appended to, else a new one is created, named as TensorBoard's
// writers name theirs, starting with the file-version event.
func Open(dir string) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tensorboard events: %w", err)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, Prefix+"*"))
	sort.Strings(matches)
	if len(matches) > 0 {
		path := matches[len(matches)-1]
		if err := truncateTorn(path); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("tensorboard events: %w", err)
		}
		return &Writer{f: f, path: path}, nil
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	path := filepath.Join(dir, fmt.Sprintf("%s%d.%s", Prefix, time.Now().Unix(), host))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("tensorboard events: %w", err)
	}
	w := &Writer{f: f, path: path}
	if err := w.write(encodeEvent(Event{WallTime: float64(time.Now().UnixNano()) / 1e9, FileVersion: FileVersion})); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// truncateTorn cuts a record left half-written by a killed process, so
// appended records stay readable.
func truncateTorn(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("tensorboard events: %w", err)
	}
	good, _ := readRecords(f, nil)
	f.Close()
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("tensorboard events: %w", err)
	}
	if good < st.Size() {
		if err := os.Truncate(path, good); err != nil {
			return fmt.Errorf("tensorboard events: cutting a torn record: %w", err)
		}
	}
	return nil
}

// Path is the file written.
func (w *Writer) Path() string { return w.path }

func (w *Writer) write(payload []byte) error {
	var head [12]byte
	binary.LittleEndian.PutUint64(head[:8], uint64(len(payload)))
	binary.LittleEndian.PutUint32(head[8:], maskedCRC(head[:8]))
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], maskedCRC(payload))
	rec := append(append(head[:], payload...), tail[:]...)
	if _, err := w.f.Write(rec); err != nil {
		return fmt.Errorf("tensorboard events: writing %s: %w", w.path, err)
	}
	return nil
}

// Scalars writes one event holding every value at step, tags in sorted
// order; non-finite values are written as they are (TensorBoard shows them).
func (w *Writer) Scalars(step int64, wall time.Time, vals map[string]float64) error {
	if len(vals) == 0 {
		return nil
	}
	ev := Event{WallTime: float64(wall.UnixNano()) / 1e9, Step: step, Values: map[string]float32{}}
	for k, v := range vals {
		ev.Values[k] = float32(v)
	}
	return w.write(encodeEvent(ev))
}

// Flush puts what was written on disk, so TensorBoard shows it live and a
// kill loses nothing written before.
func (w *Writer) Flush() error { return w.f.Sync() }

// Close flushes and closes the file.
func (w *Writer) Close() error {
	err := w.f.Sync()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Event is what this package writes and reads back.
type Event struct {
	WallTime    float64
	Step        int64
	FileVersion string
	Values      map[string]float32 // summary tag → simple_value
}

func encodeEvent(ev Event) []byte {
	var b []byte
	b = protowire.AppendTag(b, eventWallTime, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(ev.WallTime))
	if ev.Step != 0 {
		b = protowire.AppendTag(b, eventStep, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(ev.Step))
	}
	if ev.FileVersion != "" {
		b = protowire.AppendTag(b, eventFileVersion, protowire.BytesType)
		b = protowire.AppendString(b, ev.FileVersion)
	}
	if len(ev.Values) > 0 {
		tags := make([]string, 0, len(ev.Values))
		for t := range ev.Values {
			tags = append(tags, t)
		}
		sort.Strings(tags)
		var sum []byte
		for _, t := range tags {
			var v []byte
			v = protowire.AppendTag(v, valueTag, protowire.BytesType)
			v = protowire.AppendString(v, t)
			v = protowire.AppendTag(v, valueSimple, protowire.Fixed32Type)
			v = protowire.AppendFixed32(v, math.Float32bits(ev.Values[t]))
			sum = protowire.AppendTag(sum, summaryValue, protowire.BytesType)
			sum = protowire.AppendBytes(sum, v)
		}
		b = protowire.AppendTag(b, eventSummary, protowire.BytesType)
		b = protowire.AppendBytes(b, sum)
	}
	return b
}

// ErrCorrupt is a record whose framing or checksum is wrong.
var ErrCorrupt = errors.New("corrupt tensorboard event record")

// readRecords reads whole records from r, calling fn on each payload, and
// returns the offset after the last good one.
func readRecords(r io.Reader, fn func([]byte) error) (int64, error) {
	var off int64
	for {
		var head [12]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			if err == io.EOF {
				return off, nil
			}
			return off, fmt.Errorf("record at %d: truncated header: %w", off, ErrCorrupt)
		}
		if binary.LittleEndian.Uint32(head[8:]) != maskedCRC(head[:8]) {
			return off, fmt.Errorf("record at %d: length checksum: %w", off, ErrCorrupt)
		}
		n := binary.LittleEndian.Uint64(head[:8])
		if n > 1<<30 {
			return off, fmt.Errorf("record at %d: length %d: %w", off, n, ErrCorrupt)
		}
		body := make([]byte, n+4)
		if _, err := io.ReadFull(r, body); err != nil {
			return off, fmt.Errorf("record at %d: truncated payload: %w", off, ErrCorrupt)
		}
		if binary.LittleEndian.Uint32(body[n:]) != maskedCRC(body[:n]) {
			return off, fmt.Errorf("record at %d: payload checksum: %w", off, ErrCorrupt)
		}
		if fn != nil {
			if err := fn(body[:n]); err != nil {
				return off, err
			}
		}
		off += 12 + int64(n) + 4
	}
}

// Read decodes every event of an event file, checking every checksum.
func Read(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Event
	_, err = readRecords(f, func(b []byte) error {
		ev, err := decodeEvent(b)
		if err != nil {
			return err
		}
		out = append(out, ev)
		return nil
	})
	return out, err
}

func decodeEvent(b []byte) (Event, error) {
	var ev Event
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ev, fmt.Errorf("event tag: %w", ErrCorrupt)
		}
		b = b[n:]
		switch {
		case num == eventWallTime && typ == protowire.Fixed64Type:
			v, m := protowire.ConsumeFixed64(b)
			ev.WallTime, n = math.Float64frombits(v), m
		case num == eventStep && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			ev.Step, n = int64(v), m
		case num == eventFileVersion && typ == protowire.BytesType:
			v, m := protowire.ConsumeString(b)
			ev.FileVersion, n = v, m
		case num == eventSummary && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			vals, err := decodeSummary(v)
			if err != nil {
				return ev, err
			}
			ev.Values, n = vals, m
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return ev, fmt.Errorf("event field %d: %w", num, ErrCorrupt)
		}
		b = b[n:]
	}
	return ev, nil
}

func decodeSummary(b []byte) (map[string]float32, error) {
	out := map[string]float32{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("summary tag: %w", ErrCorrupt)
		}
		b = b[n:]
		if num != summaryValue || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil, fmt.Errorf("summary field %d: %w", num, ErrCorrupt)
			}
			b = b[n:]
			continue
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return nil, fmt.Errorf("summary value: %w", ErrCorrupt)
		}
		b = b[m:]
		var tag string
		var val float32
		for len(v) > 0 {
			vn, vt, k := protowire.ConsumeTag(v)
			if k < 0 {
				return nil, fmt.Errorf("value tag: %w", ErrCorrupt)
			}
			v = v[k:]
			switch {
			case vn == valueTag && vt == protowire.BytesType:
				s, k2 := protowire.ConsumeString(v)
				tag, k = s, k2
			case vn == valueSimple && vt == protowire.Fixed32Type:
				x, k2 := protowire.ConsumeFixed32(v)
				val, k = math.Float32frombits(x), k2
			default:
				k = protowire.ConsumeFieldValue(vn, vt, v)
			}
			if k < 0 {
				return nil, fmt.Errorf("value field %d: %w", vn, ErrCorrupt)
			}
			v = v[k:]
		}
		out[tag] = val
	}
	return out, nil
}

// Files lists the event files of dir, oldest name first.
func Files(dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, Prefix+"*"))
	sort.Strings(m)
	return m
}

// Tag joins a tag's parts as TensorBoard groups them ("train/loss").
func Tag(parts ...string) string { return strings.Join(parts, "/") }
