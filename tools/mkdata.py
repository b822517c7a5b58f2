#!/usr/bin/env python3
"""mkdata.py -- make token data files for nnsc-aot rank programs.

Writes the llm.c token-file layout that rtlib/io/data.c reads: a header of 256
little-endian int32 (magic 20240520, version 1, token count N, zeros), then
N little-endian uint16 tokens.  Tokens are bytes (vocabulary 256): byte-level
tokenisation needs no vocabulary file and fits any model with V >= 256.

    tools/mkdata.py TEXT OUT_PREFIX [--val-fraction F] [--max-bytes N]

writes OUT_PREFIX_train.bin (the first 1 - F of the text) and
OUT_PREFIX_val.bin (the rest), e.g.

    tools/mkdata.py /usr/share/common-licenses/GPL-3 data/tinytext

Python 3 standard library only.
"""
import argparse
import struct
import sys

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256


def write_tokens(path, tokens):
    """Write tokens (ints in [0, 65536)) as one token file."""
    header = [0] * HEADER_INTS
    header[0], header[1], header[2] = MAGIC, VERSION, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<%di" % HEADER_INTS, *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def main():
    ap = argparse.ArgumentParser(description="Write byte-level token files (llm.c layout).")
    ap.add_argument("text", help="input text file (read as bytes)")
    ap.add_argument("prefix", help="output prefix: PREFIX_train.bin and PREFIX_val.bin")
    ap.add_argument("--val-fraction", type=float, default=0.1,
                    help="fraction of the text, at the end, for validation (default 0.1)")
    ap.add_argument("--max-bytes", type=int, default=0,
                    help="use only the first N bytes of the text (0: all)")
    args = ap.parse_args()
    if not 0.0 < args.val_fraction < 1.0:
        sys.exit("mkdata.py: --val-fraction must be in (0, 1)")
    try:
        with open(args.text, "rb") as f:
            data = f.read()
    except OSError as e:
        sys.exit("mkdata.py: %s: %s" % (args.text, e.strerror))
    if args.max_bytes > 0:
        data = data[:args.max_bytes]
    split = int(len(data) * (1.0 - args.val_fraction))
    train, val = list(data[:split]), list(data[split:])
    if len(train) < 2 or len(val) < 2:
        sys.exit("mkdata.py: %s is too short to split (%d bytes)" % (args.text, len(data)))
    for name, toks in (("train", train), ("val", val)):
        path = "%s_%s.bin" % (args.prefix, name)
        try:
            write_tokens(path, toks)
        except OSError as e:
            sys.exit("mkdata.py: %s: %s" % (path, e.strerror))
        print("%s: %d tokens" % (path, len(toks)))


if __name__ == "__main__":
    main()
