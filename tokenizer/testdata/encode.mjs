// Encodes JSON strings from stdin with Hugging Face's Tokenizers.js and
// prints the ids as JSON: the independent check that a tokenizer.json seedctl
// wrote is valid and means what seedctl thinks it means.
//   node encode.mjs NODE_MODULES_DIR TOKENIZER_DIR < strings.json
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [mods, dir] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(join(mods, "@huggingface/tokenizers/dist/tokenizers.mjs")).href);
const tj = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
const tc = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(tj, tc);
const texts = JSON.parse(readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(texts.map((t) => tok.encode(t).ids)));
