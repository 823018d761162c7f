// Package trainer is the only package that uses gotch (libtorch). It holds
// the decoder-only model (Qwen2/2.5, Qwen3, Llama 3) with Hugging Face
// parameter names, safetensors checkpoint IO, per-token log-probs (the
// primitive of GRPO, teacher rescoring and SFT), KV-cache decoding, and
// runtime inspection of libtorch for `seedctl doctor`.
//
// Errors from libtorch never abort the process: gotch's Must* helpers call
// log.Fatal, so the package uses the error-returning calls through must()
// and converts failures back into errors at every exported entry point.
package trainer
