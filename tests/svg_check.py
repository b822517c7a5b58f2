#!/usr/bin/env python3
"""tests/svg_check.py -- check an out/plan.svg (codegen/svg.c), for tests/plan.sh
and tests/pipeline.sh:

    svg_check.py [--pipeline | --no-pipeline] [--text S]... [--max-bytes N] FILE...

Each FILE must parse as XML (an <svg> whose width and height are its
viewBox's), hold the groups title, mesh, memory, ops and comm (and timeline
exactly when --pipeline; --no-pipeline: none), and keep every text and
rect inside the viewBox, a text's width estimated as svg.c does (0.62 em
per character, a non-ASCII one counted twice; monospace).  rsvg-convert
must render it to PNG, and the rendered right-most and bottom-most 4 px
(the picture's edge) must be blank: nothing drawn runs into the border.
--text S: some text element reads S (after XML unescaping) and, when S
holds <, & or >, the file holds no raw S (it was escaped).
Prints what is wrong and exits 1; exits 0 when all is well."""
import re
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib

NS = "{http://www.w3.org/2000/svg}"
EM = 0.62


def glyphs(s):
    return sum(1 if ord(c) < 128 else 2 for c in s)


def png_pixels(data):
    """(width, height, rows of RGBA/RGB bytes) of an 8-bit, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, inter = ihdr
    assert depth == 8 and ctype in (2, 6) and inter == 0, ihdr
    bpp = 4 if ctype == 6 else 3
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def blank_edge(path, text, box, tmp):
    """The rendered strip box (x, y, w, h) of the picture is all white."""
    head = re.sub(r'width="\d+" height="\d+" viewBox="[^"]*"',
                  'width="%d" height="%d" viewBox="%g %g %g %g"' % (box[2], box[3], *box), text, count=1)
    svg, png = tmp + "/strip.svg", tmp + "/strip.png"
    open(svg, "w").write(head)
    subprocess.run(["rsvg-convert", svg, "-o", png], check=True)
    w, h, bpp, rows = png_pixels(open(png, "rb").read())
    for y, r in enumerate(rows):
        for x in range(w):
            px = r[x * bpp:x * bpp + 3]
            if min(px) < 250:
                return "ink at (%d, %d) of the strip %s: %s" % (x, y, box, tuple(px))
    return None


def check(path, pipeline, texts, max_bytes, tmp):
    bad = []
    raw = open(path, "rb").read()
    if max_bytes and len(raw) > max_bytes:
        bad.append("%d bytes, more than %d" % (len(raw), max_bytes))
    root = ET.fromstring(raw)
    if root.tag != NS + "svg":
        return bad + ["root is %s" % root.tag]
    x0, y0, W, H = (float(v) for v in root.get("viewBox").split())
    if float(root.get("width")) != W or float(root.get("height")) != H:
        bad.append("width/height %s x %s differ from the viewBox" % (root.get("width"), root.get("height")))
    ids = {g.get("id") for g in root.iter(NS + "g") if g.get("id")}
    want = {"title", "mesh", "memory", "ops", "comm"} | ({"timeline"} if pipeline else set())
    if want - ids:
        bad.append("missing groups %s" % sorted(want - ids))
    if pipeline is False and "timeline" in ids:
        bad.append("a timeline without a pipeline")
    size0 = float(root.get("font-size", 12))
    alltext = []
    for t in root.iter(NS + "text"):
        s = "".join(t.itertext())
        alltext.append(s)
        size = float(t.get("font-size", size0))
        x, y, w = float(t.get("x")), float(t.get("y")), glyphs(s) * EM * size
        a = t.get("text-anchor", "start")
        left = x - w / 2 if a == "middle" else x - w if a == "end" else x
        if left < x0 or left + w > x0 + W or y - size < y0 or y + 0.3 * size > y0 + H:
            bad.append("text %r at x %.1f .. %.1f, y %.1f runs past the viewBox %s" %
                       (s[:60], left, left + w, y, root.get("viewBox")))
    for r in root.iter(NS + "rect"):
        x, y = float(r.get("x", 0)), float(r.get("y", 0))
        w, h = float(r.get("width")), float(r.get("height"))
        if x < x0 - 0.01 or y < y0 - 0.01 or x + w > x0 + W + 0.01 or y + h > y0 + H + 0.01:
            bad.append("rect at %g,%g (%g x %g) past the viewBox" % (x, y, w, h))
    for s in texts:
        if not any(s in a for a in alltext):
            bad.append("no text reads %r" % s)
        if re.search("[<&>]", s) and s.encode() in raw:
            bad.append("%r is in the file unescaped" % s)
    r = subprocess.run(["rsvg-convert", path, "-o", tmp + "/full.png"], capture_output=True, text=True)
    if r.returncode != 0:
        bad.append("rsvg-convert: exit %d: %s" % (r.returncode, r.stderr.strip()[:300]))
    else:
        text = raw.decode()
        for box in ((x0 + W - 4, y0, 4, H), (x0, y0 + H - 4, W, 4)):
            e = blank_edge(path, text, box, tmp)
            if e:
                bad.append(e)
    return bad


def main(argv):
    pipeline, texts, files, max_bytes = None, [], [], 0
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--pipeline":
            pipeline = True
        elif a == "--no-pipeline":
            pipeline = False
        elif a == "--text":
            i += 1
            texts.append(argv[i])
        elif a == "--max-bytes":
            i += 1
            max_bytes = int(argv[i])
        else:
            files.append(a)
        i += 1
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            try:
                bad = check(f, pipeline, texts, max_bytes, tmp)
            except (OSError, ET.ParseError, AssertionError, subprocess.CalledProcessError) as e:
                bad = ["%s: %s" % (type(e).__name__, e)]
            for b in bad[:10]:
                print("%s: %s" % (f, b))
            fails += bool(bad)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
