"""neargnn from Python: datasets (folders, or numpy arrays without copying), GraphSAGE/GCN models,
training, evaluation, prediction into numpy arrays and checkpoints, over the C library
libneargnn.so through ctypes. docs/python.md is the guide.

    import neargnn as ng
    ds = ng.Dataset.open("data/cora")
    model = ng.Model.sage(ds.feature_dim, ds.classes, hidden=[64], fanouts=[10, 5])
    tr = ng.Trainer(ds, model, batch=0, normalize="row")
    tr.train(epochs=30)
    acc, loss = tr.evaluate("test")
    pred = tr.predict(ds.split("test"))

Errors of the library raise NeargnnError, whose message is the library's (ng_last_error()).
"""

import ctypes
import os
import weakref

import numpy as np

from . import _lib

__all__ = ["NeargnnError", "Dataset", "Model", "Trainer", "convert", "checkpoint_info",
           "version", "library_path", "has_cuda"]

_LIB, _LIB_PATH = _lib.load()
_lib.bind(_LIB)

_SPLITS = {"train": 0, "val": 1, "test": 2}
_FEATURES_MEMORY = {"auto": 0, "mapped": 1, "copy": 2}
_PRECISION = {"fp32": 0, "tf32": 1, "bf16": 2}
_FORMATS = {"planetoid": 0, "snap": 1, "ogb": 2}
_FEATURE_FILLS = {"none": 0, "random": 1}
_INT32, _INT64 = 0, 1


class NeargnnError(RuntimeError):
    """A failed library call: `status` is the status name ("ERR_FORMAT"), the message is the
    library's detail (what failed and how to fix it)."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.detail = message


def _check(status):
    if status != 0:
        name = _LIB.ng_status_name(status).decode()
        raise NeargnnError(name, _LIB.ng_last_error().decode(errors="replace"))


def _choice(table, value, what):
    if value not in table:
        raise ValueError(f"{what} must be one of {', '.join(table)} (got {value!r})")
    return table[value]


def _enum_names(name_fn):
    """{name: value} of a C enum, from its name function (ng_mode_name, ...), which names the
    values 0, 1, ... and then "?": the library's tables (core/names_impl.h) are the only copy."""
    table, value = {}, 0
    while (name := name_fn(value)) not in (None, b"?"):
        table[name.decode()] = value
        value += 1
    return table


def _builtin_aggregators():
    """{name: ng_aggregator} of the built-in aggregators, as ng_aggregator_parse makes them."""
    table, i = {}, 0
    while (name := _LIB.ng_aggregator_builtin_name(i)) is not None:
        a = _lib.Aggregator()
        _check(_LIB.ng_aggregator_parse(ctypes.byref(a), name))
        table[name.decode()] = (a.reduce, a.edge_weight, a.finalize, a.self_loop)
        i += 1
    return table


_KINDS = _enum_names(_LIB.ng_model_name)
_AGGREGATORS = _builtin_aggregators()  # reduce, edge_weight, finalize, self_loop
_COMBINES = {"sum": 0, "concat": 1}
_OPTIMIZERS = _enum_names(_LIB.ng_optimizer_name)
_NORMALIZE = _enum_names(_LIB.ng_normalize_name)
_MODES = _enum_names(_LIB.ng_mode_name)
_FETCH = _enum_names(_LIB.ng_fetch_name)


def version():
    """The library's version, "MAJOR.MINOR.PATCH"."""
    return _LIB.ng_version().decode()


def library_path():
    """The path of the libneargnn.so this package loaded."""
    return _LIB_PATH


def has_cuda():
    """Whether the loaded library has the CUDA backend."""
    return bool(_LIB.ng_has_cuda())


def _progress_callback(fn, errors):
    """A C progress callback calling fn(phase, done, total); a truthy return value, or an
    exception (re-raised after the call), stops the operation."""
    if fn is None:
        return _lib.PROGRESS_FN()

    def call(_ctx, phase, done, total):
        try:
            return 1 if fn(phase.decode(), done, total) else 0
        except BaseException as e:  # noqa: BLE001 - carried across the C frames
            errors.append(e)
            return 1

    return _lib.PROGRESS_FN(call)


