// The tokenizer file and its encoder (the format is in tokenizer.h). Every
// count and length in the file is checked against the file's size before it is
// used: the file may come from anywhere (tests/fuzz/fuzz_tokenizer.c).
#include "tokenizer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// snprintf into err; returns -1, for `return fail(...)`.
static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (cap) vsnprintf(err, cap, fmt, ap);
  va_end(ap);
  return -1;
}

// ---------------------------------------------------------------------------
// merges: (left, right) -> rank, open addressing

static uint32_t pair_hash(int32_t left, int32_t right, uint32_t nslots) {
  uint32_t key = (uint32_t)left << 16 ^ (uint32_t)right;  // ids < 65536
  return (key * 2654435761u) & (nslots - 1);
}

// The rank of the merge of (left, right), -1 if there is none.
static int merge_rank(const rt_tokenizer *t, int32_t left, int32_t right) {
  if (!t->nslots) return -1;
  for (uint32_t h = pair_hash(left, right, t->nslots);; h = (h + 1) & (t->nslots - 1)) {
    uint32_t r = t->slots[h];
    if (!r) return -1;
    const int32_t *m = t->merges + 3 * (size_t)(r - 1);
    if (m[0] == left && m[1] == right) return (int)(r - 1);
  }
}

// Adds merge `rank` to the table; -1 if an earlier merge has its pair.
static int merge_add(rt_tokenizer *t, int rank) {
  const int32_t *m = t->merges + 3 * (size_t)rank;
  uint32_t h = pair_hash(m[0], m[1], t->nslots);
  for (; t->slots[h]; h = (h + 1) & (t->nslots - 1)) {
    const int32_t *o = t->merges + 3 * (size_t)(t->slots[h] - 1);
    if (o[0] == m[0] && o[1] == m[1]) return -1;
  }
  t->slots[h] = (uint32_t)rank + 1;
  return 0;
}

// ---------------------------------------------------------------------------
// reading

void rt_tok_free(rt_tokenizer *t) {
  free(t->bytes);
  free(t->start);
  free(t->merges);
  free(t->slots);
  memset(t, 0, sizeof *t);
  t->eot = -1;
}

// Checks the merges of t (m of them at p) and builds their table.
static int parse_merges(rt_tokenizer *t, const uint8_t *p, int m, const char *name, char *err,
                        size_t cap) {
  t->nmerges = m;
  if (m == 0) return 0;
  for (t->nslots = 1; t->nslots < 2 * (uint32_t)m;) t->nslots *= 2;
  t->merges = malloc(3 * (size_t)m * sizeof *t->merges);
  t->slots = calloc(t->nslots, sizeof *t->slots);
  if (!t->merges || !t->slots) return fail(err, cap, "%s: out of memory for %d merges", name, m);
  for (int r = 0; r < m; r++) {
    int32_t *e = t->merges + 3 * (size_t)r;
    for (int k = 0; k < 3; k++) {
      e[k] = (int32_t)le32(p + 12 * (size_t)r + 4 * (size_t)k);
      if (e[k] < 0 || e[k] >= t->vocab)
        return fail(err, cap, "%s: merge %d names token %d, outside the vocabulary of %d", name,
                    r, e[k], t->vocab);
    }
    size_t nl, nr, nm;
    const char *l = rt_tok_piece(t, e[0], &nl), *rr = rt_tok_piece(t, e[1], &nr);
    const char *mm = rt_tok_piece(t, e[2], &nm);
    if (nm != nl + nr || memcmp(mm, l, nl) || memcmp(mm + nl, rr, nr))
      return fail(err, cap, "%s: merge %d makes token %d, whose bytes are not token %d's "
                  "followed by token %d's", name, r, e[2], e[0], e[1]);
    if (merge_add(t, r))
      return fail(err, cap, "%s: merge %d (tokens %d and %d) repeats an earlier one", name, r,
                  e[0], e[1]);
  }
  return 0;
}

