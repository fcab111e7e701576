#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets: small, real, valid inputs of each parser.

    make_corpus.py [--gpufsd build/cli/gpufsd] [OUT]      (OUT: tests/fuzz/corpus)

mytar/    metadata.txt texts: subfolders, commas and spaces in class names, CRLF, a split
          folder in the dataset root
native_index/  indexes written by the real packer (`gpufsd pack`, with and without splits
          and alignment: version 2, with SHA-256 digests), by `gpufsd index` of a mytar
          folder, and one pack's index in version 1 (no digests), as older packers wrote;
          and a pack's index whose root names a parent beyond every node, which a listing
          of the root reads for its '..'
tar/      archives written by Python's tarfile: ustar, GNU and pax, long names and link
          targets, a tar of per-class tars, hard and symbolic links, a replaced entry, a
          base-256 size; and header by header: signed checksums, v7 folders, unknown types,
          a pax header before a global one, a file replaced by a symbolic link, pax sparse
zip/      archives written by Python's zipfile: stored and deflated members, folders, a
          comment, zip64 records and extra fields, data descriptors (written to a stream),
          a symbolic link, a replaced member, an empty archive
control/  request lines of the control protocol (fs/control.h)
s3_response/  what S3 stores answer: ListObjectsV2 pages (plain and url-encoded keys,
          entities, truncated), error documents, Content-Range values
aws_config/  ~/.aws/config and ~/.aws/credentials texts: profiles, nested s3 settings,
          comments, CRLF
decode_plan/  plan files (dataset/compressed/plan_file.h) built here byte by byte: a zip's
          plan (runs served as stored, a run of a deflated and a stored member) beside a
          gzip's of two members, and a gzip's with an access point inside a byte and its
          window; checksums left zero, which the fuzz target makes right
gzip/     gzip streams (a tar's bytes, partly random so that the span's points are block
          boundaries): one member, members back to back (one empty), a header with every
          optional field (FEXTRA, FNAME, FCOMMENT, FHCRC), full flushes, stored blocks, small
          blocks, zero padding after the last member

