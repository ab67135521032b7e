// Tests of the tokenizer file and its encoder (runtime/tokenizer.c).
//
//   test_tokenizer TMPDIR                  the checks below
//   test_tokenizer --check TOKENIZER       loads it: its kind, vocabulary, end of text, merges
//   test_tokenizer --decode TOKENIZER SHARD...   the shards' tokens as bytes, to stdout
//   test_tokenizer --encode TOKENIZER FILE       the ids of each text of FILE (texts
//                                                separated by NUL bytes), a line each
// (the last three for tests/prep_text.sh, on what tools/prep_text.py writes)
//
// 1. A bytes tokenizer, built by hand and read from a file: token b is byte b,
//    text encodes to its bytes and decodes back.
// 2. A small byte-level BPE built by hand: merges apply lowest rank first,
//    never across GPT-2's pre-token boundaries (contractions, a space before a
//    word, a run of spaces but its last), the end-of-text text is its token;
//    non-ASCII text, a full `out` and llm.c's file (no merges) are refused.
// 3. Broken files: each fails with a message that names the problem (the
//    table below); every truncation of a valid file fails, and 2000 mutations
//    either load into a tokenizer whose encoding decodes back or fail with a
//    message (CI runs this under ASan and UBSan).
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rng.h"
#include "shard.h"
#include "tokenizer.h"

// ---- building files ---------------------------------------------------------------------------

typedef struct {
  uint8_t *p;
  size_t n, cap;
} buf;

static void put(buf *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = 2 * (b->n + n) + 1024;
    b->p = realloc(b->p, b->cap);
    if (!b->p) exit(2);
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
}

static void put32(buf *b, int32_t v) {
  uint32_t u = (uint32_t)v;
  uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
  put(b, le, 4);
}

static void set32(buf *b, size_t at, int32_t v) {
  uint32_t u = (uint32_t)v;
  for (int k = 0; k < 4; k++) b->p[at + (size_t)k] = (uint8_t)(u >> (8 * k));
}

static void header(buf *b, int vocab, int eot, int kind, int nmerges) {
  put32(b, RT_TOK_MAGIC);
  put32(b, RT_TOK_VERSION);
  put32(b, vocab);
  put32(b, eot);
  put32(b, kind);
  put32(b, nmerges);
  for (int i = 6; i < 256; i++) put32(b, 0);
}

static void piece(buf *b, const char *s, size_t n) {
  uint8_t len = (uint8_t)n;
  put(b, &len, 1);
  put(b, s, n);
}

// The bytes tokenizer's file, as tools/prep_text.py --tokenizer bytes writes it.
static buf bytes_file(void) {
  buf b = {0};
  header(&b, 256, 0, RT_TOK_BYTES, 0);
  for (int i = 0; i < 256; i++) {
    char c = (char)i;
    piece(&b, &c, 1);
  }
  return b;
}

// A byte-level BPE as tools/prep_text.py --tokenizer bpe writes one: 0 is <|endoftext|>, 1 +
// b the byte b, then the merged tokens in the order of the merges below (rank order).
static const char *const bpe_merges[][2] = {
    {"h", "e"},   // 257 he
    {"l", "l"},   // 258 ll
    {"he", "ll"}, // 259 hell
    {"hell", "o"},// 260 hello
    {" ", "w"},   // 261 " w"
    {" ", " "},   // 262 "  "
    {"t", "'"},   // 263 t'       (across a contraction: never applies)
    {"'", "s"},   // 264 's
    {"a", "a"},   // 265 aa
    {"\n", "\n"}, // 266 "\n\n"
    {"o", "r"},   // 267 or
    {" w", "or"}, // 268 " wor"
};
#define NBPE ((int)(sizeof bpe_merges / sizeof bpe_merges[0]))

