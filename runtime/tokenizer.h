// The tokenizer of a program's token shards (DIR/tokenizer.bin, which
// tools/prep_text.py writes beside them): the bytes of each token id, for
// printing what the model samples, and text to ids, for a prompt.
//
// The file is llm.c's tokenizer file (version 2, which llm.c's
// tokenizer_init reads as it is) with two header fields put to use and the
// BPE merges after the pieces:
//
//   header  256 x int32, little-endian (1024 bytes):
//             [0] magic 20240328        [1] version 2
//             [2] vocabulary size V, 1 to 65536 (token ids 0 .. V-1)
//             [3] the end-of-text id, -1 for none
//             [4] kind: 0 llm.c's file (decoding only), 1 bytes, 2 byte-level BPE
//             [5] merges M (0 unless kind 2)
//             [6..255] 0
//   pieces  V times, in id order: uint8 length n (1 to 255), then the n bytes
//           of the token (a special token's bytes are its text: <|endoftext|>)
//   merges  M times, in rank order (the first one merges first): int32
//           little-endian left, right, merged: token ids, merged's bytes
//           being left's followed by right's
//   and nothing after them.
//
// kind 1 (bytes) is 256 tokens, token b the byte b; its end of text is byte 0.
// kind 2 encodes as GPT-2 (and Hugging Face tokenizers' ByteLevel BPE) do.
#ifndef MTC_RT_TOKENIZER_H
#define MTC_RT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define RT_TOK_MAGIC 20240328
#define RT_TOK_VERSION 2
#define RT_TOK_HEADER_BYTES (256 * 4)
#define RT_TOK_MAX_VOCAB 65536             // the shards' tokens are uint16
#define RT_TOK_MAX_FILE (64 * 1024 * 1024)  // GPT-2's is 1 MiB

typedef enum {
  RT_TOK_LLMC = 0,   // llm.c's tokenizer file: pieces only, no encoding
  RT_TOK_BYTES = 1,  // one token per byte
  RT_TOK_BPE = 2,    // GPT-2's byte-level BPE
} rt_tok_kind;

typedef struct rt_tokenizer {
  rt_tok_kind kind;
  int vocab;           // token ids 0 .. vocab-1
  int eot;             // the end-of-text id, -1: none
  uint8_t *bytes;      // every piece, back to back
  uint32_t *start;     // (vocab + 1): piece i is bytes[start[i] .. start[i+1])
  int nmerges;
  int32_t *merges;     // (nmerges, 3): left, right, merged
  uint32_t *slots;     // hash table of (left, right) -> rank + 1 (0: empty)
  uint32_t nslots;     // a power of two, at least twice nmerges
  int byte_id[256];    // per byte, its one-byte token (-1: none)
} rt_tokenizer;

// Reads the tokenizer file at path into t; 0, or non-zero with a message in
// err that names the file and what is wrong with it (t is then empty: freeing
// it is allowed, not needed).
int rt_tok_load(rt_tokenizer *t, const char *path, char *err, size_t cap);

// The same from the file's bytes in memory (name is the file's, for messages).
int rt_tok_parse(rt_tokenizer *t, const uint8_t *data, size_t size, const char *name, char *err,
                 size_t cap);

// The bytes of token id (not NUL-terminated) and their count in *len; NULL
// (and *len 0) for an id outside the vocabulary.
const char *rt_tok_piece(const rt_tokenizer *t, int id, size_t *len);

// The ids of text (NUL-terminated) into out: its bytes (kind bytes), or
// GPT-2's byte-level BPE (kind BPE: the end-of-text token's text as that
// token, GPT-2's pre-tokenizer pattern, then merges lowest rank first) for
// ASCII text. No end-of-text id is added. The number of ids, or -1 with a
// message in err: more than cap of them, text this encoder cannot take
// (non-ASCII for BPE: tools/prep_text.py encode writes its ids), or a file
// that has no merges (llm.c's).
long rt_tok_encode(const rt_tokenizer *t, const char *text, int32_t *out, long cap, char *err,
                   size_t ecap);

void rt_tok_free(rt_tokenizer *t);

#endif