The output is deterministic, so regenerating it changes nothing unless a format does.
Files are named for what they hold; libFuzzer reads every file of a corpus folder.
"""
import argparse
import io
import os
import random
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import warnings
import zipfile
import zlib

MYTAR_TEXTS = {
    "subfolders.txt": (
        "2\ncat\ndog\n"
        "filegroup-0.mytar,2\n0,dog,0,10,/data/train/dog/d1.jpg\n1,cat,10,5,/data/train/cat/sub/c1.jpg\n"
        "filegroup-1.mytar,2\n0,cat,0,7,/data/train/cat/c2.jpg\n1,dog,7,3,/data/train/dog/d2.jpg\n"),
    "commas.txt": (
        "3\na\na,b\nc d\n"
        "filegroup-0.mytar,3\n0,a,b,0,1,/r/a,b/x,1.jpg\n1,a,1,1,/r/a/y.jpg\n"
        "2,c d,2,4,/r/c d/with space é.jpg\n"),
    "crlf.txt": (
        "1\r\ncat\r\nfilegroup-0.mytar,2\r\n0,cat,0,1,/d/cat/cat/a.jpg\r\n"
        "1,cat,1,1,/d/cat/cat/b.jpg\r\n\r\n"),
    "relative.txt": "1\ncat\nfilegroup-0.mytar,2\n0,cat,0,1,cat/a.jpg\n1,cat,1,1,cat//b.jpg\n",
    "split_root.txt": (
        "2\nn01440764\nn02102040\n"
        "filegroup-0.mytar,2\n0,n02102040,0,2048,/imagenet/train/n02102040/n02102040_7.JPEG\n"
        "1,n01440764,2048,1500,/imagenet/train/n01440764/sub/inner/n01440764_3.JPEG\n"
        "filegroup-1.mytar,1\n0,n01440764,0,99,/imagenet/train/n01440764/-leading-dash.JPEG\n"),
}

CONTROL_REQUESTS = {
    "stats.json": '{"op":"stats"}\n',
    "residency.json": '{"op":"residency"}\n',
    "residency_class.json": '{"op":"residency","path":"a","list":"all","by":"class"}\n',
    "residency_group.json": '{"op":"residency","path":"/b b/","list":"kernel","by":"group"}\n',
    "residency_file.json": '{"op":"residency","path":"c,d/v,1.jpg","list":"all","by":"none"}\n',
    "bad_list.json": '{"op":"residency","list":"some"}\n',
    "bad_type.json": '{"op":"residency","path":7}\n',
    "unknown_op.json": '{"op":"mount"}\n',
}


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def make_tree(root, classes, per_class, splits=()):
    """An ImageFolder tree of tiny files (their bytes do not matter to an index)."""
    for split in splits or [""]:
        for c, cls in enumerate(classes):
            for i in range(per_class):
                name = f"{cls}_{i}.jpg" if i != 1 else f"sub/{cls} {i}.jpg"
                path = os.path.join(root, split, cls, name)
                write(path, f"{split}{cls}{i}" * (c + i + 1))


def gpufsd(binary, *args):
    result = subprocess.run([binary, *args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"make_corpus: gpufsd {' '.join(args)} failed:\n{result.stderr}")


def make_native(binary, work, out):
    packs = {
        "pack_classes.gpufs": ([], ["--group-size", "2"]),
        "pack_splits.gpufs": (["train", "val"], ["--group-size", "3", "--splits", "yes"]),
        "pack_aligned.gpufs": ([], ["--align", "4096", "--order", "class"]),
    }
    for name, (splits, options) in packs.items():
        tree = os.path.join(work, name + ".tree")
        make_tree(tree, ["a", "b,c", "d e"], 3, splits)
        dest = os.path.join(work, name + ".out")
        gpufsd(binary, "pack", tree, dest, "--seed", "1", *options)
        shutil.copyfile(os.path.join(dest, "index.gpufs"), os.path.join(out, name))
    mytar = os.path.join(work, "mytar")
    text = MYTAR_TEXTS["subfolders.txt"]
    write(os.path.join(mytar, "metadata.txt"), text)
    write(os.path.join(mytar, "filegroup-0.mytar"), b"D" * 10 + b"C" * 5)
    write(os.path.join(mytar, "filegroup-1.mytar"), b"c" * 7 + b"d" * 3)
    os.utime(os.path.join(mytar, "metadata.txt"), (1700000000, 1700000000))
    gpufsd(binary, "index", mytar)
    shutil.copyfile(os.path.join(mytar, "index.gpufs"), os.path.join(out, "index_of_mytar.gpufs"))
    with open(os.path.join(out, "pack_classes.gpufs"), "rb") as f:
        beyond = with_root_parent(f.read(), 0x7FFFFFFF)
    write(os.path.join(out, "root_parent_beyond.gpufs"), beyond)


def with_root_parent(index, parent):
    """`index` with its root's parent (the first u32 of the first folder record; the folders'
    section is the fifth of the header's {u64 offset, u64 count} pairs, from byte 56) set
    to `parent`. Its checksums are left stale: the fuzz target makes them right."""
    data = bytearray(index)
    (dirs_at,) = struct.unpack_from("<Q", data, 56 + 16 * 4)
    struct.pack_into("<I", data, dirs_at, parent)
    return bytes(data)


def tar_bytes(fmt, add_entries, pax_headers=None):
    """An archive without tarfile's padding to 10 KiB records: the end marker ends it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt, pax_headers=pax_headers) as tar:
        add_entries(tar)
    return buffer.getvalue()[:tar.offset]