static int bpe_id(const char *s) {
  if (!strcmp(s, "<|endoftext|>")) return 0;
  if (strlen(s) == 1) return 1 + (unsigned char)s[0];
  for (int r = 0; r < NBPE; r++) {
    char m[64];
    snprintf(m, sizeof m, "%s%s", bpe_merges[r][0], bpe_merges[r][1]);
    if (!strcmp(s, m)) return 257 + r;
  }
  return -1;
}

static buf bpe_file(void) {
  buf b = {0};
  header(&b, 257 + NBPE, 0, RT_TOK_BPE, NBPE);
  piece(&b, "<|endoftext|>", 13);
  for (int i = 0; i < 256; i++) {
    char c = (char)i;
    piece(&b, &c, 1);
  }
  for (int r = 0; r < NBPE; r++) {
    char m[64];
    snprintf(m, sizeof m, "%s%s", bpe_merges[r][0], bpe_merges[r][1]);
    piece(&b, m, strlen(m));
  }
  for (int r = 0; r < NBPE; r++) {
    put32(&b, bpe_id(bpe_merges[r][0]));
    put32(&b, bpe_id(bpe_merges[r][1]));
    put32(&b, 257 + r);
  }
  return b;
}

static void write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
    printf("cannot write %s\n", path);
    exit(2);
  }
}

// ---- helpers ---------------------------------------------------------------------------------

// The bytes of ids[0 .. n) into out (NUL-terminated); their count, -1 for an id with no piece.
static long decode(const rt_tokenizer *t, const int32_t *ids, long n, char *out, size_t cap) {
  size_t at = 0;
  for (long i = 0; i < n; i++) {
    size_t len;
    const char *p = rt_tok_piece(t, ids[i], &len);
    if (!p || at + len >= cap) return -1;
    memcpy(out + at, p, len);
    at += len;
  }
  out[at] = '\0';
  return (long)at;
}

static void ids_str(const int32_t *ids, long n, char *out, size_t cap) {
  size_t at = 0;
  out[0] = '\0';
  for (long i = 0; i < n && at < cap; i++)
    at += (size_t)snprintf(out + at, cap - at, "%s%d", i ? " " : "", ids[i]);
}

// ---- 1: bytes ---------------------------------------------------------------------------------

static void test_bytes(const char *tmpdir) {
  char path[4096], err[512] = "";
  snprintf(path, sizeof path, "%s/tok_bytes.bin", tmpdir);
  buf b = bytes_file();
  write_file(path, b.p, b.n);
  rt_tokenizer t;
  if (!check(rt_tok_load(&t, path, err, sizeof err) == 0, "bytes: load: %s", err)) return;
  check(t.kind == RT_TOK_BYTES && t.vocab == 256 && t.eot == 0, "bytes: kind %d vocab %d eot %d",
        t.kind, t.vocab, t.eot);
  size_t len;
  const char *p = rt_tok_piece(&t, 'A', &len);
  check(p && len == 1 && *p == 'A', "bytes: token 65 is 'A'");
  check(!rt_tok_piece(&t, 256, &len) && len == 0, "bytes: no token 256");
  check(!rt_tok_piece(&t, -1, &len), "bytes: no token -1");
  const char *text = "Hello, w\xc3\xb6rld!\n\tIt's 2024.";
  int32_t ids[64];
  long n = rt_tok_encode(&t, text, ids, 64, err, sizeof err);
  check(n == (long)strlen(text), "bytes: encode gives %ld ids for %zu bytes (%s)", n,
        strlen(text), n < 0 ? err : "");
  bool same = n > 0;
  for (long i = 0; i < n; i++) same &= ids[i] == (unsigned char)text[i];
  check(same, "bytes: each id is its byte");
  char back[128];
  check(decode(&t, ids, n, back, sizeof back) == n && !strcmp(back, text),
        "bytes: decode(encode(text)) is the text");
  check(rt_tok_encode(&t, text, ids, 5, err, sizeof err) == -1 && strstr(err, "more than 5"),
        "bytes: a text longer than cap is refused: %s", err);
  rt_tok_free(&t);
  free(b.p);
}