static int parse(rt_tokenizer *t, const uint8_t *data, size_t size, const char *name, char *err,
                 size_t cap) {
  if (size < RT_TOK_HEADER_BYTES)
    return fail(err, cap, "%s is not a tokenizer file: %zu bytes, less than the %d-byte header",
                name, size, RT_TOK_HEADER_BYTES);
  int32_t magic = (int32_t)le32(data), version = (int32_t)le32(data + 4);
  int32_t vocab = (int32_t)le32(data + 8), eot = (int32_t)le32(data + 12);
  int32_t kind = (int32_t)le32(data + 16), nmerges = (int32_t)le32(data + 20);
  if (magic != RT_TOK_MAGIC)
    return fail(err, cap, "%s is not a tokenizer file: magic number %d, expected %d", name,
                magic, RT_TOK_MAGIC);
  if (version != RT_TOK_VERSION)
    return fail(err, cap, "%s: unsupported tokenizer file version %d, expected %d", name,
                version, RT_TOK_VERSION);
  if (vocab < 1 || vocab > RT_TOK_MAX_VOCAB)
    return fail(err, cap, "%s: a vocabulary of %d tokens, expected 1 to %d", name, vocab,
                RT_TOK_MAX_VOCAB);
  if (eot < -1 || eot >= vocab)
    return fail(err, cap, "%s: end-of-text token %d, outside the vocabulary of %d", name, eot,
                vocab);
  if (kind < RT_TOK_LLMC || kind > RT_TOK_BPE)
    return fail(err, cap, "%s: unknown tokenizer kind %d (0 llm.c, 1 bytes, 2 byte-level BPE)",
                name, kind);
  if (nmerges < 0 || (nmerges > 0 && kind != RT_TOK_BPE))
    return fail(err, cap, "%s: %d merges for a tokenizer of kind %d (only kind 2, BPE, has "
                "them)", name, nmerges, kind);
  if (kind == RT_TOK_BYTES && vocab != 256)
    return fail(err, cap, "%s: a bytes tokenizer of %d tokens, expected 256", name, vocab);
  t->kind = (rt_tok_kind)kind;
  t->vocab = vocab;
  t->eot = eot;

  // the pieces: first their lengths, each inside the file, then one copy of their bytes
  size_t at = RT_TOK_HEADER_BYTES, total = 0;
  t->start = malloc(((size_t)vocab + 1) * sizeof *t->start);
  if (!t->start) return fail(err, cap, "%s: out of memory", name);
  for (int i = 0; i < vocab; i++) {
    if (at >= size)
      return fail(err, cap, "%s is truncated: it ends before token %d of %d (at byte %zu)", name,
                  i, vocab, at);
    size_t n = data[at];
    if (n == 0) return fail(err, cap, "%s: token %d has no bytes (at byte %zu)", name, i, at);
    if (n > size - at - 1)
      return fail(err, cap, "%s is truncated: token %d's %zu bytes run past its end (at byte "
                  "%zu)", name, i, n, at);
    t->start[i] = (uint32_t)total;
    total += n;
    at += 1 + n;
  }
  t->start[vocab] = (uint32_t)total;
  size_t want = 12 * (size_t)nmerges;
  if (size - at != want)
    return fail(err, cap, "%s %s: the header says %d merges (%zu bytes) after the pieces, the "
                "file has %zu bytes there", name, size - at < want ? "is truncated" : "is corrupt",
                nmerges, want, size - at);
  t->bytes = malloc(total);
  if (!t->bytes) return fail(err, cap, "%s: out of memory", name);
  at = RT_TOK_HEADER_BYTES;
  for (int i = 0; i < vocab; i++) {
    size_t n = data[at];
    memcpy(t->bytes + t->start[i], data + at + 1, n);
    at += 1 + n;
  }
  for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
  for (int i = vocab - 1; i >= 0; i--)  // the first token of each byte
    if (t->start[i + 1] - t->start[i] == 1) t->byte_id[t->bytes[t->start[i]]] = i;
  if (kind == RT_TOK_BYTES)
    for (int b = 0; b < 256; b++)
      if (t->byte_id[b] != b)
        return fail(err, cap, "%s: token %d of a bytes tokenizer is not the byte %d", name, b, b);
  return parse_merges(t, data + at, nmerges, name, err, cap);
}