def add_file(tar, name, data, kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.mtime = 1700000000
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def wrapped_tree(tar):
    folder = tarfile.TarInfo("dataset/train")
    folder.type = tarfile.DIRTYPE
    tar.addfile(folder)
    for split in ("train", "val"):
        for cls in ("cat", "dog"):
            add_file(tar, f"dataset/{split}/{cls}/{cls}_0.jpg", cls.encode() * 3)
    add_file(tar, "dataset/labels.csv", b"cat,dog\n")


def long_names(tar):
    add_file(tar, "cls/" + "x" * 150 + ".jpg", b"long")
    add_file(tar, "cls/" + "y" * 60 + "/" + "z" * 60 + ".jpg", b"prefixed")


def links(tar):
    add_file(tar, "cls/a.jpg", b"first")
    add_file(tar, "cls/b.jpg", b"bbbb")
    add_file(tar, "cls/a.jpg", b"replaced")
    add_file(tar, "cls/hard.jpg", b"", tarfile.LNKTYPE, "cls/b.jpg")
    add_file(tar, "cls/soft.jpg", b"", tarfile.SYMTYPE, "b.jpg")
    add_file(tar, "./other/c.jpg", b"c")


def nested(tar):
    for cls in ("n01", "n02"):
        inner = tar_bytes(tarfile.USTAR_FORMAT,
                          lambda t: [add_file(t, f"{cls}_{i}.JPEG", b"%d" % i) for i in range(2)])
        add_file(tar, cls + ".tar", inner)


def with_base256_size(archive):
    """The first header's size field rewritten in GNU base-256, the checksum redone."""
    block = bytearray(archive[:512])
    size = int(block[124:136].rstrip(b"\0 ") or b"0", 8)
    block[124:136] = b"\x80" + size.to_bytes(11, "big")
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block) + archive[512:]


def long_links(tar):
    target = "cls/" + "t" * 96
    add_file(tar, target[:100], b"namesake of the first 100 bytes")
    add_file(tar, target + "-target.jpg", b"target")
    add_file(tar, "cls/link.jpg", b"", tarfile.LNKTYPE, target + "-target.jpg")


def header(name, typeflag=b"0", size=0, linkname=b"", signed=False):
    """A ustar header block with a correct checksum, as unsigned or (old writers) signed sum."""
    block = bytearray(512)
    block[0:len(name)] = name
    block[100:108] = b"0000644\0"
    block[108:124] = b"0000000\0" * 2
    block[124:136] = b"%011o\0" % size
    block[136:148] = b"00000000000\0"
    block[156:157] = typeflag
    block[157:157 + len(linkname)] = linkname
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    total = sum((b - 256 if b > 127 else b) for b in block) if signed else sum(block)
    block[148:156] = b"%06o\0 " % total
    return bytes(block)


def member(name, data=b"", typeflag=b"0", linkname=b"", signed=False):
    size = len(data)
    return header(name, typeflag, size, linkname, signed) + data.ljust((size + 511) // 512 * 512,
                                                                       b"\0")


def pax(records, typeflag=b"x"):
    text = b""
    for key, value in records:
        body = b" %s=%s\n" % (key, value)
        length = len(body) + 1
        while len(b"%d" % length) + len(body) != length:
            length += 1
        text += b"%d%s" % (length, body)
    return member(b"PaxHeader", text, typeflag)


HEADER_BY_HEADER = {
    "signed_checksum.tar": member("cls/\u00e9t\u00e9.jpg".encode(), b"summer", signed=True)
    + member(b"cls/b.jpg", b"bee", signed=True),
    "v7_folders.tar": member(b"cls/", typeflag=b"\0") + member(b"cls/sub/", typeflag=b"0")
    + member(b"cls/sub/a.jpg", b"a", b"\0") + member(b"cls/x", b"gone") + member(b"cls/x/"),
    "unknown_types.tar": member(b"cls/z.jpg", b"zed", b"Z") + member(b"cls/n.jpg", b"n", b"N")
    + member(b"cls/d", b"Nname\0\0", b"D"),
    "x_then_g.tar": pax([(b"path", b"cls/" + b"p" * 120 + b".jpg"), (b"size", b"4")])
    + pax([(b"comment", b"global")], b"g") + member(b"cls/short.jpg", b"real"),
    "last_member_wins.tar": member(b"cls/a.jpg", b"gone")
    + member(b"cls/a.jpg", typeflag=b"2", linkname=b"t.jpg") + member(b"cls/t.jpg", b"t")
    + member(b"cls/s.jpg", typeflag=b"2", linkname=b"t.jpg")
    + member(b"cls/h.jpg", typeflag=b"1", linkname=b"cls/s.jpg")
    + member(b"cls/f.jpg", b"gone") + member(b"cls/f.jpg", typeflag=b"6"),
    "pax_sparse.tar": pax([(b"GNU.sparse.major", b"1"), (b"GNU.sparse.minor", b"0"),
                           (b"GNU.sparse.name", b"cls/holes.bin"),
                           (b"GNU.sparse.realsize", b"4096")])
    + member(b"cls/GNUSparseFile.0/holes.bin", b"1\n0\n1\n".ljust(512, b"\0") + b"d"),
}