// ---- 2: BPE -----------------------------------------------------------------------------------

static void expect_encode(const rt_tokenizer *t, const char *text, const char *const *want) {
  int32_t ids[64], expect[64];
  long nw = 0;
  for (; want[nw]; nw++) expect[nw] = bpe_id(want[nw]);
  char err[512] = "", got[512], exp[512];
  long n = rt_tok_encode(t, text, ids, 64, err, sizeof err);
  ids_str(ids, n, got, sizeof got);
  ids_str(expect, nw, exp, sizeof exp);
  check(n == nw && !memcmp(ids, expect, (size_t)nw * sizeof *ids),
        "bpe: encode \"%s\": %s (%s), expected %s", text, n < 0 ? "error" : got, err, exp);
  char back[256];
  check(n < 0 || (decode(t, ids, n, back, sizeof back) >= 0 && !strcmp(back, text)),
        "bpe: \"%s\" decodes back", text);
}

#define E(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_bpe(void) {
  buf b = bpe_file();
  rt_tokenizer t;
  char err[512] = "";
  if (!check(rt_tok_parse(&t, b.p, b.n, "bpe.bin", err, sizeof err) == 0, "bpe: parse: %s", err))
    return;
  check(t.nmerges == NBPE && t.vocab == 257 + NBPE, "bpe: %d merges, vocabulary %d", t.nmerges,
        t.vocab);
  expect_encode(&t, "hello", E("hello"));                   // he, ll, hell, hello in turn
  expect_encode(&t, "hello world", E("hello", " wor", "l", "d"));
  expect_encode(&t, "a  b", E("a", " ", " ", "b"));          // "  " never merges: " " + " b"
  expect_encode(&t, "a  ", E("a", "  "));                    // trailing spaces are one pre-token
  expect_encode(&t, "x\n\n", E("x", "\n\n"));
  expect_encode(&t, "x\n\ny", E("x", "\n", "\n", "y"));      // \s+(?!\S) leaves the last
  expect_encode(&t, "it's", E("i", "t", "'s"));              // 's is a pre-token of its own
  expect_encode(&t, "aaa", E("aa", "a"));                    // the leftmost pair first
  expect_encode(&t, "aaaa", E("aa", "aa"));
  expect_encode(&t, "hi<|endoftext|>hello", E("h", "i", "<|endoftext|>", "hello"));
  expect_encode(&t, "<|endoftext|><|endoftext|>", E("<|endoftext|>", "<|endoftext|>"));
  expect_encode(&t, "  hello", E(" ", " ", "hello"));       // " " + " hello": no merge has " h"
  expect_encode(&t, "42!? ok", E("4", "2", "!", "?", " ", "o", "k"));
  int32_t ids[64];
  check(rt_tok_encode(&t, "", ids, 64, err, sizeof err) == 0, "bpe: the empty text is no ids");
  check(rt_tok_encode(&t, "h\xc3\xa9llo", ids, 64, err, sizeof err) == -1 &&
            strstr(err, "not ASCII") && strstr(err, "prep_text.py encode"),
        "bpe: non-ASCII text is refused, naming prep_text.py encode: %s", err);
  check(rt_tok_encode(&t, "hello world", ids, 3, err, sizeof err) == -1 &&
            strstr(err, "more than 3 tokens"),
        "bpe: a text longer than cap is refused: %s", err);
  rt_tok_free(&t);

  // a BPE without a token for 'z' (its piece made a second 'y')
  buf noz = {0};
  put(&noz, b.p, b.n);
  noz.p[RT_TOK_HEADER_BYTES + 14 + 2 * 'z' + 1] = 'y';
  if (check(rt_tok_parse(&t, noz.p, noz.n, "noz.bin", err, sizeof err) == 0, "no z: parse: %s",
            err)) {
    check(rt_tok_encode(&t, "a<|endoftext|>z", ids, 64, err, sizeof err) == -1 &&
              strstr(err, "no token for the byte 0x7a (at byte 14 of the text)"),
          "bpe: a byte without a token is refused: %s", err);
    rt_tok_free(&t);
  }
  free(noz.p);

  // llm.c's file: the same pieces, kind 0 and no merges, decodes but does not encode
  set32(&b, 16, RT_TOK_LLMC);
  set32(&b, 20, 0);
  b.n -= 12 * (size_t)NBPE;
  if (check(rt_tok_parse(&t, b.p, b.n, "llmc.bin", err, sizeof err) == 0, "llm.c: parse: %s",
            err)) {
    size_t len;
    const char *p = rt_tok_piece(&t, 260, &len);
    check(p && len == 5 && !memcmp(p, "hello", 5), "llm.c: token 260 is hello");
    check(rt_tok_encode(&t, "hello", ids, 64, err, sizeof err) == -1 && strstr(err, "no merges"),
          "llm.c: encoding is refused: %s", err);
    rt_tok_free(&t);
  }
  free(b.p);
}