def convert(dst, src, *args, format="planetoid", name=None, undirected=False, features="none",
            feature_dim=None, classes=None, train_frac=None, val_frac=None, test_frac=None,
            split=None, seed=None, progress=None):
    """Converts planetoid, SNAP or OGB data at `src` into a dataset folder `dst` (which must not
    exist); see docs/convert.md. The destination comes first, as in ng_dataset_convert(dst, src,
    opts); the options are keyword-only and are ng_convert_opts' fields (those left at None keep
    NG_CONVERT_OPTS_INIT's value): format ("planetoid", "snap", "ogb"), name, undirected,
    features ("none", or "random" for SNAP), feature_dim, classes, train_frac, val_frac,
    test_frac, split (OGB's scheme), seed."""
    if args:
        raise TypeError(f"convert(dst, src, *, format=..., ...): the options are keyword-only; "
                        f"got {len(args)} more positional argument(s) {args!r} (for example "
                        f"format={args[0]!r})")
    if os.path.exists(dst) and not os.path.exists(src):
        raise ValueError(f"convert(dst, src): the destination comes first (as in "
                         f"ng_dataset_convert); {os.fspath(dst)!r} exists and {os.fspath(src)!r} "
                         f"does not: are they swapped?")
    o = _lib.init(_LIB, _lib.ConvertOpts)
    o.format = _choice(_FORMATS, format, "format")
    o.name = name.encode() if name else None
    o.undirected = int(bool(undirected))
    o.features = _choice(_FEATURE_FILLS, features, "features")
    for key, value in (("feature_dim", feature_dim), ("classes", classes),
                       ("train_frac", train_frac), ("val_frac", val_frac),
                       ("test_frac", test_frac), ("seed", seed)):
        if value is not None:
            setattr(o, key, value)
    o.split = split.encode() if split else None
    errors = []
    o.progress = _progress_callback(progress, errors)
    st = _LIB.ng_dataset_convert(os.fsencode(dst), os.fsencode(src), ctypes.byref(o))
    if errors:
        raise errors[0]
    _check(st)


