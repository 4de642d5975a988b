#!/usr/bin/env python3
"""Row loads in flight per kernel of an sm_90 cubin, without a disassembler (docs/aggregators.md,
"Registers and loads in flight").

    nvcc -arch=sm_90 -cubin -Xptxas -v [the build's flags] gpu/backend_cuda_uagg.cu -o u.cubin 2> u.ptxas
    python3 scripts/sass_loads_in_flight.py u.cubin 'k_fwd.*max_ops' [--ptxas u.ptxas]

cuobjdump and nvdisasm are not in every toolkit install, so this reads the instructions itself:
each kernel's .text section holds 16-byte instructions; the low 12 bits are the opcode (0x981:
LDG, 0x986: STG, 0x947: BRA, 0x94d: EXIT) and the top 23 bits the scheduling control (bits
105-108 stall, 110-112 the scoreboard a result is written to, 116-121 the scoreboards waited
for). An LDG's access size is in bits 73-75 (4: 32 bits, 5: 64, 6: 128). A load that sets
scoreboard b is in flight until an instruction waits on b. The encodings are read from the
hardware's published layout as observed (Volta to Hopper), not from a specification: check a
kernel whose code is known first.

For each kernel matching REGEX it prints the most 8- and 16-byte loads (rows of the aggregation
kernels; 32-bit loads are indices) in flight at once, and a picture: at each wait that retires
row loads, how many were in flight just before it; 'i' a 32-bit load, 'S' a store, '^' a
backward branch (a loop's end), 'X' an exit. With --ptxas, the registers and spills that
ptxas -v printed for the kernel.
"""
import argparse
import re
import struct
import sys

LDG, STG, BRA, EXIT = 0x981, 0x986, 0x947, 0x94D
ROW_SIZES = (5, 6)  # 64-bit (bf16 V = 4) and 128-bit (fp32 V = 4) loads


def text_sections(path):
    """The .text.<kernel> sections of an ELF cubin: {mangled name: bytes}."""
    b = open(path, "rb").read()
    if b[:4] != b"\x7fELF":
        sys.exit("%s: not an ELF cubin (compile with -cubin)" % path)
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    sh = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    strtab = sh[shstrndx][4]
    out = {}
    for s in sh:
        end = b.index(b"\0", strtab + s[0])
        name = b[strtab + s[0]:end].decode()
        if name.startswith(".text."):
            out[name[6:]] = b[s[4]:s[4] + s[5]]
    return out


def instructions(code):
    for i in range(0, len(code), 16):
        lo, hi = struct.unpack_from("<QQ", code, i)
        ctrl = hi >> 41
        yield {"op": lo & 0xFFF, "lo": lo, "size": (hi >> 9) & 7, "wb": (ctrl >> 5) & 7,
               "wait": (ctrl >> 11) & 0x3F}


def analyse(code):
    """(most row loads in flight, picture)."""
    rows = [0] * 6
    most = 0
    out = []
    for x in instructions(code):
        before = sum(rows)
        retired = 0
        for b in range(6):
            if x["wait"] >> b & 1 and rows[b]:
                retired += rows[b]
                rows[b] = 0
        if retired:
            out.append(str(before))
        op = x["op"]
        if op == LDG:
            if x["size"] in ROW_SIZES:
                if x["wb"] != 7:
                    rows[x["wb"]] += 1
            else:
                out.append("i")
        elif op == STG:
            out.append("S")
        elif op == BRA and (x["lo"] >> 63) & 1:
            out.append("^")
        elif op == EXIT:
            out.append("X")
        most = max(most, sum(rows))
    picture = re.sub(r"S( S)+", lambda m: "S%d" % (m.group(0).count("S")), " ".join(out))
    return most, picture


def ptxas_registers(path):
    regs, cur = {}, None
    for line in open(path):
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([^' ]+)'?", line)
        if m:
            cur = m.group(1).strip()
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            regs.setdefault(cur, {})["spill"] = "%s/%s" % m.groups()
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            regs.setdefault(cur, {})["regs"] = m.group(1)
    return regs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cubin")
    ap.add_argument("regex", nargs="?", default="")
    ap.add_argument("--ptxas", help="the ptxas -v output of the same compile")
    a = ap.parse_args()
    regs = ptxas_registers(a.ptxas) if a.ptxas else {}
    for name, code in sorted(text_sections(a.cubin).items()):
        if not re.search(a.regex, name):
            continue
        most, picture = analyse(code)
        r = regs.get(name, {})
        extra = " registers %s spill %s" % (r.get("regs", "?"), r.get("spill", "?")) if a.ptxas else ""
        print("%s\n  row loads in flight at most %d%s\n  %s" % (name, most, extra, picture))
    return 0


if __name__ == "__main__":
    sys.exit(main())