// ---- 3: broken files --------------------------------------------------------------------------

typedef struct {
  const char *what;
  void (*spoil)(buf *b);  // applied to a copy of bpe_file()
  const char *message;    // a part of the error
} broken;

static void short_header(buf *b) { b->n = 1000; }
static void bad_magic(buf *b) { set32(b, 0, 20240520); }
static void bad_version(buf *b) { set32(b, 4, 3); }
static void no_vocab(buf *b) { set32(b, 8, 0); }
static void huge_vocab(buf *b) { set32(b, 8, 70000); }
static void bad_eot(buf *b) { set32(b, 12, 269); }
static void bad_kind(buf *b) { set32(b, 16, 7); }
static void merges_on_bytes(buf *b) { set32(b, 16, RT_TOK_BYTES); }
static void negative_merges(buf *b) { set32(b, 20, -1); }
static void cut_in_pieces(buf *b) { b->n = RT_TOK_HEADER_BYTES + 100; }
static void cut_in_piece(buf *b) { b->n = RT_TOK_HEADER_BYTES + 5; }
static void empty_piece(buf *b) { b->p[RT_TOK_HEADER_BYTES + 14] = 0; }  // token 1's length
static void cut_in_merges(buf *b) { b->n -= 7; }
static void trailing(buf *b) { put32(b, 0); }
static void more_merges(buf *b) { set32(b, 20, NBPE + 1); }
static void merge_outside(buf *b) { set32(b, b->n - 12, 5000); }
static void merge_wrong(buf *b) { set32(b, b->n - 4, 260); }  // " wor" said to be "hello"
static void merge_twice(buf *b) {
  memcpy(b->p + b->n - 12, b->p + b->n - 24, 12);  // the last merge is the one before again
}
static void long_length(buf *b) { b->p[b->n - 12 * NBPE - 5] = 200; }  // the last piece's

