// Package ckpthash fingerprints checkpoint files: a Hugging Face
// checkpoint folder's weights, for the packages that must not load them
// (benchmarks) and those that do (basemodel), and any file of a run
// folder (orchestrator's integrity sums).
package ckpthash

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
)

// Weights is the hex sha256 of dir's model.safetensors.
func Weights(dir string) (string, error) {
	sum, _, err := File(filepath.Join(dir, "model.safetensors"))
	return sum, err
}

// File is the hex sha256 and the size of the file at path.
func File(path string) (sum string, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	if size, err = io.Copy(h, f); err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), size, nil
}
