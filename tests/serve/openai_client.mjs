// openai_client.mjs — the official OpenAI client (npm `openai`, pinned in package.json) against qmap serve.
// usage: node openai_client.mjs BASE_URL PROMPT MAX_TOKENS
// Prints one JSON object: what each call returned, for tests/serve/test_serve.py to compare with qmap run.
import OpenAI from 'openai';

const [baseURL, prompt, maxTokens] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: process.env.QMAP_TEST_KEY || 'none', maxRetries: 0, timeout: 60000 });
const max_tokens = Number(maxTokens);
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const c = await client.completions.create({ model: out.models[0], prompt, max_tokens, temperature: 0 });
out.completion = { text: c.choices[0].text, finish_reason: c.choices[0].finish_reason, usage: c.usage };

const messages = [{ role: 'system', content: 'Answer in the words of the King James Bible.' },
                  { role: 'user', content: prompt }];
const ch = await client.chat.completions.create({ model: out.models[0], messages, max_tokens, temperature: 0 });
out.chat = { text: ch.choices[0].message.content, role: ch.choices[0].message.role,
             finish_reason: ch.choices[0].finish_reason, usage: ch.usage };

let text = '', events = 0, finish = null;
const s = await client.completions.create({ model: out.models[0], prompt, max_tokens, temperature: 0, stream: true });
for await (const chunk of s) {
  events++;
  text += chunk.choices[0].text;
  if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
}
out.completion_stream = { text, events, finish_reason: finish };

text = ''; events = 0; finish = null;
let usage = null, role = null;
const cs = await client.chat.completions.create({ model: out.models[0], messages, max_tokens, temperature: 0, stream: true,
                                                 stream_options: { include_usage: true } });
for await (const chunk of cs) {
  events++;
  if (chunk.usage) usage = chunk.usage;
  if (!chunk.choices.length) continue;
  if (chunk.choices[0].delta.role) role = chunk.choices[0].delta.role;
  text += chunk.choices[0].delta.content ?? '';
  if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
}
out.chat_stream = { text, events, role, finish_reason: finish, usage };

try {
  await client.completions.create({ model: out.models[0], prompt, max_tokens, n: 2 });
  out.n2 = { status: 200 };
} catch (e) {
  out.n2 = { status: e.status, message: e.error?.message ?? String(e), type: e.error?.type };
}
console.log(JSON.stringify(out));
