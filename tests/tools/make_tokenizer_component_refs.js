// Reference ids for refit's tokenizer-component tests (tests/unit/tokenizer_components_test.cpp),
// made by the Hugging Face `tokenizers` library, npm package 0.23.2 (the version pinned in
// ../shared/realhf/package.json).
//
// usage (outside the repository; tests never need node):
//   mkdir /tmp/tokref && cd /tmp/tokref && cp /work/shared/realhf/package*.json . && npm ci
//   NODE_PATH=/tmp/tokref/node_modules node tests/tools/make_tokenizer_component_refs.js \
//       tests/data/tokenizer_components/refs.json
//
// Two small vocabularies (byte-level BPE and SentencePiece-style BPE with byte fallback) are
// built here; each case combines one with a normalizer / pre-tokenizer / post-processor and is
// encoded with add_special_tokens false and true. Cases with a tokenizer_config.json emulate
// transformers' update_post_processor (TokenizersBackend in transformers 5, LlamaTokenizerFast
// in 4.x): the template becomes "[bos] $A [eos]" from add_bos_token / add_eos_token, and that
// template is what `tokenizers` runs here. Cases marked `refused` must be refused by refit,
// naming the component type (some of them tokenizers runs, some it refuses).
const { Tokenizer } = require('tokenizers');
const fs = require('fs');

const outPath = process.argv[2];
if (!outPath) { console.error('usage: node make_tokenizer_component_refs.js OUT.json'); process.exit(2); }

// GPT-2's bytes_to_unicode.
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

// Left-to-right merges that build each word from its characters.
function addWords(vocab, merges, words) {
  for (const w of words) {
    const chars = Array.from(w);
    let cur = chars[0];
    if (!(cur in vocab)) vocab[cur] = Object.keys(vocab).length;
    for (const c of chars.slice(1)) {
      if (!(c in vocab)) vocab[c] = Object.keys(vocab).length;
      const next = cur + c;
      if (!(next in vocab)) { vocab[next] = Object.keys(vocab).length; merges.push([cur, c]); }
      cur = next;
    }
  }
}

function byteLevelModel() {
  const vocab = {};
  for (let b = 0; b < 256; b++) vocab[B2U[b]] = b;
  const merges = [];
  addWords(vocab, merges, ['Hello', 'Ġworld', 'Ġhello', 'hello', 'Ġthe', 'ĠĠ', 'caf', 'Ġnaive',
    'Ġnaïve', 'fi', 'Ġ12', '12', 'ing', 'ĊĊ'].map((w) => w));
  return { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges };
}

function spmModel() {
  const vocab = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (let b = 0; b < 256; b++) vocab['<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>'] = 3 + b;
  const merges = [];
  for (const c of '▁abcdefghijklmnopqrstuvwxyzHW,.![]/') if (!(c in vocab)) vocab[c] = Object.keys(vocab).length;
  addWords(vocab, merges, ['▁Hello', '▁world', '▁hello', 'Hello', 'world', '▁▁', '▁INST', 'hi', '▁hi']);
  return { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges };
}

const MODELS = { byte_level: byteLevelModel(), spm: spmModel() };
const nextId = (m) => Object.keys(MODELS[m].vocab).length;

const added = (id, content, special, extra = {}) => ({ id, content, single_word: false, lstrip: false,
  rstrip: false, normalized: !special, special, ...extra });
const BL_ADDED = [
  added(nextId('byte_level'), '<|begin_of_text|>', true),
  added(nextId('byte_level') + 1, '<|eot_id|>', true),
  added(nextId('byte_level') + 2, '[CLS]', true),
  added(nextId('byte_level') + 3, '[SEP]', true),
  // Not special, normalized: matched in the normalized text by its normalized spelling.
  added(nextId('byte_level') + 4, 'Hello World', false),
];
const BL = Object.fromEntries(BL_ADDED.map((t) => [t.content, t.id]));
const SPM_ADDED = [added(0, '<unk>', true), added(1, '<s>', true), added(2, '</s>', true),
  added(nextId('spm'), '[INST]', true), added(nextId('spm') + 1, '[/INST]', true),
  added(nextId('spm') + 2, '<tok>', false, { normalized: false })];

const TEXTS = ['Hello world', ' Hello world', 'hello  the world', '  leading and trailing  ',
  'Café CAFÉ naïve nai\u0308ve İstanbul ΣΑΣ', 'ﬁ ½ Ａ ① ²', '\u00a0nbsp\u2009thin\u3000wide', '', ' ', '\n\n',
  'Hello World and hello world', '<|begin_of_text|>Hello<|eot_id|> world', '[CLS] x [SEP]',
  '<s>[INST] hi [/INST]</s>', '[INST]Hello world[/INST] hi', 'a<tok>b <tok> c', 'x\ty\r\nz 12 123'];