int rt_tok_parse(rt_tokenizer *t, const uint8_t *data, size_t size, const char *name, char *err,
                 size_t cap) {
  memset(t, 0, sizeof *t);
  int rc = parse(t, data, size, name, err, cap);
  if (rc) rt_tok_free(t);
  return rc;
}

int rt_tok_load(rt_tokenizer *t, const char *path, char *err, size_t cap) {
  memset(t, 0, sizeof *t);
  t->eot = -1;
  FILE *f = fopen(path, "rb");
  if (!f) return fail(err, cap, "cannot open tokenizer file %s: %s", path, strerror(errno));
  // read to the end (standard C: no fstat), refusing more than RT_TOK_MAX_FILE bytes
  size_t size = 0, room = 1 << 20;
  uint8_t *data = malloc(room);
  int rc = 0;
  while (data) {
    size_t got = fread(data + size, 1, room - size, f);
    size += got;
    if (size < room) break;
    if (room > RT_TOK_MAX_FILE) break;
    uint8_t *more = realloc(data, room * 2);
    if (!more) free(data);
    data = more;
    room *= 2;
  }
  if (!data) rc = fail(err, cap, "%s: out of memory reading it", path);
  else if (ferror(f)) rc = fail(err, cap, "cannot read tokenizer file %s: %s", path, strerror(errno));
  else if (size > RT_TOK_MAX_FILE)
    rc = fail(err, cap, "%s: more than %d bytes, larger than any tokenizer file (GPT-2's is about "
              "1 MiB)", path, RT_TOK_MAX_FILE);
  else rc = rt_tok_parse(t, data, size, path, err, cap);
  free(data);
  fclose(f);
  return rc;
}

const char *rt_tok_piece(const rt_tokenizer *t, int id, size_t *len) {
  if (id < 0 || id >= t->vocab) {
    *len = 0;
    return NULL;
  }
  *len = t->start[id + 1] - t->start[id];
  return (const char *)t->bytes + t->start[id];
}

// ---------------------------------------------------------------------------
// encoding

// The classes of GPT-2's pre-tokenizer pattern on ASCII: \p{L}, \p{N}, \s (tab
// to carriage return, and space), and the rest.
enum { LETTER, DIGIT, SPACE, OTHER };

static int char_class(unsigned char c) {
  if ((c | 32) >= 'a' && (c | 32) <= 'z') return LETTER;
  if (c >= '0' && c <= '9') return DIGIT;
  if (c == ' ' || (c >= '\t' && c <= '\r')) return SPACE;
  return OTHER;
}

// The length of the pre-token that starts s[0 .. n) (n > 0), as GPT-2's pattern
// matches it, its alternatives tried in order:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
static long pretoken(const unsigned char *s, long n) {
  if (s[0] == '\'' && n >= 2) {
    if (strchr("stmd", s[1])) return 2;
    if (n >= 3 && (!memcmp(s + 1, "re", 2) || !memcmp(s + 1, "ve", 2) || !memcmp(s + 1, "ll", 2)))
      return 3;
  }
  long k = s[0] == ' ' && n > 1 ? 1 : 0;  // the optional leading space
  int c = char_class(s[k]);
  if (c != SPACE) {  // ` ?` and a run of one class
    long j = k + 1;
    while (j < n && char_class(s[j]) == c) j++;
    return j;
  }
  long j = 0;  // whitespace: all of it at the end; else all but the last, which goes with what follows
  while (j < n && char_class(s[j]) == SPACE) j++;
  return j == n || j == 1 ? j : j - 1;
}

