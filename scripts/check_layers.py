#!/usr/bin/env python3
"""Fails on a dependency that points up the layers (docs/architecture.md, "Layering").

    python3 scripts/check_layers.py [--root DIR] [--build DIR]

Two passes.

Includes: every quoted include of every C, header and CUDA file under the layer folders is
resolved the way the build resolves it (the including file's folder first, then the include
folders of the layers it may use) and the folder of the header it finds must be one the including
layer may use. The build already fails on most upward includes (a layer's include path holds only
its own folder and those below it); this pass also catches what a build would let through: an
include by a relative path ("../sched/x.h"), a folder that is added to a target's include path by
mistake, and the configurations a machine does not build (gpu/ without nvcc). A quoted include
that no layer folder holds fails too (outside eval/, whose programs also use the tests' helpers):
it is a header found through an include path the rule cannot see. System headers are included
with <...> and are not checked.

Symbols (with --build, a CMake build folder of this tree): `nm` lists what each object of each
layer's object library (CMakeFiles/ng_<layer>.dir) and of the command (CMakeFiles/neargnn.dir,
apps/) defines and references. A reference to a symbol defined in a layer the referring layer may
not use fails, and so does a reference from the command to a library symbol outside the public
API (ng_ but not ng__). This catches a call up that needs no include: a prototype written out by
hand, an extern declaration. A hook passed down as a function pointer is data, not a reference,
and does not show here (docs/architecture.md lists the hooks). Objects whose source is no longer
in the tree (a build folder's leftovers) are skipped. Without --build, or without `nm`, the pass
is skipped with a notice on stdout.

Exit status 0: no violation, 1: violations (one line each, file and the rule), 2: usage error.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

# What each folder may include besides itself: the dependency rule
# core <- cpu, gpu <- models <- sched <- runtime <- serve <- apps, eval. include/ holds the public
# headers (neargnn.h, neargnn_serve.h), which every layer may see. The command (apps/) is a client
# of the library like any other program: it sees the public headers only.
BELOW = {
    "include": [],
    "core": ["include"],
    "cpu": ["include", "core"],
    "gpu": ["include", "core"],
    "models": ["include", "core"],
    "comm": ["include", "core"],
    "sched": ["include", "core", "cpu", "gpu", "models", "comm"],
    "runtime": ["include", "core", "cpu", "gpu", "models", "comm", "sched"],
    "serve": ["include", "core", "cpu", "gpu", "models", "comm", "sched", "runtime"],
    "apps": ["include"],
    "eval": ["include", "core", "cpu", "gpu", "models", "comm", "sched", "runtime", "serve"],
}
# Folders whose quoted includes must all resolve inside the tree. eval/'s programs also use the
# tests' helpers (tests/ng_test_agg.h), which lie outside the layers.
RESOLVE_ALL = [layer for layer in BELOW if layer != "eval"]
# The layers whose objects the symbol pass reads, by their CMake target: a layer's object library,
# and the command's executable for apps/.
TARGETS = {layer: "ng_" + layer for layer in BELOW if layer not in ("include", "apps", "eval")}
TARGETS["apps"] = "neargnn"
# The public API: what the command, a client of the library, may reference.
PUBLIC = re.compile(r"^ng_(?!_)")
SOURCE = re.compile(r"\.(c|h|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of(root, path):
    """The top folder of `path` under `root` (the layer a file belongs to), or None."""
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    top = rel.split(os.sep)[0]
    return top if top in BELOW else None


def resolve(root, src, name):
    """The file that `#include "name"` in `src` finds: the including file's folder first (the
    compiler's rule for quoted includes), then any layer folder (so that a header of a layer that
    is out of reach is found and reported, instead of being missed)."""
    for base in [os.path.dirname(src), root] + [os.path.join(root, d) for d in BELOW]:
        path = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(path):
            return path
    return None


def check(root):
    """The include pass: one line per violation."""
    violations = []
    for layer in BELOW:
        for folder, _, files in os.walk(os.path.join(root, layer)):
            for f in sorted(files):
                if not SOURCE.search(f):
                    continue
                src = os.path.join(folder, f)
                with open(src, encoding="utf-8", errors="replace") as fh:
                    for lineno, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = resolve(root, src, m.group(1))
                        if target is None:
                            if layer in RESOLVE_ALL:
                                violations.append(
                                    "%s:%d: %s includes \"%s\", which no layer folder holds "
                                    "(system headers are included with <...>)"
                                    % (os.path.relpath(src, root), lineno, layer, m.group(1)))
                            continue
                        to = layer_of(root, target)
                        if to is None or to == layer or to in BELOW[layer]:
                            continue
                        violations.append(
                            "%s:%d: %s includes \"%s\" of %s/, a layer it may not use (%s may use %s)"
                            % (os.path.relpath(src, root), lineno, layer, m.group(1), to, layer,
                               ", ".join(BELOW[layer]) or "nothing"))
    return violations


def objects(root, build):
    """[(layer, source relative to root, object path)] for the objects of every layer's target
    in the build folder whose source is still in the tree."""
    found = []
    for layer, target in TARGETS.items():
        tdir = os.path.join(build, "CMakeFiles", target + ".dir")
        for folder, _, files in os.walk(tdir):
            for f in sorted(files):
                if not f.endswith(".o"):
                    continue
                obj = os.path.join(folder, f)
                src = os.path.relpath(obj, tdir)[:-len(".o")]
                if src.split(os.sep)[0] == layer and os.path.isfile(os.path.join(root, src)):
                    found.append((layer, src, obj))
    return found


def symbols(nm, objs):
    """{object path: (defined, referenced)}: the global symbols each object defines strongly
    and those it leaves undefined, by `nm -P -A`. Weak definitions (C++ inline functions and
    template instances, emitted by every object that uses them) are not counted as defined."""
    table = {obj: (set(), set()) for obj in objs}
    for i in range(0, len(objs), 200):
        chunk = objs[i:i + 200]
        r = subprocess.run([nm, "-P", "-A"] + chunk, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("%s failed: %s" % (nm, r.stderr.strip()))
        for line in r.stdout.splitlines():
            head, _, rest = line.partition(": ")
            fields = rest.split()
            if head not in table or len(fields) < 2:
                continue
            name, kind = fields[0], fields[1]
            if kind in ("U", "w", "v"):
                table[head][1].add(name)
            elif kind in "TDBRGSCiu":
                table[head][0].add(name)
    return table


def check_symbols(root, build, nm):
    """The symbol pass: one line per violation."""
    objs = objects(root, build)
    table = symbols(nm, [obj for _, _, obj in objs])
    where = {}  # symbol -> (layer, source) of its definition
    for layer, src, obj in objs:
        for name in table[obj][0]:
            where.setdefault(name, (layer, src))
    violations = []
    for layer, src, obj in objs:
        for name in sorted(table[obj][1]):
            if name not in where:
                continue  # the C library, oneDNN, CUDA ...
            to, to_src = where[name]
            if to == layer:
                continue
            if layer == "apps":
                if PUBLIC.match(name):
                    continue
                violations.append(
                    "%s: apps references %s (%s), which is not the public API (the command uses "
                    "ng_ functions of include/ only)" % (src, name, to_src))
            elif to not in BELOW[layer]:
                violations.append(
                    "%s: %s references %s, defined in %s of %s/, a layer it may not use (%s may "
                    "use %s)" % (src, layer, name, to_src, to, layer,
                                 ", ".join(BELOW[layer]) or "nothing"))
    return objs, violations


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."),
                    help="the repository root (default: this script's parent folder)")
    ap.add_argument("--build", help="a CMake build folder of this tree, whose objects the symbol "
                    "pass reads (without it the pass is skipped)")
    args = ap.parse_args()
    if not os.path.isdir(os.path.join(args.root, "core")):
        print("check_layers: %s has no core/ folder; pass the repository root with --root"
              % args.root, file=sys.stderr)
        return 2
    violations = check(args.root)
    includes_bad = len(violations)
    checked = "includes"
    if args.build is None:
        print("check_layers: symbol pass skipped: no --build folder given")
    elif not os.path.isdir(os.path.join(args.build, "CMakeFiles", TARGETS["core"] + ".dir")):
        print("check_layers: %s is not a built CMake folder of this tree (no CMakeFiles/%s.dir); "
              "build it first or pass the right one with --build" % (args.build, TARGETS["core"]),
              file=sys.stderr)
        return 2
    elif shutil.which(os.environ.get("NM", "nm")) is None:
        print("check_layers: symbol pass skipped: no nm (binutils) on PATH")
    else:
        objs, bad = check_symbols(args.root, args.build, os.environ.get("NM", "nm"))
        violations += bad
        checked = "includes and the symbols of %d objects" % len(objs)
    for v in violations:
        print(v)
    if violations:
        print("check_layers: %d include(s) and %d symbol reference(s) against the rule; move the shared "
              "code or type down to the lower layer, or pass the decision down as data "
              "(docs/architecture.md)" % (includes_bad, len(violations) - includes_bad),
              file=sys.stderr)
        return 1
    print("check_layers: no upward dependency (%s)" % checked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