class Dataset:
    """An open dataset: a folder (Dataset.open) or numpy arrays (Dataset.from_arrays). Counts are
    attributes: name, nodes, edges, feature_dim, classes, train, val, test, undirected."""

    def __init__(self, handle, keep=()):
        self._h = ctypes.c_void_p(handle)
        self._keep = list(keep)  # the numpy arrays the library reads in place
        self._trainers = weakref.WeakSet()  # trainers borrowing this dataset
        info = _lib.DatasetInfo()
        info.size = ctypes.sizeof(info)
        _check(_LIB.ng_dataset_info_get(ctypes.byref(info), self._h))
        self.name = info.name.decode(errors="replace")
        self.nodes, self.edges, self.feature_dim = info.nodes, info.edges, info.feature_dim
        self.classes, self.undirected = info.classes, bool(info.undirected)
        self.train, self.val, self.test = info.train, info.val, info.test

    @classmethod
    def open(cls, path, check_features=False):
        """Opens (memory-maps and validates) the dataset folder `path`."""
        o = _lib.init(_LIB, _lib.OpenOpts)
        o.check_features = int(bool(check_features))
        h = ctypes.c_void_p()
        _check(_LIB.ng_dataset_open(ctypes.byref(h), os.fsencode(path), ctypes.byref(o)))
        return cls(h.value)

    @classmethod
    def from_arrays(cls, *, features=None, labels=None, indptr=None, indices=None,
                    edge_index=None, train=None, val=None, test=None, nodes=None, classes=0,
                    undirected=False, name=None, copy=None, check_features=False):
        """Builds a dataset from numpy arrays, read in place: the library keeps pointers into
        them, and this object keeps references to them until it is closed.

        The graph is a CSR (`indptr` [nodes + 1] int64/int32, `indices` int32/int64: row v lists
        the nodes v aggregates from) or `edge_index` [2, E] (PyG's: row 0 sources, row 1
        destinations), from which the library builds a CSR of its own (`undirected` adds every
        edge both ways). `features` float32 [nodes, dim] (C order), `labels` int32/int64 [nodes]
        (-1 = unlabelled), `train`/`val`/`test` node ids (int64 or int32).

        `copy`: None converts an array of another dtype or layout into a kept copy; False raises
        instead, so that zero-copy is guaranteed. int64 labels, int32 split ids and int32
        indptr are converted by the library (into memory the dataset owns) either way.
        """
        keep = []

        def arr(a, dtypes, what, ndim):
            if a is None:
                return None
            if isinstance(a, np.ndarray) and a.dtype in dtypes and a.flags.c_contiguous:
                out = a
            elif copy is False:
                raise ValueError(
                    f"{what}: zero-copy needs a C-contiguous array of dtype "
                    f"{' or '.join(str(np.dtype(d)) for d in dtypes)} (got "
                    f"{getattr(a, 'dtype', type(a).__name__)}); convert it, or pass copy=None")
            else:
                out = np.ascontiguousarray(a, dtype=dtypes[0])
            if out.ndim != ndim:
                raise ValueError(f"{what}: {ndim}-d array expected, got shape {out.shape}")
            keep.append(out)
            return out

        def itype(a):
            return _INT64 if a.dtype == np.int64 else _INT32

        ints = (np.int64, np.int32)
        a = _lib.DatasetArrays()
        a.size = ctypes.sizeof(a)
        a.name = name.encode() if name else None
        x = arr(features, (np.float32,), "features", 2)
        if x is not None:
            a.features, a.feature_dim = x.ctypes.data, x.shape[1]
        y = arr(labels, (np.int32, np.int64), "labels", 1)
        if y is not None:
            a.labels, a.label_type = y.ctypes.data, itype(y)
        a.classes = int(classes)
        a.undirected = int(bool(undirected))
        if edge_index is not None:
            ei = np.asarray(edge_index)
            if ei.ndim != 2 or ei.shape[0] != 2:
                raise ValueError(f"edge_index: shape [2, E] expected, got {ei.shape}")
            # Read during the call only (the library builds its own CSR): copies are fine.
            dt = np.int64 if ei.dtype != np.int32 else np.int32
            src, dst = np.ascontiguousarray(ei[0], dt), np.ascontiguousarray(ei[1], dt)
            a.edge_src, a.edge_dst, a.edges = src.ctypes.data, dst.ctypes.data, src.shape[0]
            a.index_type = itype(src)
            keep += [src, dst]
        else:
            p = arr(indptr, ints, "indptr", 1)
            i = arr(indices, ints, "indices", 1)
            if p is None or i is None:
                raise ValueError("give the graph as indptr and indices, or as edge_index")
            a.indptr, a.indptr_type = p.ctypes.data, itype(p)
            a.indices, a.index_type = i.ctypes.data, itype(i)
        if nodes is None:
            if x is not None:
                nodes = x.shape[0]
            elif y is not None:
                nodes = y.shape[0]
            elif indptr is not None:
                nodes = len(indptr) - 1
            else:
                raise ValueError("nodes: give it, features or labels")
        a.nodes = int(nodes)
        # The library cannot see an array's length: check what it would read past.
        if x is not None and x.shape[0] != a.nodes:
            raise ValueError(f"features: {x.shape[0]} rows for {a.nodes} nodes")
        if y is not None and y.shape[0] != a.nodes:
            raise ValueError(f"labels: {y.shape[0]} values for {a.nodes} nodes")
        if edge_index is None:
            if p.shape[0] != a.nodes + 1:
                raise ValueError(f"indptr: {p.shape[0]} values for {a.nodes} nodes (nodes + 1)")
            if int(p[-1]) != i.shape[0]:
                raise ValueError(f"indptr[-1] = {int(p[-1])} but indices has {i.shape[0]} values")
        splits = [arr(s, ints, n, 1) for s, n in ((train, "train"), (val, "val"), (test, "test"))]
        types = {itype(s) for s in splits if s is not None}
        if len(types) > 1:  # one element type for the three: convert to int64
            splits = [None if s is None else np.ascontiguousarray(s, np.int64) for s in splits]
            keep += [s for s in splits if s is not None]
            types = {_INT64}
        a.split_type = types.pop() if types else _INT64
        for k, s in enumerate(splits):
            if s is not None and len(s):
                a.split[k], a.split_size[k] = s.ctypes.data, s.shape[0]
        a.check_features = int(bool(check_features))
        h = ctypes.c_void_p()
        _check(_LIB.ng_dataset_from_arrays(ctypes.byref(h), ctypes.byref(a)))
        return cls(h.value, keep)

    def _handle(self):
        if not self._h:
            raise NeargnnError("ERR_STATE", "the dataset is closed")
        return self._h

    @property
    def features_address(self):
        """The address of the feature table the library reads (for a dataset from arrays, the
        features array's own data pointer: nothing was copied)."""
        p = ctypes.c_void_p()
        _check(_LIB.ng_dataset_features(ctypes.byref(p), self._handle()))
        return p.value or 0

    @property
    def features(self):
        """The feature table the library reads, as a read-only numpy view (no copy)."""
        addr = self.features_address
        if not addr:
            return None
        buf = (ctypes.c_float * (self.nodes * self.feature_dim)).from_address(addr)
        view = np.frombuffer(buf, dtype=np.float32).reshape(self.nodes, self.feature_dim)
        view.flags.writeable = False
        return view

    def split(self, name):
        """The node ids of split "train", "val" or "test" (a copy, int64)."""
        ids = ctypes.c_void_p()
        n = ctypes.c_int64()
        _check(_LIB.ng_dataset_split(ctypes.byref(ids), ctypes.byref(n), self._handle(),
                                     _choice(_SPLITS, name, "split")))
        if n.value == 0:
            return np.zeros(0, dtype=np.int64)
        return np.ctypeslib.as_array((ctypes.c_int64 * n.value).from_address(ids.value)).copy()

    def close(self):
        """Closes the dataset (a trainer using it must be closed first)."""
        if any(t._h for t in self._trainers):
            raise NeargnnError("ERR_STATE", "a trainer still uses this dataset; close it first")
        if self._h:
            _LIB.ng_dataset_close(self._h)
            self._h = ctypes.c_void_p()
            self._keep = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None) and _LIB is not None:
            self.close()

    def __repr__(self):
        return (f"Dataset({self.name!r}, nodes={self.nodes}, edges={self.edges}, "
                f"feature_dim={self.feature_dim}, classes={self.classes})")