def make_tars(out):
    archives = {
        "ustar_wrapped.tar": tar_bytes(tarfile.USTAR_FORMAT, wrapped_tree),
        "gnu_wrapped.tar": tar_bytes(tarfile.GNU_FORMAT, wrapped_tree),
        "pax_wrapped.tar": tar_bytes(tarfile.PAX_FORMAT, wrapped_tree),
        "gnu_long_names.tar": tar_bytes(tarfile.GNU_FORMAT, long_names),
        "pax_long_names.tar": tar_bytes(tarfile.PAX_FORMAT, long_names, {"comment": "global"}),
        "gnu_links.tar": tar_bytes(tarfile.GNU_FORMAT, links),
        "nested.tar": tar_bytes(tarfile.USTAR_FORMAT, nested),
        "gnu_long_links.tar": tar_bytes(tarfile.GNU_FORMAT, long_links),
        "pax_long_links.tar": tar_bytes(tarfile.PAX_FORMAT, long_links),
    }
    archives.update({name: data + bytes(1024) for name, data in HEADER_BY_HEADER.items()})
    archives["gnu_base256_size.tar"] = with_base256_size(archives["gnu_links.tar"])
    for name, data in archives.items():
        write(os.path.join(out, name), data)


class Stream(io.RawIOBase):
    """A file that cannot seek, so that zipfile writes data descriptors."""

    def __init__(self):
        super().__init__()
        self.data = bytearray()

    def writable(self):
        return True

    def write(self, b):
        self.data += b
        return len(b)


def zip_bytes(add_members, comment=b"", stream=False):
    out = Stream() if stream else io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.comment = comment
        add_members(z)
    return bytes(out.data if stream else out.getvalue())


def zip_member(z, name, data, stored=False, mode=0o100644, zip64=False):
    info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    info.external_attr = mode << 16
    if zip64:
        with z.open(info, "w", force_zip64=True) as f:
            f.write(data)
    else:
        z.writestr(info, data)


def zip_tree(z):
    zip_member(z, "cls/", b"", stored=True, mode=0o40755)
    zip_member(z, "cls/a.jpg", b"a" * 300)
    zip_member(z, "cls/b.jpg", b"bee", stored=True)
    zip_member(z, "./other/c.jpg", bytes(range(256)))


def zip_links(z):
    warnings.filterwarnings("ignore", "Duplicate name", UserWarning)  # duplicates wanted here
    zip_member(z, "cls/a.jpg", b"gone")
    zip_member(z, "cls/t.jpg", b"target", stored=True)
    zip_member(z, "cls/a.jpg", b"t.jpg", stored=True, mode=0o120777)
    zip_member(z, "cls/t.jpg", b"replaced")


def zip_wide(z):
    zip_member(z, "cls/a.jpg", b"wide" * 100, zip64=True)
    zip_member(z, "cls/b.jpg", b"b", stored=True, zip64=True)


def make_zips(out):
    archives = {
        "tree.zip": zip_bytes(zip_tree, b"a comment"),
        "links.zip": zip_bytes(zip_links),
        "zip64.zip": zip_bytes(zip_wide),
        "descriptors.zip": zip_bytes(zip_tree, stream=True),
        "empty.zip": zip_bytes(lambda z: None),
    }
    for name, data in archives.items():
        write(os.path.join(out, name), data)
def gzip_payload(size, seed):
    """A tar-like run of bytes: random stretches (as image data are) between names and
    copies of recent bytes, so that back-references cross the fuzz target's 1 KiB span."""
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < size:
        kind = rng.randrange(3)
        if kind == 0:
            out += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 600)))
        elif kind == 1:
            out += b"n01440764/n01440764_%d.JPEG\0" % rng.randrange(10000)
        elif len(out) > 100:
            start = len(out) - rng.randrange(1, min(len(out), 4000))
            for i in range(rng.randrange(3, 300)):
                out.append(out[start + i])
    return bytes(out[:size])