const template = (single) => ({ type: 'TemplateProcessing', single, pair: single, special_tokens:
  Object.fromEntries(single.filter((p) => p.SpecialToken).map((p) => [p.SpecialToken.id,
    { id: p.SpecialToken.id, ids: [BL[p.SpecialToken.id] ?? SPM_ADDED.find((t) => t.content === p.SpecialToken.id).id], tokens: [p.SpecialToken.id] }])) });
const st = (id) => ({ SpecialToken: { id, type_id: 0 } });
const A = { Sequence: { id: 'A', type_id: 0 } };
const LLAMA3_SPLIT = { type: 'Split', pattern: { Regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" }, behavior: 'Isolated', invert: false };
const BL_PRE = { type: 'Sequence', pretokenizers: [LLAMA3_SPLIT, { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] };
const BL_DEC = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
const SPM_DEC = { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' }, content: ' ' },
  { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] };

const cases = [];
const bl = (name, parts) => cases.push({ name, model: 'byte_level', added_tokens: BL_ADDED, normalizer: null,
  pre_tokenizer: BL_PRE, post_processor: null, decoder: BL_DEC, ...parts });
const spm = (name, parts) => cases.push({ name, model: 'spm', added_tokens: SPM_ADDED, normalizer: null,
  pre_tokenizer: null, post_processor: null, decoder: SPM_DEC, ...parts });

// Post-processors.
bl('post_llama3_sequence', { post_processor: { type: 'Sequence', processors: [
  { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true }, template([st('<|begin_of_text|>'), A])] } });
bl('post_nested_sequence_bos_eos', { post_processor: { type: 'Sequence', processors: [
  { type: 'Sequence', processors: [{ type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }] },
  { type: 'Sequence', processors: [template([st('<|begin_of_text|>'), A, st('<|eot_id|>')])] }] } });
bl('post_template_eos_only', { post_processor: template([A, st('<|eot_id|>')]) });
bl('post_bert', { post_processor: { type: 'BertProcessing', sep: ['[SEP]', BL['[SEP]']], cls: ['[CLS]', BL['[CLS]']] } });
bl('post_roberta', { post_processor: { type: 'RobertaProcessing', sep: ['[SEP]', BL['[SEP]']], cls: ['[CLS]', BL['[CLS]']], trim_offsets: true, add_prefix_space: true } });
bl('post_bytelevel_only', { post_processor: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false } });

// Normalizers (on the byte-level model, so any output is encodable).
for (const t of ['NFC', 'NFD', 'NFKC', 'NFKD', 'Lowercase']) bl('normalizer_' + t, { normalizer: { type: t } });
bl('normalizer_Strip_both', { normalizer: { type: 'Strip', strip_left: true, strip_right: true } });
bl('normalizer_Strip_left', { normalizer: { type: 'Strip', strip_left: true, strip_right: false } });
bl('normalizer_Strip_right', { normalizer: { type: 'Strip', strip_left: false, strip_right: true } });
bl('normalizer_StripAccents_after_NFD', { normalizer: { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'StripAccents' }] } });
bl('normalizer_Replace_string', { normalizer: { type: 'Replace', pattern: { String: 'll' }, content: 'LL' } });
bl('normalizer_Replace_regex', { normalizer: { type: 'Replace', pattern: { Regex: '\\s+' }, content: ' ' } });
bl('normalizer_Prepend', { normalizer: { type: 'Prepend', prepend: '>' } });
bl('normalizer_Sequence_NFKC_Lowercase_Replace', { normalizer: { type: 'Sequence', normalizers: [
  { type: 'NFKC' }, { type: 'Lowercase' }, { type: 'Replace', pattern: { String: ' ' }, content: '_' }] } });
bl('normalizer_Lowercase_matches_normalized_added_token', { normalizer: { type: 'Lowercase' },
  added_tokens: BL_ADDED.map((t) => (t.content === 'Hello World' ? { ...t, content: 'hello world' } : t)) });

// Metaspace, every prepend_scheme with and without split; the legacy field; Llama 2's normalizer.
const ms = (scheme, split) => ({ type: 'Metaspace', replacement: '▁', prepend_scheme: scheme, split });
for (const scheme of ['first', 'always', 'never'])
  for (const split of [true, false]) spm(`metaspace_${scheme}_split_${split}`, { pre_tokenizer: ms(scheme, split) });