// BPE on one pre-token, its byte tokens in w[0 .. n): merges the adjacent pair
// of the lowest rank (the leftmost of equal ones) until no pair has a merge, as
// Hugging Face tokenizers does (the same tokens as GPT-2's merge of every
// occurrence at once). Returns the tokens left in w. Quadratic in n: prompts
// have short words.
static long bpe(const rt_tokenizer *t, int32_t *w, long n) {
  for (;;) {
    int best = -1;
    long at = 0;
    for (long i = 0; i + 1 < n; i++) {
      int r = merge_rank(t, w[i], w[i + 1]);
      if (r >= 0 && (best < 0 || r < best)) {
        best = r;
        at = i;
      }
    }
    if (best < 0) return n;
    w[at] = t->merges[3 * (size_t)best + 2];
    memmove(w + at + 1, w + at + 2, (size_t)(n - at - 2) * sizeof *w);
    n--;
  }
}

// Appends the BPE tokens of s[lo .. hi) (ASCII, no end-of-text text in it) to out.
static int encode_bpe(const rt_tokenizer *t, const unsigned char *s, long lo, long hi,
                      int32_t *out, long cap, long *count, int32_t *scratch, char *err,
                      size_t ecap) {
  for (long i = lo; i < hi;) {
    long len = pretoken(s + i, hi - i);
    for (long j = 0; j < len; j++) {
      scratch[j] = t->byte_id[s[i + j]];
      if (scratch[j] < 0)
        return fail(err, ecap, "the tokenizer has no token for the byte 0x%02x (at byte %ld of "
                    "the text)", s[i + j], i + j);
    }
    long m = bpe(t, scratch, len);
    if (*count + m > cap)
      return fail(err, ecap, "the text is more than %ld tokens long", cap);
    memcpy(out + *count, scratch, (size_t)m * sizeof *out);
    *count += m;
    i += len;
  }
  return 0;
}

long rt_tok_encode(const rt_tokenizer *t, const char *text, int32_t *out, long cap, char *err,
                   size_t ecap) {
  const unsigned char *s = (const unsigned char *)text;
  long n = (long)strlen(text), count = 0;
  if (t->kind == RT_TOK_BYTES) {
    if (n > cap) return fail(err, ecap, "the text is more than %ld tokens long", cap);
    for (long i = 0; i < n; i++) out[i] = s[i];
    return n;
  }
  if (t->kind != RT_TOK_BPE)
    return fail(err, ecap, "this tokenizer file (llm.c's) has no merges to encode text with: "
                "write the text's ids with tools/prep_text.py encode --dir DIR TEXT -o "
                "prompt.bin");
  for (long i = 0; i < n; i++)
    if (s[i] >= 0x80)
      return fail(err, ecap, "the text is not ASCII (byte 0x%02x at byte %ld), which this "
                  "program's BPE encoder does not take: write its ids with tools/prep_text.py "
                  "encode --dir DIR TEXT -o prompt.bin", s[i], i);
  int32_t *scratch = malloc(((size_t)n + 1) * sizeof *scratch);
  if (!scratch) return fail(err, ecap, "out of memory encoding %ld bytes", n);
  // the end-of-text token's text is that token (as tokenizers' special tokens are); BPE between
  size_t elen = 0;
  const char *eot = t->eot >= 0 ? rt_tok_piece(t, t->eot, &elen) : NULL;
  long i = 0;
  int rc = 0;
  for (;;) {
    long at = n;  // the next end-of-text text from i
    for (long j = i; eot && j + (long)elen <= n; j++)
      if (!memcmp(s + j, eot, elen)) {
        at = j;
        break;
      }
    rc = encode_bpe(t, s, i, at, out, cap, &count, scratch, err, ecap);
    if (rc || at == n) break;
    if (count + 1 > cap) {
      rc = fail(err, ecap, "the text is more than %ld tokens long", cap);
      break;
    }
    out[count++] = t->eot;
    i = at + (long)elen;
  }
  free(scratch);
  return rc ? -1 : count;
}
