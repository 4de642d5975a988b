#!/usr/bin/env python3
"""Fails on an include that points up the layers (docs/architecture.md, "Layering").

    python3 scripts/check_layers.py [--root DIR]

Every quoted include of every C, header and CUDA file under the layer folders is resolved the way
the build resolves it (the including file's folder first, then the include folders of the layers
it may use) and the folder of the header it finds must be one the including layer may use. The
build already fails on most upward includes (a layer's include path holds only its own folder and
those below it); this check also catches what a build would let through: an include by a
relative path ("../sched/x.h"), a folder that is added to a target's include path by mistake, and
the configurations a machine does not build (gpu/ without nvcc). Exit status 0: no violation, 1:
violations (one line each, file:line and the rule), 2: usage error.
"""
import argparse
import os
import re
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
                        to = layer_of(root, target) if target else None
                        if to is None or to == layer or to in BELOW[layer]:
                            continue
                        violations.append(
                            "%s:%d: %s includes \"%s\" of %s/, a layer it may not use (%s may use %s)"
                            % (os.path.relpath(src, root), lineno, layer, m.group(1), to, layer,
                               ", ".join(BELOW[layer]) or "nothing"))
    return violations


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."),
                    help="the repository root (default: this script's parent folder)")
    args = ap.parse_args()
    if not os.path.isdir(os.path.join(args.root, "core")):
        print("check_layers: %s has no core/ folder; pass the repository root with --root"
              % args.root, file=sys.stderr)
        return 2
    violations = check(args.root)
    for v in violations:
        print(v)
    if violations:
        print("check_layers: %d upward include(s); move the shared type down to the lower layer "
              "(docs/architecture.md)" % len(violations), file=sys.stderr)
        return 1
    print("check_layers: no upward include")
    return 0


if __name__ == "__main__":
    sys.exit(main())
