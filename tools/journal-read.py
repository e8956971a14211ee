#!/usr/bin/env python3
"""An independent reader of the dispatch journal, written from journal-format.md alone.

Usage: journal-read.py JOURNAL_DIR

Walks the segments, checks every header, frame CRC, seq and the SHA-256 chain, and prints one
JSON document: {"status", "events", "last_seq", "head", "kinds"} where status is "clean",
"forked" (section 8.1: with "offset" and "fork": {"common_seq", "events", "branches"}),
"damaged" (with "reason", "segment", "offset") and kinds counts frames per kind code. It does
not tell a torn tail from corruption (that needs the look-ahead of §8) and does not decode
payloads past checking that each is exactly one MessagePack value with no map in it, an
envelope of four whose event id is a bin of 16; it exists to prove that the
format can be read without dispatch's code. Standard library only.
"""

import hashlib
import json
import os
import re
import struct
import sys
import zlib

SEGMENT_MAGIC = b"DISPJRNL"
FRAME_MAGIC = 0x31464A44
HEADER_LEN = 96
MAX_PAYLOAD = 1 << 20


def crc(data):
    return zlib.crc32(data) & 0xFFFFFFFF


def msgpack_value_len(b):
    """Length of the one MessagePack value b starts with, or None (spec section 6)."""
    at, pending = 0, 1
    fixed = {0xCA: 4, 0xCE: 4, 0xD2: 4, 0xCB: 8, 0xCF: 8, 0xD3: 8, 0xCC: 1, 0xD0: 1,
             0xCD: 2, 0xD1: 2, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
    sized = {0xC4: (1, 0), 0xD9: (1, 0), 0xC5: (2, 0), 0xDA: (2, 0), 0xC6: (4, 0),
             0xDB: (4, 0), 0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1)}
    counted = {0xDC: (2, 1), 0xDD: (4, 1)}
    while pending:
        pending -= 1
        if at >= len(b):
            return None
        m = b[at]
        at += 1
        children = 0
        if m <= 0x7F or m >= 0xE0 or m in (0xC0, 0xC2, 0xC3):
            skip = 0
        elif 0x80 <= m <= 0x8F or m in (0xDE, 0xDF):
            return None  # a map: no payload holds one, every struct is an array
        elif 0x90 <= m <= 0x9F:
            skip, children = 0, m & 0x0F
        elif 0xA0 <= m <= 0xBF:
            skip = m & 0x1F
        elif m in fixed:
            skip = fixed[m]
        elif m in sized:
            width, ext = sized[m]
            if at + width > len(b):
                return None
            skip = width + ext + int.from_bytes(b[at:at + width], "big")
        elif m in counted:
            width, per = counted[m]
            if at + width > len(b):
                return None
            skip, children = width, per * int.from_bytes(b[at:at + width], "big")
        else:
            return None  # 0xC1, never used
        at += skip
        pending += children
        if at > len(b) or pending > len(b) - at:
            return None
    return at


def payload_ok(payload):
    """Section 6: exactly one MessagePack value, no map in it, and an envelope of four whose
    second element (the event id) is bin 8 of length 16. Bodies are not decoded here."""
    if msgpack_value_len(payload) != len(payload) or payload[:1] != b"\x94":
        return False
    time_len = msgpack_value_len(payload[1:])
    m = payload[1]
    if time_len is None or not (m <= 0x7F or m >= 0xE0 or 0xCC <= m <= 0xD3):
        return False
    return payload[1 + time_len:3 + time_len] == b"\xc4\x10"


def parse_frame(data, offset):
    """(seq, kind, flags, header, payload, stored chain, end) of a valid frame (section 4), or None."""
    if len(data) - offset < 24:
        return None
    magic, length, seq, kind, flags = struct.unpack_from("<IIQHH", data, offset)
    header = data[offset:offset + 20]
    if magic != FRAME_MAGIC or crc(header) != struct.unpack_from("<I", data, offset + 20)[0]:
        return None
    end = offset + 60 + length
    if length > MAX_PAYLOAD or end > len(data):
        return None
    if crc(data[offset:end - 4]) != struct.unpack_from("<I", data, end - 4)[0]:
        return None
    payload = data[offset + 24:offset + 24 + length]
    return seq, kind, flags, header, payload, data[offset + 24 + length:end - 4], end