def _per_layer(value, n, what):
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{what}: {len(value)} values for {n} layers")
        return list(value)
    return [value] * n


class Model:
    """A GraphSAGE, GCN, GAT, GIN or SAGE-pool model, described layer by layer. Build one with
    Model.sage, Model.gcn, Model.gat, Model.from_checkpoint, or Model(kind, in_dim) and
    add_layer."""

    def __init__(self, kind, in_dim):
        h = ctypes.c_void_p()
        _check(_LIB.ng_model_create(ctypes.byref(h), _choice(_KINDS, kind, "kind"), int(in_dim)))
        self._h = h

    @classmethod
    def _build(cls, kind, in_dim, classes, hidden, fanouts, aggregator, combine, dropout,
               weight_decay, bias):
        dims = list(hidden) + [classes]
        n = len(dims)
        if len(fanouts) != n:
            raise ValueError(f"fanouts: {len(fanouts)} values for {n} layers (len(hidden) + 1)")
        m = cls(kind, in_dim)
        drop = _per_layer(dropout, n, "dropout")
        wd = _per_layer(weight_decay, n, "weight_decay")
        for l in range(n):
            # fanouts lists hops from the targets outwards: the output layer takes the first.
            m.add_layer(dims[l], fanout=fanouts[n - 1 - l], aggregator=aggregator,
                        activation="relu" if l + 1 < n else "none", dropout=drop[l],
                        weight_decay=wd[l], combine=combine, bias=bias)
        return m

    @classmethod
    def sage(cls, in_dim, classes, hidden=(256,), fanouts=(25, 10), aggregator="mean",
             combine="sum", dropout=0.0, weight_decay=0.0, bias=True):
        """GraphSAGE with len(hidden) + 1 layers. `fanouts` lists the neighbours sampled per hop
        from the targets outwards (as `neargnn train --fanouts` and PyG's num_neighbors; -1 =
        all); `dropout` and `weight_decay` are one value or one per layer from the input."""
        return cls._build("sage", in_dim, classes, hidden, list(fanouts), aggregator, combine,
                          dropout, weight_decay, bias)

    @classmethod
    def gcn(cls, in_dim, classes, hidden=(16,), fanouts=(-1, -1), dropout=0.5,
            weight_decay=(5e-4, 0.0), bias=True):
        """GCN (Kipf & Welling's recipe by default: full neighbourhoods, dropout 0.5, weight
        decay 5e-4 on the first layer)."""
        return cls._build("gcn", in_dim, classes, hidden, list(fanouts), "gcn", "sum", dropout,
                          weight_decay, bias)

    @classmethod
    def gat(cls, in_dim, classes, hidden=(8,), heads=8, output_heads=1, fanouts=(-1, -1),
            dropout=0.6, attn_dropout=0.6, weight_decay=5e-4, bias=True):
        """GAT (Velickovic et al.'s recipe by default): hidden layers of `heads` concatenated
        heads of `hidden` columns each, an output layer of `output_heads` averaged heads."""
        n = len(hidden) + 1
        if len(fanouts) != n:
            raise ValueError(f"fanouts: {len(fanouts)} values for {n} layers (len(hidden) + 1)")
        m = cls("gat", in_dim)
        drop = _per_layer(dropout, n, "dropout")
        wd = _per_layer(weight_decay, n, "weight_decay")
        for l in range(n):
            last = l + 1 == n
            m.add_layer(classes if last else hidden[l] * heads, fanout=fanouts[n - 1 - l],
                        activation="none" if last else "relu", dropout=drop[l],
                        weight_decay=wd[l], combine="sum" if last else "concat", bias=bias,
                        heads=output_heads if last else heads, attn_dropout=attn_dropout)
        return m

    @classmethod
    def from_checkpoint(cls, path):
        """The model a checkpoint was trained with (its settings are recorded in it)."""
        m = cls.__new__(cls)
        h = ctypes.c_void_p()
        _check(_LIB.ng_model_from_checkpoint(ctypes.byref(h), os.fsencode(path)))
        m._h = h
        return m

    def add_layer(self, out_dim, fanout=10, aggregator="mean", activation="relu", dropout=0.0,
                  weight_decay=0.0, combine="sum", bias=True, heads=1, attn_dropout=0.0):
        """Appends a layer (layers go from the input towards the output). GAT layers use
        `heads` and `attn_dropout`, and `combine` "concat" (heads side by side) or "sum" (heads
        averaged)."""
        o = _lib.init(_LIB, _lib.LayerOpts)
        o.fanout, o.out_dim = int(fanout), int(out_dim)
        o.aggregator = _lib.Aggregator(*_choice(_AGGREGATORS, aggregator, "aggregator"))
        o.activation = _choice({"none": 0, "relu": 1}, activation, "activation")
        o.dropout, o.weight_decay = float(dropout), float(weight_decay)
        o.combine = _choice(_COMBINES, combine, "combine")
        o.bias = int(bool(bias))
        o.heads, o.attn_dropout = int(heads), float(attn_dropout)
        _check(_LIB.ng_model_add_layer(self._h, ctypes.byref(o)))
        return self

    @property
    def kind(self):
        k, d = ctypes.c_int(), ctypes.c_int64()
        _check(_LIB.ng_model_kind_get(ctypes.byref(k), ctypes.byref(d), self._h))
        return {v: n for n, v in _KINDS.items()}[k.value]

    @property
    def in_dim(self):
        k, d = ctypes.c_int(), ctypes.c_int64()
        _check(_LIB.ng_model_kind_get(ctypes.byref(k), ctypes.byref(d), self._h))
        return d.value

    @property
    def params(self):
        """The number of trainable parameters."""
        n, p = ctypes.c_int32(), ctypes.c_int64()
        _check(_LIB.ng_model_shape(ctypes.byref(n), ctypes.byref(p), self._h))
        return p.value

    @property
    def layers(self):
        """Each layer's settings, from the input, as dicts."""
        n, p = ctypes.c_int32(), ctypes.c_int64()
        _check(_LIB.ng_model_shape(ctypes.byref(n), ctypes.byref(p), self._h))
        out = []
        for l in range(n.value):
            o = _lib.init(_LIB, _lib.LayerOpts)
            _check(_LIB.ng_model_layer_get(ctypes.byref(o), self._h, l))
            out.append({
                "out_dim": o.out_dim, "fanout": o.fanout,
                "aggregator": _LIB.ng_aggregator_name(o.aggregator).decode(),
                "activation": "relu" if o.activation else "none", "dropout": o.dropout,
                "weight_decay": o.weight_decay, "combine": "concat" if o.combine else "sum",
                "bias": bool(o.bias), "heads": o.heads, "attn_dropout": o.attn_dropout})
        return out

    @property
    def fanouts(self):
        """The fanouts per hop from the targets outwards (the order Model.sage takes)."""
        return [layer["fanout"] for layer in reversed(self.layers)]

    def close(self):
        if self._h:
            _LIB.ng_model_destroy(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self):
        if getattr(self, "_h", None) and _LIB is not None:
            self.close()

    def __repr__(self):
        return f"Model({self.kind!r}, in_dim={self.in_dim}, layers={self.layers})"



