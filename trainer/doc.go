// Package trainer is the only package that uses gotch (libtorch).
package trainer