spm('metaspace_legacy_add_prefix_space_true', { pre_tokenizer: { type: 'Metaspace', replacement: '▁', add_prefix_space: true } });
spm('metaspace_legacy_add_prefix_space_false_never', { pre_tokenizer: { type: 'Metaspace', replacement: '▁', add_prefix_space: false, prepend_scheme: 'never' } });
spm('llama2_normalizer_prepend_replace', { normalizer: { type: 'Sequence', normalizers: [
  { type: 'Prepend', prepend: '▁' }, { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] } });

// tokenizer_config.json add_bos_token / add_eos_token (transformers rebuilds the template).
const spmTemplate = template([st('<s>'), A]);
const flags = (name, config, single) => spm(name, { pre_tokenizer: ms('first', false), post_processor: spmTemplate,
  tokenizer_config: { bos_token: '<s>', eos_token: '</s>', ...config }, hf_post_processor: template(single) });
flags('flags_llama_bos_eos', { tokenizer_class: 'LlamaTokenizer', add_bos_token: true, add_eos_token: true }, [st('<s>'), A, st('</s>')]);
flags('flags_llama_no_bos_eos', { tokenizer_class: 'LlamaTokenizer', add_bos_token: false, add_eos_token: true }, [A, st('</s>')]);
flags('flags_llama_class_default_bos', { tokenizer_class: 'LlamaTokenizerFast' }, [st('<s>'), A]);
flags('flags_generic_eos_only', { tokenizer_class: 'PreTrainedTokenizerFast', add_eos_token: true }, [A, st('</s>')]);
flags('flags_generic_no_bos', { tokenizer_class: 'PreTrainedTokenizerFast', add_bos_token: false }, [A]);
flags('flags_generic_unset_keeps_post_processor', { tokenizer_class: 'PreTrainedTokenizerFast' }, [st('<s>'), A]);

// Components refit must refuse by name.
const refused = (name, kind, parts) => (parts.model ? cases : cases).push({ name, model: 'byte_level',
  added_tokens: BL_ADDED, normalizer: null, pre_tokenizer: BL_PRE, post_processor: null, decoder: BL_DEC,
  ...parts, refused: kind });
refused('refused_normalizer_Precompiled', 'Precompiled', { normalizer: { type: 'Precompiled', precompiled_charsmap: null } });
refused('refused_normalizer_BertNormalizer', 'BertNormalizer', { normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true } });
refused('refused_normalizer_unknown', 'FancyNormalizer', { normalizer: { type: 'FancyNormalizer' } });
refused('refused_pre_tokenizer_Whitespace', 'Whitespace', { pre_tokenizer: { type: 'Whitespace' } });
refused('refused_post_processor_unknown', 'FancyProcessing', { post_processor: { type: 'FancyProcessing' } });
// tokenizers 0.23 gives [bos, eos] without the text's ids for two token-adding templates in a
// Sequence; refit refuses that shape rather than guess.
refused('refused_post_processor_two_templates', 'more than one', { post_processor: { type: 'Sequence', processors: [
  template([st('<|begin_of_text|>'), A]), template([A, st('<|eot_id|>')])] } });
refused('refused_decoder_WordPiece', 'WordPiece', { decoder: { type: 'WordPiece', prefix: '##', cleanup: true } });
refused('refused_metaspace_add_prefix_space_false_always', 'add_prefix_space', { model: 'spm', added_tokens: SPM_ADDED, decoder: SPM_DEC,
  pre_tokenizer: { type: 'Metaspace', replacement: '▁', add_prefix_space: false, prepend_scheme: 'always' } });

function tokenizerJson(c, forHf) {
  return { version: '1.0', truncation: null, padding: null, added_tokens: c.added_tokens, normalizer: c.normalizer,
    pre_tokenizer: c.pre_tokenizer, post_processor: forHf && c.hf_post_processor ? c.hf_post_processor : c.post_processor,
    decoder: c.decoder, model: MODELS[c.model] };
}

(async () => {
  const out = { generator: 'tests/tools/make_tokenizer_component_refs.js, tokenizers (npm) 0.23.2', models: MODELS, texts: TEXTS, cases: [] };
  for (const c of cases) {
    const row = { name: c.name, model: c.model };
    for (const k of ['added_tokens', 'normalizer', 'pre_tokenizer', 'post_processor', 'decoder', 'tokenizer_config', 'refused'])
      if (c[k] !== undefined) row[k] = c[k];
    let tok = null;
    // Refused cases are not handed to tokenizers: some of them make it panic and abort.
    if (!c.refused) tok = Tokenizer.fromString(JSON.stringify(tokenizerJson(c, true)));
    if (tok) {
      tok.disablePadding(); tok.disableTruncation();
      row.ids = []; row.ids_with_special = [];
      for (const text of TEXTS) {
        row.ids.push(Array.from((await tok.encode(text, null, { addSpecialTokens: false })).getIds()));
        row.ids_with_special.push(Array.from((await tok.encode(text, null, { addSpecialTokens: true })).getIds()));
      }
    }
    out.cases.push(row);
  }
  fs.writeFileSync(outPath, JSON.stringify(out) + '\n');
  console.log(`${out.cases.length} cases -> ${outPath} (${fs.statSync(outPath).size} bytes)`);
})().catch((e) => { console.error(e); process.exit(1); });