def _train_opts(owner, options):
    """ng_train_opts from keyword options (Trainer's and LinkTrainer's): enums by name, device
    and cpuset as str; the callback fields are not options. `owner` names the class in the
    TypeError an unknown option raises."""
    o = _lib.init(_LIB, _lib.TrainOpts)
    names = {f[0] for f in _lib.TrainOpts._fields_} - {
        "size", "progress", "progress_ctx", "telemetry", "telemetry_ctx"}
    for key, value in options.items():
        if key not in names:
            raise TypeError(f"{owner}: unknown option {key!r}")
        if key in Trainer._ENUMS:
            value = _choice(Trainer._ENUMS[key], value, key)
        elif key in ("device", "cpuset"):
            value = value.encode() if value is not None else None
        setattr(o, key, value)
    return o


class Trainer:
    """Trains `model` on `dataset` (both stay referenced while the trainer lives).

    Keyword options are ng_train_opts' fields and take the command's values: batch (0 = full
    batch), lr, optimizer ("adam"/"sgd"), momentum, seed, threads, device ("cpu"/"cuda"),
    normalize ("none"/"row"), eval_chunk, mode, transfer, cache_bytes, cache_ratio, workers,
    partial_workers, cpuset, period_ms, threshold, lookahead, features_memory, device_share,
    ready_window, precision. `progress(phase, done, total)` is called a few times a second;
    returning True stops (the epoch raises NeargnnError ERR_INTERRUPTED, keeping every iteration
    it completed)."""

    _ENUMS = {"optimizer": _OPTIMIZERS, "normalize": _NORMALIZE, "mode": _MODES,
              "transfer": _FETCH, "features_memory": _FEATURES_MEMORY, "precision": _PRECISION}

    def __init__(self, dataset, model, progress=None, **options):
        self._h = ctypes.c_void_p()
        self.dataset, self.model = dataset, model
        o = _train_opts("Trainer", options)
        self._errors = []
        self._progress = _progress_callback(progress, self._errors)  # kept alive here
        o.progress = self._progress
        h = ctypes.c_void_p()
        _check(_LIB.ng_trainer_create(ctypes.byref(h), dataset._handle(), model._h,
                                      ctypes.byref(o)))
        self._h = h
        dataset._trainers.add(self)

    @classmethod
    def from_checkpoint(cls, dataset, path, progress=None, **options):
        """A trainer of the model a checkpoint describes, holding its weights, for evaluate,
        predict and embed. The normalisation is the checkpoint's unless `normalize` is given;
        a given one that differs, or a damaged or edited file, raises NeargnnError."""
        model = Model.from_checkpoint(path)
        options.setdefault("normalize", checkpoint_info(path)["normalize"])
        tr = cls(dataset, model, progress, **options)
        tr.load_weights(path)
        return tr

    def _call(self, st):
        if self._errors:
            e = self._errors.pop()
            self._errors.clear()
            raise e
        _check(st)

    def epoch(self):
        """Trains one epoch; returns its figures as a dict (epoch, iterations, loss, train_acc,
        seconds, it_per_s, sampled_edges)."""
        s = _lib.EpochStats()
        s.size = ctypes.sizeof(s)
        self._call(_LIB.ng_trainer_epoch(ctypes.byref(s), self._h))
        return {k: getattr(s, k) for k in ("epoch", "iterations", "loss", "train_acc", "seconds",
                                           "it_per_s", "sampled_edges")}

    def train(self, epochs, eval_every=0):
        """Trains until `epochs` epochs are done in all (counting restored ones); returns the
        epochs' figures, with the validation accuracy every `eval_every` epochs."""
        out = []
        while self.epochs_done < epochs:
            s = self.epoch()
            if eval_every and (s["epoch"] + 1) % eval_every == 0 and self.dataset.val:
                s["val_acc"] = self.evaluate("val")[0]
            out.append(s)
        return out

    @property
    def epochs_done(self):
        return _LIB.ng_trainer_epochs_done(self._h)

    def evaluate(self, split="test"):
        """(accuracy, mean loss) on a split, with full-neighbour layer-wise inference."""
        acc, loss = ctypes.c_double(), ctypes.c_double()
        self._call(_LIB.ng_trainer_evaluate(ctypes.byref(acc), ctypes.byref(loss), self._h,
                                            _choice(_SPLITS, split, "split")))
        return acc.value, loss.value

    def predict(self, nodes=None, logits=False):
        """Predicted classes (int32 [n]) or logits (float32 [n, classes]) of `nodes` (dataset
        node ids; None = every node), from full-neighbour inference."""
        n = self.dataset.nodes
        ids = None
        if nodes is not None:
            ids = np.ascontiguousarray(nodes, dtype=np.int64)
            n = ids.shape[0]
        k = self.dataset.classes
        out = np.empty((n, k), np.float32) if logits else np.empty(n, np.int32)
        self._call(_LIB.ng_trainer_predict_nodes(
            out.ctypes.data if logits else None, None if logits else out.ctypes.data, self._h,
            None if ids is None else ids.ctypes.data, n))
        return out

    def embed(self, layer=-1, nodes=None):
        """Layer `layer`'s output (0 = the first layer's embeddings, ...; -1 = the last, the
        logits) of `nodes` (dataset node ids, any order; None = every node), float32 [n, dim],
        by layer-wise full-neighbour inference over their receptive field (docs/inference.md)."""
        dim = ctypes.c_int64()
        self._call(_LIB.ng_trainer_embed_dim(ctypes.byref(dim), self._h, int(layer)))
        n = self.dataset.nodes
        ids = None
        if nodes is not None:
            ids = np.ascontiguousarray(nodes, dtype=np.int64)
            n = ids.shape[0]
        out = np.empty((n, dim.value), np.float32)
        opts = _lib.init(_LIB, _lib.InferOpts)
        opts.layer = int(layer)
        self._call(_LIB.ng_trainer_embed(out.ctypes.data, self._h,
                                         None if ids is None else ids.ctypes.data, n,
                                         ctypes.byref(opts)))
        return out

    def save(self, path):
        """Writes a checkpoint (safetensors: weights, optimizer state, counters and the model's
        settings)."""
        self._call(_LIB.ng_trainer_save(self._h, os.fsencode(path)))

    def load(self, path):
        """Restores a checkpoint to resume training (same model, seed and dataset)."""
        self._call(_LIB.ng_trainer_load(self._h, os.fsencode(path)))

    def load_weights(self, path):
        """Loads only a checkpoint's weights, for evaluate/predict (any seed, or another dataset
        with the same feature columns and classes)."""
        self._call(_LIB.ng_trainer_load_weights(self._h, os.fsencode(path)))

    def close(self):
        if self._h:
            _LIB.ng_trainer_destroy(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None) and _LIB is not None:
            self.close()


