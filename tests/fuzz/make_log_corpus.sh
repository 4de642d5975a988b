#!/usr/bin/env bash
# Writes the seed corpus of fuzz_log (committed under tests/fuzz/corpus/log/): mutations of the
# harness's 6-record log (records at bytes 64, 152, 232, 336, 440 and 528, 632 bytes in all),
# each next to one rule of the start-up replay. Layout: flags, u16 truncation, then triples
# (u16 offset, u8 xor mask); see fuzz_log.c.
set -euo pipefail
cd "$(dirname "$0")"
rm -rf corpus/log
mkdir -p corpus/log
seed() { printf "$2" >"corpus/log/$1"; }
seed unchanged '\x00\x00\x00'
seed length_flip_middle '\x00\x00\x00\xf2\x00\x40'   # record 2's length, bit 22
seed payload_flip_middle '\x00\x00\x00\x82\x01\x01'  # inside record 3's payload
seed torn_last '\x01\x58\x02'                        # cut at byte 600, inside record 5
seed length_flip_last '\x00\x00\x00\x1a\x02\x40'     # record 5's length: a torn tail
seed zeros_after '\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00'
seed header_flip '\x00\x00\x00\x11\x00\x01'          # the base node count
