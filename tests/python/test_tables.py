"""The package's views of the C library's tables: the enums' names (read from the library at
import) against the constants of include/neargnn.h, so that a value added to an enum without a
name, or a name table out of the enum's order, fails here; and the ctypes mirrors of the structs
against the compiler's layout (NG_LAYOUT: tests/python/layout.c, built by ctest) and the C
initializers."""

import ctypes
import os
import re
import subprocess
import unittest

import neargnn as ng
from neargnn import _lib

HEADER = os.path.join(os.path.dirname(__file__), "../../include/neargnn.h")


def header_enum(type_name):
    """{CONSTANT: value} of `typedef enum { ... } type_name;` in the public header."""
    text = open(HEADER).read()
    m = re.search(r"typedef enum \{([^}]*)\} " + type_name + ";", text)
    assert m, type_name + " not found in include/neargnn.h"
    body = re.sub(r"//[^\n]*|/\*.*?\*/", "", m.group(1), flags=re.S)
    return {k: int(v) for k, v in re.findall(r"(NG_\w+)\s*=\s*(-?\d+)", body)}


class EnumNames(unittest.TestCase):
    # The package's table, the C type, the prefix of its constants, and the C parser.
    TABLES = [(ng._KINDS, "ng_model_kind", "NG_MODEL_", "ng_model_parse"),
              (ng._MODES, "ng_mode", "NG_MODE_", "ng_mode_parse"),
              (ng._FETCH, "ng_fetch", "NG_FETCH_", "ng_fetch_parse"),
              (ng._OPTIMIZERS, "ng_optimizer", "NG_OPTIMIZER_", "ng_optimizer_parse"),
              (ng._NORMALIZE, "ng_normalize", "NG_NORMALIZE_", "ng_normalize_parse")]

    def test_every_constant_named_after_itself(self):
        for table, type_name, prefix, _ in self.TABLES:
            consts = {k: v for k, v in header_enum(type_name).items() if v >= 0}
            want = {k[len(prefix):].lower().replace("_", "-"): v for k, v in consts.items()}
            self.assertEqual(table, want, type_name)

    def test_parse_inverts_name(self):
        for table, type_name, _, parse in self.TABLES:
            fn = getattr(ng._LIB, parse)
            for name, value in table.items():
                out = ctypes.c_int(-7)
                self.assertEqual(fn(ctypes.byref(out), name.encode()), 0, name)
                self.assertEqual(out.value, value, name)
            out = ctypes.c_int(-7)
            self.assertNotEqual(fn(ctypes.byref(out), b"no-such-name"), 0, type_name)
            self.assertEqual(out.value, -7)
            # The message lists every accepted name.
            detail = ng._LIB.ng_last_error().decode()
            for name in table:
                self.assertIn(name, detail)

    def test_builtin_aggregators_are_the_header_initializers(self):
        text = open(HEADER).read()
        consts = {}
        for t in ("ng_reduce", "ng_edge_weight", "ng_finalize"):
            consts.update(header_enum(t))
        macros = re.findall(r"#define NG_AGGREGATOR_(\w+)\s*\\\s*\(\(ng_aggregator\)\{(\w+), "
                            r"(\w+), (\w+), (\d)", text)
        want = {m[0].lower(): (consts[m[1]], consts[m[2]], consts[m[3]], int(m[4]))
                for m in macros}
        self.assertEqual(ng._AGGREGATORS, want)
        for name in want:
            a = _lib.Aggregator(*ng._AGGREGATORS[name])
            self.assertEqual(ng._LIB.ng_aggregator_name(a).decode(), name)


# The mirrors of _lib.py and the C structs they stand for.
MIRRORS = {_lib.OpenOpts: "ng_open_opts", _lib.DatasetInfo: "ng_dataset_info",
           _lib.DatasetArrays: "ng_dataset_arrays", _lib.ConvertOpts: "ng_convert_opts",
           _lib.Aggregator: "ng_aggregator", _lib.LayerOpts: "ng_layer_opts",
           _lib.TrainOpts: "ng_train_opts", _lib.FetchStats: "ng_fetch_stats",
           _lib.EpochStats: "ng_epoch_stats", _lib.InferOpts: "ng_infer_opts",
           _lib.CheckpointInfo: "ng_checkpoint_info"}


def compiler_layout():
    """{struct: size} and {(struct, field): (offset, size)} as the C compiler lays them out."""
    helper = os.environ.get("NG_LAYOUT")
    assert helper, "NG_LAYOUT must name the layout helper (tests/python/layout.c; ctest sets it)"
    out = subprocess.run([helper], check=True, capture_output=True, text=True).stdout
    sizes, fields = {}, {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            sizes[parts[0]] = int(parts[1])
        else:
            struct, field = parts[0].split(".")
            fields[(struct, field)] = (int(parts[1]), int(parts[2]))
    return sizes, fields


class Layouts(unittest.TestCase):
    def test_mirrors_match_the_compiler(self):
        sizes, fields = compiler_layout()
        self.assertEqual(set(sizes), set(MIRRORS.values()))
        for cls, struct in MIRRORS.items():
            self.assertEqual(ctypes.sizeof(cls), sizes[struct], struct)
            names = [f[0] for f in cls._fields_]
            self.assertEqual(sorted(names), sorted(f for s, f in fields if s == struct), struct)
            end = 0
            for name, ctype in cls._fields_:
                d = getattr(cls, name)
                self.assertEqual((d.offset, d.size), fields[(struct, name)], f"{struct}.{name}")
                # No room between two fields for one the mirror lacks: only the padding that
                # the next field's alignment needs.
                self.assertLess(d.offset - end, ctypes.alignment(ctype), f"{struct}.{name}")
                end = d.offset + d.size
            self.assertLess(sizes[struct] - end, ctypes.alignment(cls), struct)

    def test_initializers_fill_the_mirrors(self):
        for cls, fn in _lib._INITS.items():
            o = _lib.init(ng._LIB, cls)
            self.assertEqual(o.size, ctypes.sizeof(cls), fn)
        t = _lib.init(ng._LIB, _lib.TrainOpts)
        # NG_TRAIN_OPTS_INIT's values that are not zero reach Python (a sample of them).
        self.assertEqual((t.batch, t.lr, t.device, t.transfer, t.cache_ratio, t.lookahead),
                         (1024, 0.01, b"cpu", ng._FETCH["auto"], -1.0, 3))
        c = _lib.init(ng._LIB, _lib.ConvertOpts)
        self.assertEqual((c.train_frac, c.val_frac, c.test_frac, c.seed), (0.1, 0.1, 0.2, 1))


if __name__ == "__main__":
    unittest.main()