def checkpoint_info(path):
    """What a checkpoint records: whether it describes its model, its kind, normalisation, the
    dataset's name and counts, epochs, seed, batch."""
    c = _lib.CheckpointInfo()
    c.size = ctypes.sizeof(c)
    _check(_LIB.ng_checkpoint_info_get(ctypes.byref(c), os.fsencode(path)))
    return {"described": bool(c.described),
            "kind": {v: n for n, v in _KINDS.items()}.get(c.kind),
            "layers": c.layers,
            "normalize": {v: n for n, v in _NORMALIZE.items()}.get(c.normalize),
            "dataset": c.dataset.decode(errors="replace"), "nodes": c.nodes,
            "feature_dim": c.feature_dim, "classes": c.classes, "epochs_done": c.epochs_done,
            "seed": c.seed, "batch": c.batch,
            "optimizer": {v: n for n, v in _OPTIMIZERS.items()}.get(c.optimizer)}


# Link prediction lives in its own module (it uses the names above).
from .link import LinkTrainer, split_edges  # noqa: E402

__all__ += ["LinkTrainer", "split_edges"]

# Heterogeneous graphs and relational models, likewise.
from .hetero import HeteroDataset, HeteroTrainer, generate_hetero  # noqa: E402

__all__ += ["HeteroDataset", "HeteroTrainer", "generate_hetero"]
