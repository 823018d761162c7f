// Package ckpthash fingerprints a Hugging Face checkpoint folder's weights,
// for the packages that must not load them (benchmarks) and those that do
// (basemodel).
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
	f, err := os.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
