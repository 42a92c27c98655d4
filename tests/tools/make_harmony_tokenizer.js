// A small synthetic o200k_harmony-style tokenizer and its reference ids, for refit's o200k
// pre-tokenizer and harmony tests (tests/unit/tokenizer_o200k_test.cpp,
// tests/unit/serve_harmony_test.cpp). Made with the Hugging Face `tokenizers` library, npm
// package 0.23.2 (the version pinned in ../shared/realhf/package.json).
//
// usage (outside the repository; tests never need node):
//   mkdir /tmp/tokref && cd /tmp/tokref && cp /work/shared/realhf/package*.json . && npm ci
//   NODE_PATH=/tmp/tokref/node_modules node tests/tools/make_harmony_tokenizer.js tests/data/harmony
//
// The tokenizer has gpt-oss's shape: byte-level BPE, pre-tokenizer Sequence[Split(the o200k
// regex, Isolated), ByteLevel(use_regex=false)], ByteLevel decoder, and the harmony special
// tokens as added tokens, at the same offsets from <|startoftext|> as in the real vocabulary
// (199998 there). Merges build words that only come out whole when the regex splits the
// way o200k does (a merge across a case change, a contraction, a fourth digit).
const { Tokenizer } = require('tokenizers');
const fs = require('fs');
const path = require('path');

const outDir = process.argv[2];
if (!outDir) { console.error('usage: node make_harmony_tokenizer.js OUT_DIR'); process.exit(2); }

function bytesToUnicode() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  const m = {};
  bs.forEach((b, i) => { m[b] = String.fromCodePoint(cs[i]); });
  return m;
}
const B2U = bytesToUnicode();
const byteLevel = (s) => Array.from(Buffer.from(s, 'utf8')).map((b) => B2U[b]).join('');

// Left-to-right merges building each word (given as plain text) from its bytes.
function addWords(vocab, merges, words) {
  for (const w of words) {
    const chars = Array.from(byteLevel(w));
    let cur = chars[0];
    for (const c of chars.slice(1)) {
      const next = cur + c;
      if (!(next in vocab)) { vocab[next] = Object.keys(vocab).length; merges.push([cur, c]); }
      cur = next;
    }
  }
}

const vocab = {};
for (let b = 0; b < 256; b++) vocab[B2U[b]] = b;
const merges = [];
addWords(vocab, merges, [
  'Hello', ' world', 'World', 'HelloWorld', ' the', 'the', "'s", "'S", "'re", "'RE", "'ll", "'t",
  ' don', "don't", 'XML', 'Http', 'XMLHttp', 'Request', '123', '456', '1234', '12', ' 12',
  '\n\n', '  ', ' \n', '...', '!?', ' analysis', 'analysis', 'final', 'commentary', ' to',
  '=functions', '.get', '_weather', 'json', '{"', 'city', '":"', 'Paris', '"}', ' Paris',
  'assistant', 'Hi', ' there', '中文', '日本', 'é', 'e\u0301', 'The', ' answer', ' is', ' 4',
  ' think', 'Let', ' me', '.', 'user', 'developer', 'system',
]);

// The harmony specials, at their offsets from <|startoftext|> in o200k_harmony.
const HARMONY = [[0, '<|startoftext|>'], [1, '<|endoftext|>'], [2, '<|reserved_200000|>'],
  [3, '<|reserved_200001|>'], [4, '<|return|>'], [5, '<|constrain|>'], [6, '<|reserved_200004|>'],
  [7, '<|channel|>'], [8, '<|start|>'], [9, '<|end|>'], [10, '<|message|>'],
  [11, '<|reserved_200009|>'], [12, '<|reserved_200010|>'], [13, '<|reserved_200011|>'],
  [14, '<|call|>']];
const base = Object.keys(vocab).length;
const added = HARMONY.map(([off, content]) => ({ id: base + off, content, single_word: false,
  lstrip: false, rstrip: false, normalized: false, special: true }));

const O200K = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const tokenizerJson = {
  version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer: null,
  pre_tokenizer: { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: O200K }, behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
  post_processor: null,
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges },
};

const TEXTS = [
  'HelloWorld', 'Hello world', 'XMLHttpRequest', 'camelCaseWord PascalCase lowerUPPER',
  "it's IT'S They'RE we'll WE'LL don't DON'T I'M i'd You'Ve", "the's THE'S",
  '1234567', '12 123 1234 12345 123456789', 'x1234y', '3.14159 and 2,000,000',
  '中文字符 日本語のテキスト 한국어', 'e\u0301te\u0301 é café', 'a\n\nb\r\nc \n d\n\n\n',
  '   leading and trailing   ', '...!? foo/bar//baz (x) [y] {z} <a> "q"', 'path/to/file\n/next',
  '👍🏽 🎉🎉 emoji👍text', '\ttab\t\tand  two  spaces', '',
  '<|start|>assistant<|channel|>analysis<|message|>Let me think.<|end|><|start|>assistant<|channel|>final<|message|>The answer is 4<|return|>',
  '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>',
  '<|startoftext|><|endoftext|>', 'Hi<|end|>there<|reserved_200004|>x',
];

(async () => {
  fs.mkdirSync(outDir, { recursive: true });
  const tokPath = path.join(outDir, 'tokenizer.json');
  fs.writeFileSync(tokPath, JSON.stringify(tokenizerJson) + '\n');
  const tok = Tokenizer.fromFile(tokPath);
  tok.disablePadding(); tok.disableTruncation();
  const cases = [];
  for (const text of TEXTS) {
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    cases.push({ text, ids: Array.from(enc.getIds()) });
  }
  const specials = Object.fromEntries(added.map((t) => [t.content, t.id]));
  const refs = { generator: 'tests/tools/make_harmony_tokenizer.js, tokenizers (npm) 0.23.2',
    o200k_regex: O200K, specials, cases };
  fs.writeFileSync(path.join(outDir, 'refs.json'), JSON.stringify(refs, null, 1) + '\n');
  console.log(`${cases.length} cases, vocab ${base + HARMONY.length} -> ${outDir}`);
})().catch((e) => { console.error(e); process.exit(1); });