def fork(data, first_seq, prev_chain, damage_at):
    """Section 8.1: the fork whose region starts at damage_at, or None."""
    # Nodes: [seq, chain, parent, offset, on_trunk]; the trunk first.
    nodes = [[first_seq - 1, prev_chain, None, 0, True]]
    offset = HEADER_LEN
    while offset < damage_at:
        seq, _, _, header, payload, stored, end = parse_frame(data, offset)
        nodes.append([seq, stored, len(nodes) - 1, offset, True])
        offset = end
    trunk = len(nodes)
    chains = {n[1] for n in nodes}
    in_region = {}
    by_seq = {}
    for i, n in enumerate(nodes):
        by_seq.setdefault(n[0], []).append(i)
    while offset < len(data):
        f = parse_frame(data, offset)
        if f is None:
            return None
        seq, kind, flags, header, payload, stored, end = f
        if flags & ~0x0001 or not payload_ok(payload) or stored in chains:
            return None
        parents = [i for i in by_seq.get(seq - 1, [])
                   if hashlib.sha256(nodes[i][1] + header + payload).digest() == stored]
        if len(parents) != 1 or in_region.get(seq, 0) == 64:
            return None
        in_region[seq] = in_region.get(seq, 0) + 1
        chains.add(stored)
        by_seq.setdefault(seq, []).append(len(nodes))
        nodes.append([seq, stored, parents[0], offset, False])
        offset = end
    common = min(nodes[n[2]][0] for n in nodes[trunk:] if nodes[n[2]][4])
    children = [0] * len(nodes)
    for n in nodes:
        if n[2] is not None:
            children[n[2]] += 1
    branches = []
    for tip in (i for i in range(len(nodes)) if children[i] == 0):
        first, events = tip, 1
        while True:
            parent = nodes[first][2]
            if children[parent] > 1 or nodes[parent][0] <= common:
                break
            first, events = parent, events + 1
        branches.append({"forked_after_seq": nodes[nodes[first][2]][0],
                         "first_seq": nodes[first][0], "last_seq": nodes[tip][0],
                         "events": events, "first_offset": nodes[first][3],
                         "tip": nodes[tip][1].hex()})
    branches.sort(key=lambda b: b["first_offset"])
    return {"common_seq": common, "events": len(nodes) - trunk, "branches": branches}


def read(journal_dir):
    names = sorted(
        (int(m.group(1)), name)
        for name in os.listdir(journal_dir)
        for m in [re.fullmatch(r"segment-(\d{8,})\.djl", name)]
        if m
    )
    report = {"status": "clean", "events": 0, "last_seq": 0, "head": "", "kinds": {}}

    def damaged(name, offset, reason):
        report.update(status="damaged", segment=name, offset=offset, reason=reason)
        return report

    if not names:
        return damaged(None, 0, "no segment")
    chain = None
    journal_id = None
    expect_seq = 1
    for index, (number, name) in enumerate(names):
        data = open(os.path.join(journal_dir, name), "rb").read()
        if len(data) < 10 or data[:8] != SEGMENT_MAGIC:
            return damaged(name, 0, "not a segment")
        if struct.unpack_from("<H", data, 8)[0] > 1:
            return damaged(name, 0, "newer format version: upgrade")
        if len(data) < HEADER_LEN:
            return damaged(name, 0, "not a segment")
        if crc(data[:92]) != struct.unpack_from("<I", data, 92)[0]:
            return damaged(name, 0, "segment header CRC")
        version, header_len, header_flags = struct.unpack_from("<HHI", data, 8)
        if header_flags != 0 or data[88:92] != bytes(4):
            return damaged(name, 0, "segment header flags or reserved bytes")
        seg_id = data[16:32]
        seg_no, first_seq = struct.unpack_from("<QQ", data, 32)
        prev_chain = data[48:80]
        if version != 1 or header_len != HEADER_LEN or seg_no != number or seg_no != index + 1:
            return damaged(name, 0, "segment numbering or version")
        if chain is None:
            journal_id = seg_id
            chain = hashlib.sha256(b"dispatch journal v1" + journal_id).digest()
        if seg_id != journal_id or first_seq != expect_seq or prev_chain != chain:
            return damaged(name, 0, "segment does not continue the journal")
        offset = HEADER_LEN
        while offset < len(data):
            if len(data) - offset < 24:
                return damaged(name, offset, "short frame header")
            magic, length, seq, kind, flags = struct.unpack_from("<IIQHH", data, offset)
            header = data[offset:offset + 20]
            if magic != FRAME_MAGIC or crc(header) != struct.unpack_from("<I", data, offset + 20)[0]:
                return damaged(name, offset, "frame magic or header CRC")
            end = offset + 60 + length
            if length > MAX_PAYLOAD or end > len(data):
                return damaged(name, offset, "frame length")
            payload = data[offset + 24:offset + 24 + length]
            stored_chain = data[offset + 24 + length:offset + 56 + length]
            if crc(data[offset:end - 4]) != struct.unpack_from("<I", data, end - 4)[0]:
                return damaged(name, offset, "frame CRC")
            if seq != expect_seq:
                found = None
                if seq < expect_seq and index == len(names) - 1:
                    found = fork(data, first_seq, prev_chain, offset)
                if found is not None:
                    damaged(name, offset, "forked")
                    report.update(status="forked", fork=found, head=chain.hex())
                    return report
                return damaged(name, offset, "seq %d, expected %d" % (seq, expect_seq))
            chain = hashlib.sha256(chain + header + payload).digest()
            if chain != stored_chain:
                return damaged(name, offset, "chain mismatch")
            if flags & ~0x0001:
                return damaged(name, offset, "undefined frame flag bits")
            if not payload_ok(payload):
                return damaged(name, offset, "payload is not one MessagePack value of section 6's form")
            report["kinds"][str(kind)] = report["kinds"].get(str(kind), 0) + 1
            report["events"] += 1
            report["last_seq"] = seq
            expect_seq += 1
            offset = end
    report["head"] = chain.hex()
    return report


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        sys.exit(2)
    result = read(sys.argv[1])
    print(json.dumps(result, sort_keys=True))
    sys.exit(0 if result["status"] == "clean" else 1)
