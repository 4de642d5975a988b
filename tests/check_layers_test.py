#!/usr/bin/env python3
"""Tests scripts/check_layers.py itself: a tree that keeps the rule passes, and each kind of
upward include planted in a copy of it fails, naming the file and line."""
import os
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


def run(root):
    r = subprocess.run([sys.executable, CHECKER, "--root", root], capture_output=True, text=True)
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
    ]
    with tempfile.TemporaryDirectory() as clean:
        tree(clean)
        rc, out = run(clean)
        if rc != 0:
            print("FAIL: a tree that keeps the rule was refused (rc %d):\n%s" % (rc, out))
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
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
