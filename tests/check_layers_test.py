#!/usr/bin/env python3
"""Tests scripts/check_layers.py itself: a tree that keeps the rule passes, and each kind of
upward include, an include that no layer folder holds, and an upward symbol reference (objects
compiled with the C compiler into a build folder laid out as CMake's) planted in a copy of it
fails, naming the file."""
import os
import shutil
import subprocess
import sys
import tempfile

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                       "check_layers.py")


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def run(root, build=None):
    cmd = [sys.executable, CHECKER, "--root", root] + (["--build", build] if build else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def tree(root):
    """A small tree that keeps the rule: every include points down or within a layer."""
    write(root, "include/neargnn.h", "")
    write(root, "core/core_impl.h", '#include "neargnn.h"\n')
    write(root, "cpu/sampler_impl.h", '#include "core_impl.h"\n')
    write(root, "models/model_impl.h", '#include "core_impl.h"\n')
    write(root, "sched/pipeline_impl.h", '#include "model_impl.h"\n#include "sampler_impl.h"\n')
    write(root, "runtime/trainer.c", '#include "pipeline_impl.h"\n')
    write(root, "apps/cli.h", '#include "neargnn.h"\n')
    write(root, "apps/main.c", '#include "cli.h"\n#include "neargnn.h"\n')
    write(root, "tests/ng_test.h", "")
    # Symbols: the sampler calls down into core, the trainer down into cpu and core, and the
    # command calls the public API only.
    write(root, "core/status.c", "int ng__err(int s);\nint ng__err(int s) { return s; }\n"
          "int ng_version(void);\nint ng_version(void) { return 1; }\n")
    write(root, "cpu/sampler.c", "int ng__err(int s);\nint ng__sample(int n);\n"
          "int ng__sample(int n) { return ng__err(n); }\n")
    write(root, "runtime/trainer.c", '#include "pipeline_impl.h"\nint ng__sample(int n);\n'
          "int ng__err(int s);\nint ng_trainer_epoch(int n);\n"
          "int ng_trainer_epoch(int n) { return ng__sample(n) + ng__err(n); }\n")
    write(root, "apps/main.c", '#include "cli.h"\n#include "neargnn.h"\n'
          "int ng_trainer_epoch(int n);\nint ng_version(void);\n"
          "int main(void) { return ng_trainer_epoch(ng_version()); }\n")


def compile_into(root, cc, rel):
    """Compiles <root>/<rel> (a .c of a layer) into <root>/build as CMake lays objects out: a
    layer's into CMakeFiles/ng_<layer>.dir/<layer>/, the command's into
    CMakeFiles/neargnn.dir/apps/."""
    layer = rel.split("/")[0]
    target = "neargnn" if layer == "apps" else "ng_" + layer
    obj = os.path.join(root, "build", "CMakeFiles", target + ".dir", rel + ".o")
    os.makedirs(os.path.dirname(obj), exist_ok=True)
    incs = ["-I" + os.path.join(root, d) for d in sorted(os.listdir(root))]
    subprocess.run([cc, "-c", "-w"] + incs + [os.path.join(root, rel), "-o", obj], check=True)


def build(root, cc):
    """Compiles every .c of the tree (compile_into); returns the build folder."""
    for layer in sorted(os.listdir(root)):
        folder = os.path.join(root, layer)
        if layer == "build" or not os.path.isdir(folder):
            continue
        for f in sorted(os.listdir(folder)):
            if f.endswith(".c"):
                compile_into(root, cc, layer + "/" + f)
    return os.path.join(root, "build")


def main():
    failures = 0
    cases = [
        # (what, file, text, the line the report must name)
        ("cpu -> runtime", "cpu/sampler.c", '#include "trainer_impl.h"\n', "cpu/sampler.c:1"),
        ("models -> cpu", "models/model.c", '#include "core_impl.h"\n#include "sampler_impl.h"\n',
         "models/model.c:2"),
        ("core -> sched by a relative path", "core/status.c", '#include "../sched/pipeline_impl.h"\n',
         "core/status.c:1"),
        ("gpu -> cpu (two layers beside each other)", "gpu/backend.cu", '#include "sampler_impl.h"\n',
         "gpu/backend.cu:1"),
        ("apps -> an internal header (the command uses the public API only)", "apps/cmd.c",
         '#include "cli.h"\n#include "pipeline_impl.h"\n', "apps/cmd.c:2"),
        ("core -> a header of no layer (the tests' helpers)", "core/names.c",
         '#include <stdio.h>\n#include "ng_test.h"\n', "core/names.c:2"),
        ("cpu -> a header that does not exist", "cpu/fetch.c", '#include "fetch_gone.h"\n',
         "cpu/fetch.c:1"),
    ]
    with tempfile.TemporaryDirectory() as clean:
        tree(clean)
        rc, out = run(clean)
        if rc != 0 or "symbol pass skipped" not in out:
            print("FAIL: a tree that keeps the rule was refused, or the skipped symbol pass was "
                  "not reported (rc %d):\n%s" % (rc, out))
            failures += 1
    for what, rel, text, where in cases:
        with tempfile.TemporaryDirectory() as root:
            tree(root)
            write(root, "runtime/trainer_impl.h", "")
            write(root, rel, text)
            rc, out = run(root)
            if rc != 1 or where not in out:
                print("FAIL: %s: expected rc 1 naming %s, got rc %d:\n%s" % (what, where, rc, out))
                failures += 1
            else:
                print("ok: %s refused (%s)" % (what, where))

    # The symbol pass, on objects the C compiler builds from the same small tree.
    sym_cases = [
        # (what, file, text, what the report must name); no include points up in any of them
        ("core -> cpu: a call up through a prototype written by hand", "core/names.c",
         "int ng__sample(int n);\nint ng__name(int n);\nint ng__name(int n) "
         "{ return ng__sample(n); }\n", "core/names.c: core references ng__sample"),
        ("cpu -> runtime: a function pointer's target named directly", "cpu/fetch.c",
         "int ng_trainer_epoch(int n);\nint (*ng__fetch_hook)(int) = ng_trainer_epoch;\n",
         "cpu/fetch.c: cpu references ng_trainer_epoch"),
        ("apps -> an internal function", "apps/cmd.c",
         "int ng__sample(int n);\nint ng_cmd(int n);\nint ng_cmd(int n) { return ng__sample(n); }\n",
         "apps/cmd.c: apps references ng__sample"),
    ]
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc or not shutil.which(os.environ.get("NM", "nm")):
        print("FAIL: the symbol pass needs a C compiler (cc) and nm")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        clean = os.path.join(tmp, "clean")
        tree(clean)
        rc, out = run(clean, build(clean, cc))
        if rc != 0 or "symbols of 4 objects" not in out:
            print("FAIL: the objects of a tree that keeps the rule were refused (rc %d):\n%s"
                  % (rc, out))
            failures += 1
        else:
            print("ok: the objects of a tree that keeps the rule pass")
        rc, out = run(clean, os.path.join(clean, "no_build"))
        if rc != 2:
            print("FAIL: a missing build folder: expected rc 2, got %d:\n%s" % (rc, out))
            failures += 1
        for i, (what, rel, text, where) in enumerate(sym_cases):
            root = os.path.join(tmp, "case%d" % i)
            shutil.copytree(clean, root)
            write(root, rel, text)
            compile_into(root, cc, rel)
            rc, out = run(root, os.path.join(root, "build"))
            if rc != 1 or where not in out:
                print("FAIL: %s: expected rc 1 naming \"%s\", got rc %d:\n%s"
                      % (what, where, rc, out))
                failures += 1
            else:
                print("ok: %s refused (%s)" % (what, where))
        # A leftover object whose source has left the tree is not read.
        os.remove(os.path.join(tmp, "case0", "core", "names.c"))
        rc, out = run(os.path.join(tmp, "case0"), os.path.join(tmp, "case0", "build"))
        if rc != 0:
            print("FAIL: the object of a removed source was read (rc %d):\n%s" % (rc, out))
            failures += 1
        else:
            print("ok: the object of a removed source is skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