def gzip_member(data, level=6, flush_every=0, header=None, mem_level=8):
    """One member; `header` replaces zlib's ten bytes (the body is then raw deflate). A
    small `mem_level` makes small deflate blocks, so many block boundaries."""
    wbits = 31 if header is None else -15
    z = zlib.compressobj(level, zlib.DEFLATED, wbits, mem_level)
    step = flush_every or max(len(data), 1)
    body = b""
    for at in range(0, len(data), step):
        body += z.compress(data[at:at + step])
        if flush_every and at + step < len(data):
            body += z.flush(zlib.Z_FULL_FLUSH)
    body += z.flush()
    if header is None:
        return body
    trailer = struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return header + body + trailer


def full_header():
    """A header with FEXTRA, FNAME, FCOMMENT and its own CRC-16 (FHCRC)."""
    head = b"\x1f\x8b\x08\x1e" + bytes(4) + b"\x00\xff"
    extra = b"AB\x04\x00xyzw"
    head += struct.pack("<H", len(extra)) + extra + b"train.tar\0" + b"ImageNet, in part\0"
    return head + struct.pack("<H", zlib.crc32(head) & 0xFFFF)


def make_gzips(out):
    data = gzip_payload(12000, 1)
    streams = {
        "one_member.gz": gzip_member(data),
        "small_blocks.gz": gzip_member(data, mem_level=1),
        "members.gz": gzip_member(data[:3000]) + gzip_member(b"") + gzip_member(data[3000:], 9),
        "header_fields.gz": gzip_member(data[:6000], header=full_header()),
        "full_flush.gz": gzip_member(data, 6, flush_every=2500),
        "stored.gz": gzip_member(data[:5000], 0),
        "zero_padded.gz": gzip_member(data[:4000]) + bytes(512),
    }
    for name, stream in streams.items():
        write(os.path.join(out, name), stream)


S3_RESPONSES = {
    "list_truncated.xml": (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        "<Name>data</Name><Prefix>train/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>"
        "<IsTruncated>true</IsTruncated>"
        "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
        "<Contents><Key>train/a &amp; b.tar</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>"
        "<ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>1048576</Size>"
        "<StorageClass>STANDARD</StorageClass></Contents>"
        "<Contents><Key>train/c&lt;d.tar</Key><ETag>\"e2\"</ETag><Size>0</Size></Contents>"
        "</ListBucketResult>"),
    "list_last_page.xml": (
        "<ListBucketResult><Name>data</Name><IsTruncated>false</IsTruncated>"
        "<ContinuationToken>abc</ContinuationToken>"
        "<Contents><Key>k</Key><Size>5</Size><ETag>\"x-2\"</ETag></Contents></ListBucketResult>"),
    "list_url_encoded.xml": (
        "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
        "<Contents><Key>a+b%2Bc%2Fcaf%C3%A9</Key><Size>1</Size></Contents></ListBucketResult>"),
    "list_empty.xml": "<ListBucketResult><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>",
    "error_signature.xml": (
        '<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code>'
        "<Message>The request signature we calculated does not match the signature you "
        "provided.</Message><RequestId>tx0</RequestId><HostId>h</HostId></Error>"),
    "error_slowdown.xml": "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>",
    "error_no_bucket.xml": "<Error><Code>NoSuchBucket</Code><BucketName>b</BucketName></Error>",
    "range.txt": "bytes 0-1048575/4194304",
    "range_last.txt": "bytes 4194303-4194303/4194304",
}

AWS_CONFIGS = {
    "config.ini": (
        "[default]\nregion = us-east-1\n\n[profile test]\nregion = eu-west-1\n"
        "endpoint_url = http://127.0.0.1:7480\naws_access_key_id = AKTEST\n"
        "aws_secret_access_key = secret\n"),
    "nested.ini": (
        "# comment\n; comment\n[profile test]\ns3 =\n  addressing_style = path\n"
        "  endpoint_url = https://s3.example.com\nregion=ap-south-1\n"),
    "credentials.ini": (
        "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = s1\n"
        "[test]\naws_access_key_id=AKTEST\naws_secret_access_key=s2\naws_session_token=tok\n"),
    "crlf.ini": "[default]\r\naws_access_key_id = A\r\naws_secret_access_key = B\r\n",
}