static const broken broken_files[] = {
    {"shorter than the header", short_header, "less than the 1024-byte header"},
    {"a shard's magic", bad_magic, "is not a tokenizer file: magic number 20240520"},
    {"version 3", bad_version, "unsupported tokenizer file version 3"},
    {"no tokens", no_vocab, "a vocabulary of 0 tokens"},
    {"70000 tokens", huge_vocab, "a vocabulary of 70000 tokens, expected 1 to 65536"},
    {"end of text past the vocabulary", bad_eot, "end-of-text token 269, outside"},
    {"kind 7", bad_kind, "unknown tokenizer kind 7"},
    {"merges for bytes", merges_on_bytes, "12 merges for a tokenizer of kind 1"},
    {"-1 merges", negative_merges, "-1 merges"},
    {"cut among the pieces", cut_in_pieces, "is truncated: it ends before token"},
    {"cut inside a piece", cut_in_piece, "is truncated: token 0's 13 bytes run past its end"},
    {"a piece of no bytes", empty_piece, "token 1 has no bytes"},
    {"cut in the merges", cut_in_merges, "is truncated: the header says 12 merges"},
    {"bytes after the merges", trailing, "is corrupt: the header says 12 merges"},
    {"more merges than the file has", more_merges, "is truncated: the header says 13 merges"},
    {"a merge of token 5000", merge_outside, "merge 11 names token 5000, outside"},
    {"a merge that makes the wrong token", merge_wrong, "merge 11 makes token 260, whose bytes"},
    {"a merge twice", merge_twice, "merge 11 (tokens 112 and 115) repeats an earlier one"},
    {"a piece's length past the end", long_length, "is truncated"},
};

static void test_broken(const char *tmpdir) {
  char err[512];
  rt_tokenizer t;
  buf good = bpe_file();
  for (size_t i = 0; i < sizeof broken_files / sizeof broken_files[0]; i++) {
    const broken *c = &broken_files[i];
    buf b = {0};
    put(&b, good.p, good.n);
    c->spoil(&b);
    err[0] = '\0';
    int rc = rt_tok_parse(&t, b.p, b.n, "tok.bin", err, sizeof err);
    check(rc != 0 && strstr(err, c->message) && strstr(err, "tok.bin"),
          "broken file (%s): %s; expected an error with \"%s\"", c->what,
          rc ? err : "it loaded", c->message);
    if (!rc) rt_tok_free(&t);
    free(b.p);
  }
  // a bytes file whose token 65 is not 'A'
  buf b = bytes_file();
  b.p[RT_TOK_HEADER_BYTES + 2 * 65 + 1] = 'B';
  check(rt_tok_parse(&t, b.p, b.n, "b.bin", err, sizeof err) && strstr(err, "token 65 of a bytes "
        "tokenizer is not the byte 65"), "bytes file with a wrong token: %s", err);
  set32(&b, 8, 255);
  check(rt_tok_parse(&t, b.p, b.n, "b.bin", err, sizeof err) && strstr(err, "a bytes tokenizer "
        "of 255 tokens"), "bytes file of 255 tokens: %s", err);
  free(b.p);

  // files: missing, truncated on disk
  char path[4096];
  snprintf(path, sizeof path, "%s/no_such_tokenizer.bin", tmpdir);
  check(rt_tok_load(&t, path, err, sizeof err) && strstr(err, "cannot open tokenizer file") &&
        strstr(err, path), "a missing file: %s", err);
  snprintf(path, sizeof path, "%s/tok_cut.bin", tmpdir);
  write_file(path, good.p, good.n - 1);
  check(rt_tok_load(&t, path, err, sizeof err) && strstr(err, "is truncated") &&
        strstr(err, path), "a truncated file on disk: %s", err);

  // every truncation fails with a message
  int quiet = 0;
  for (size_t n = 0; n < good.n; n++) {
    err[0] = '\0';
    if (rt_tok_parse(&t, good.p, n, "cut.bin", err, sizeof err) == 0 || !err[0]) {
      quiet++;
      rt_tok_free(&t);
    }
  }
  check(quiet == 0, "%d truncations loaded or failed without a message", quiet);

  // mutations: load and round trip, or fail with a message
  rt_rng r;
  rt_rng_seed(&r, 11);
  int bad = 0, loaded = 0;
  const char *text = "hello world, it's  a\n\ntest<|endoftext|>aaa 42";
  for (int i = 0; i < 2000; i++) {
    buf m = {0};
    put(&m, good.p, good.n);
    for (int k = 0, flips = 1 + (int)rt_rng_below(&r, 4); k < flips; k++) {
      size_t at = rt_rng_below(&r, 4) ? RT_TOK_HEADER_BYTES + rt_rng_below(&r, m.n - 1024)
                                      : rt_rng_below(&r, 24);
      m.p[at] = (uint8_t)rt_rng_below(&r, 256);
    }
    if (rt_rng_below(&r, 4) == 0) m.n = rt_rng_below(&r, m.n);
    err[0] = '\0';
    if (rt_tok_parse(&t, m.p, m.n, "mut.bin", err, sizeof err)) {
      bad += !err[0];
    } else {
      loaded++;
      int32_t ids[128];
      char back[256];
      long n = rt_tok_encode(&t, text, ids, 128, err, sizeof err);
      if (n >= 0 && (decode(&t, ids, n, back, sizeof back) < 0 || strcmp(back, text))) bad++;
      if (n < 0 && !err[0]) bad++;
      rt_tok_free(&t);
    }
    free(m.p);
  }
  check(bad == 0, "mutations: %d of 2000 broke the round trip or failed silently (%d loaded)",
        bad, loaded);
  free(good.p);
}

