// Drives a server with the official OpenAI client (npm package "openai"):
//   node openai_client.mjs NODE_MODULES_DIR BASE_URL MODEL
// Prints a JSON summary of what came back.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [mods, baseURL, model] = process.argv.slice(2);
const { default: OpenAI } = await import(pathToFileURL(join(mods, "openai/index.mjs")).href);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const out = {};

const messages = [{ role: "user", content: "Your task is to: put a mug in the fridge." }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2, skip_special_tokens: false });
out.chatText = chat.choices[0].message.content;
out.chatFinish = chat.choices[0].finish_reason;
out.chatLogprobs = chat.choices[0].logprobs.content.length;
out.chatTop = chat.choices[0].logprobs.content[0].top_logprobs.length;
out.usage = chat.usage;

const stream = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, stream: true, skip_special_tokens: false });
let text = "";
let finish = null;
for await (const chunk of stream) {
  const c = chunk.choices[0];
  if (c.delta && c.delta.content) text += c.delta.content;
  if (c.finish_reason) finish = c.finish_reason;
}
out.streamText = text;
out.streamFinish = finish;

const cmpl = await client.completions.create({ model, prompt: "You arrive at cabinet 1.", max_tokens: 0, echo: true, logprobs: 0 });
out.echoText = cmpl.choices[0].text;
out.echoLogprobs = cmpl.choices[0].logprobs.token_logprobs;

const gen = await client.completions.create({ model, prompt: [5, 6, 7], max_tokens: 4, temperature: 0, logprobs: 1 });
out.genTokens = gen.choices[0].logprobs.tokens.length;

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

try {
  await client.chat.completions.create({ model: "no-such-model", messages, max_tokens: 1 });
  out.badModelStatus = 200;
} catch (e) {
  out.badModelStatus = e.status;
  out.badModelMessage = e.message;
}
process.stdout.write(JSON.stringify(out));