PLAN_HEADER = "<8sIIQQQQqQQ"  # 72 bytes; plan_file.cc's PlanHeader
PLAN_RECORD = "<IB3xQQ8Q"  # 88 bytes: blob, kind, sizes, {offset, count} of four arrays
PLAN_RECIPE = "<QQQQB3xIII"  # DecodeRecipe, 48 bytes
PLAN_PART = "<QQQIHH"  # ZipPart, 32 bytes
PLAN_POINT = "<QQIBBH"  # GzipPoint, 24 bytes
NO_WINDOW = 0xFFFFFFFF


def plan_file(plans, index_checksum=0x0123456789ABCDEF, source=(6000, 1700000000123456789)):
    """The bytes of a plan file of `plans`, each (blob, kind, stored size, decoded size,
    recipes, parts, points, windows) with its arrays as tuples of their fields, in the
    order plan_file.cc writes them: header, records, then each plan's arrays. Both
    checksums are zero: the fuzz target computes them."""
    body = b""
    records = b""
    start = struct.calcsize(PLAN_HEADER) + len(plans) * struct.calcsize(PLAN_RECORD)
    for blob, kind, stored, decoded, recipes, parts, points, windows in plans:
        refs = []
        for layout, items in ((PLAN_RECIPE, recipes), (PLAN_PART, parts), (PLAN_POINT, points)):
            refs += [start + len(body), len(items)]
            body += b"".join(struct.pack(layout, *item) for item in items)
        refs += [start + len(body), len(windows)]
        body += windows
        records += struct.pack(PLAN_RECORD, blob, kind, stored, decoded, *refs)
    size = start + len(body)
    header = struct.pack(PLAN_HEADER, b"GPUFSPLN", 1, 72, size, 0, index_checksum, source[0],
                         source[1], len(plans), 0)
    return header + records + body


def make_decode_plans(out):
    as_stored, zip_kind, gzip_kind = 0, 1, 2
    zip_plan = (0, zip_kind, 1000, 1250,
                [(0, 100, 0, 100, as_stored, 0, 0, 0), (300, 200, 300, 200, as_stored, 0, 0, 0),
                 (1000, 250, 100, 200, zip_kind, 0, 2, 0)],
                [(110, 80, 150, 0xDEADBEEF, 8, 0), (200, 100, 100, 0x1234, 0, 0)], [], b"")
    members = (1, gzip_kind, 5000, 20000,
               [(0, 8000, 0, 2000, gzip_kind, 0, 0, 0), (8000, 12000, 2000, 3000, gzip_kind, 1, 0, 0)],
               [], [(0, 0, NO_WINDOW, 0, 1, 0), (8000, 2000, NO_WINDOW, 0, 1, 0)], b"")
    window = bytes(i * 7 % 256 for i in range(32768))
    inside_a_byte = (0, gzip_kind, 3000, 9000,
                     [(0, 4000, 0, 1201, gzip_kind, 0, 0, 0), (4000, 5000, 1199, 1801, gzip_kind, 1, 0, 0)],
                     [], [(0, 0, NO_WINDOW, 0, 1, 0), (4000, 1200, 0, 5, 0, 0)], window)
    write(os.path.join(out, "zip_and_gzip.plan"), plan_file([zip_plan, members]))
    write(os.path.join(out, "gzip_window.plan"), plan_file([inside_a_byte]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?", default=os.path.join(os.path.dirname(__file__), "corpus"))
    parser.add_argument("--gpufsd", default="build/cli/gpufsd")
    args = parser.parse_args()
    for name, text in MYTAR_TEXTS.items():
        write(os.path.join(args.out, "mytar", name), text)
    for name, text in CONTROL_REQUESTS.items():
        write(os.path.join(args.out, "control", name), text)
    for name, text in S3_RESPONSES.items():
        write(os.path.join(args.out, "s3_response", name), text)
    for name, text in AWS_CONFIGS.items():
        write(os.path.join(args.out, "aws_config", name), text)
    make_tars(os.path.join(args.out, "tar"))
    make_zips(os.path.join(args.out, "zip"))
    make_decode_plans(os.path.join(args.out, "decode_plan"))
    make_gzips(os.path.join(args.out, "gzip"))
    os.makedirs(os.path.join(args.out, "native_index"), exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        make_native(args.gpufsd, work, os.path.join(args.out, "native_index"))
    print(f"make_corpus: wrote {args.out}")


if __name__ == "__main__":
    main()