// ---- the command-line modes --------------------------------------------------------------------

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16;
  uint8_t *p = malloc(cap);
  *n = 0;
  for (size_t got; p && (got = fread(p + *n, 1, cap - *n, f)) > 0;) {
    *n += got;
    if (*n == cap) p = realloc(p, cap *= 2);
  }
  fclose(f);
  return p;
}

static int load_or_die(rt_tokenizer *t, const char *path) {
  char err[1024];
  if (rt_tok_load(t, path, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
  return 0;
}

static int cli(int argc, char **argv) {
  rt_tokenizer t;
  if (!strcmp(argv[1], "--check") && argc == 3) {
    load_or_die(&t, argv[2]);
    printf("kind %d vocab %d eot %d merges %d\n", t.kind, t.vocab, t.eot, t.nmerges);
  } else if (!strcmp(argv[1], "--decode") && argc >= 4) {
    load_or_die(&t, argv[2]);
    for (int i = 3; i < argc; i++) {
      size_t n;
      uint8_t *data = slurp(argv[i], &n);
      rt_shard s;
      char err[1024];
      if (!data || rt_shard_parse(&s, data, n, 0, t.vocab, argv[i], err, sizeof err)) {
        fprintf(stderr, "%s\n", data ? err : "cannot read the shard");
        return 1;
      }
      for (long k = 0; k < s.ntok; k++) {
        size_t len;
        const char *p = rt_tok_piece(&t, (int)rt_shard_token(&s, k), &len);
        fwrite(p, 1, len, stdout);
      }
      free(data);
    }
  } else if (!strcmp(argv[1], "--encode") && argc == 4) {
    load_or_die(&t, argv[2]);
    size_t n;
    uint8_t *data = slurp(argv[3], &n);
    if (!data) return fprintf(stderr, "cannot read %s\n", argv[3]), 1;
    data = realloc(data, n + 1);
    data[n] = '\0';
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    for (size_t at = 0; at <= n; at += strlen((char *)data + at) + 1) {
      char err[1024];
      long k = rt_tok_encode(&t, (char *)data + at, ids, (long)n + 1, err, sizeof err);
      if (k < 0) return fprintf(stderr, "%s\n", err), 1;
      for (long i = 0; i < k; i++) printf("%s%d", i ? " " : "", ids[i]);
      putchar('\n');
    }
    free(ids);
    free(data);
  } else {
    fprintf(stderr, "usage: test_tokenizer TMPDIR | --check TOK | --decode TOK SHARD... | "
            "--encode TOK FILE\n");
    return 2;
  }
  rt_tok_free(&t);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && argv[1][0] == '-') return cli(argc, argv);
  if (argc != 2) {
    fprintf(stderr, "usage: test_tokenizer TMPDIR\n");
    return 2;
  }
  test_bytes(argv[1]);
  test_bpe();
  test_broken(argv[1]);
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
