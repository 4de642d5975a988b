"""Heterogeneous graphs (docs/heterogeneous.md): the generator, opening a typed dataset and
training a relational model (R-GCN, R-SAGE), over the C API's ng_hetero_generate,
ng_hetero_open and ng_hetero_trainer_*."""

import ctypes
import os
import weakref
from ctypes import c_char_p, c_double, c_float, c_int, c_int32, c_int64, c_size_t, c_uint64, \
    c_void_p

import numpy as np

from . import _LIB, _SPLITS, NeargnnError, _check, _choice, _enum_names

c_enum = ctypes.c_int
P = ctypes.POINTER


class HeteroGenerateOpts(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("name", c_char_p), ("types", c_char_p),
                ("relations", c_char_p), ("target", c_char_p), ("scale", c_double),
                ("classes", c_int32), ("homophily", c_double), ("feature_noise", c_double),
                ("train_frac", c_double), ("val_frac", c_double), ("test_frac", c_double),
                ("seed", c_uint64), ("threads", c_int), ("progress", c_void_p),
                ("progress_ctx", c_void_p)]


class HeteroTrainOpts(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("model", c_enum), ("layers", c_int32), ("hidden", c_int64),
                ("embed_dim", c_int64), ("fanouts", P(c_int32)), ("rel_fanouts", P(c_int32)),
                ("batch_size", c_int32), ("eval_batch", c_int32), ("lr", c_float),
                ("weight_decay", c_float), ("seed", c_uint64), ("threads", c_int32),
                ("dropout", c_float), ("bases", c_int32), ("heads", c_int32)]


class HeteroInfo(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("name", ctypes.c_char * 64), ("node_types", c_int32),
                ("edge_types", c_int32), ("nodes", c_int64), ("edges", c_int64),
                ("target", c_int32), ("classes", c_int32), ("index_bytes", c_int32),
                ("homogeneous", c_int32), ("train", c_int64), ("val", c_int64),
                ("test", c_int64)]


for _name, (_res, _args) in {
        "ng_hetero_info_get": (c_int, [P(HeteroInfo), c_void_p]),
        "ng_hetero_generate": (c_int, [c_char_p, P(HeteroGenerateOpts)]),
        "ng_hetero_open": (c_int, [P(c_void_p), c_char_p, c_void_p]),
        "ng_hetero_close": (None, [c_void_p]),
        "ng_hetero_trainer_create": (c_int, [P(c_void_p), c_void_p, P(HeteroTrainOpts)]),
        "ng_hetero_trainer_destroy": (None, [c_void_p]),
        "ng_hetero_trainer_epoch": (c_int, [P(c_double), P(c_double), c_void_p]),
        "ng_hetero_trainer_evaluate": (c_int, [P(c_double), P(c_double), c_void_p, c_int]),
        "ng_hetero_trainer_params": (c_int, [P(P(c_float)), P(c_int64), c_void_p]),
        "ng_hetero_train_opts_init": (None, [P(HeteroTrainOpts)]),
        "ng_hetero_trainer_save": (c_int, [c_void_p, c_char_p]),
        "ng_hetero_trainer_load_weights": (c_int, [c_void_p, c_char_p]),
        "ng_hetero_trainer_predict": (c_int, [P(c_float), c_void_p, P(c_int64), c_int64]),
        "ng_hetero_model_name": (c_char_p, [c_enum])}.items():
    getattr(_LIB, _name).restype = _res
    getattr(_LIB, _name).argtypes = _args

# The model names, from the library's table (core/names_impl.h).
_MODELS = _enum_names(_LIB.ng_hetero_model_name)


def default_train_opts():
    """ng_hetero_train_opts holding the library's defaults (NG_HETERO_TRAIN_OPTS_INIT)."""
    o = HeteroTrainOpts()
    _LIB.ng_hetero_train_opts_init(ctypes.byref(o))
    return o


def generate_hetero(path, types, relations, target=None, classes=16, homophily=0.7,
                    noise=1.0, train=0.1, val=0.1, test=0.2, seed=1, scale=1.0, threads=0,
                    name=None):
    """Writes a heterogeneous graph into the new folder `path` (neargnn generate --hetero
    custom): `types` "NAME:COUNT:DIM,...", `relations` "SRC:RELATION:DST:DEGREE,..."."""
    o = HeteroGenerateOpts(ctypes.sizeof(HeteroGenerateOpts), name and name.encode(),
                           types.encode(), relations.encode(), target and target.encode(),
                           scale, classes, homophily, noise, train, val, test, seed, threads,
                           None, None)
    _check(_LIB.ng_hetero_generate(os.fsencode(path), ctypes.byref(o)))


class HeteroDataset:
    """An open heterogeneous dataset folder (ng_hetero_open); close() or use as a context
    manager. Trainers over it must be closed first."""

    def __init__(self, path):
        self._h = c_void_p()
        self._trainers = weakref.WeakSet()  # trainers borrowing this dataset
        h = c_void_p()
        _check(_LIB.ng_hetero_open(ctypes.byref(h), os.fsencode(path), None))
        self._h = h
        info = HeteroInfo()
        info.size = ctypes.sizeof(HeteroInfo)
        _check(_LIB.ng_hetero_info_get(ctypes.byref(info), h))
        self.classes = info.classes  # the target type's
        self.target = info.target

    def close(self):
        """Closes the dataset (a trainer using it must be closed first)."""
        if any(t._h for t in self._trainers):
            raise NeargnnError("ERR_STATE", "a trainer still uses this dataset; close it first")
        if self._h:
            _LIB.ng_hetero_close(self._h)
            self._h = c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None) and _LIB is not None:
            self.close()


class HeteroTrainer:
    """Trains a relational model ("rgcn", "rsage" or "rgat") on the target type of `dataset`
    (ng_hetero_trainer_*, CPU backend). fanouts: one per hop (block 0 first) for every
    relation; the other keywords are ng_hetero_train_opts' fields, and one left out keeps the
    library's default (NG_HETERO_TRAIN_OPTS_INIT, read through ng_hetero_train_opts_init)."""

    _FIELDS = ("layers", "hidden", "embed_dim", "batch_size", "eval_batch", "lr",
               "weight_decay", "seed", "threads", "dropout", "bases", "heads")

    def __init__(self, dataset, model=None, fanouts=None, **opts):
        self._h = c_void_p()
        self.dataset = dataset
        unknown = sorted(set(opts) - set(self._FIELDS))
        if unknown:
            raise TypeError(f"unknown option(s) {', '.join(unknown)}; the options are model, "
                            f"fanouts, {', '.join(self._FIELDS)}")
        o = default_train_opts()
        if model is not None:
            o.model = _choice(_MODELS, model, "model")
        for k, v in opts.items():
            setattr(o, k, v)
        f = None
        if fanouts is not None:
            if len(fanouts) != o.layers:
                raise ValueError(f"fanouts must have {o.layers} entries (got {len(fanouts)})")
            f = (c_int32 * o.layers)(*fanouts)
        o.fanouts = f
        h = c_void_p()
        _check(_LIB.ng_hetero_trainer_create(ctypes.byref(h), dataset._h, ctypes.byref(o)))
        self._h = h
        dataset._trainers.add(self)

    def epoch(self):
        """Trains one epoch; returns {"loss", "train_acc"}."""
        loss, acc = c_double(), c_double()
        _check(_LIB.ng_hetero_trainer_epoch(ctypes.byref(loss), ctypes.byref(acc), self._h))
        return {"loss": loss.value, "train_acc": acc.value}

    def evaluate(self, split="test"):
        """(accuracy, mean loss) on split "train", "val" or "test", every neighbour."""
        acc, loss = c_double(), c_double()
        _check(_LIB.ng_hetero_trainer_evaluate(ctypes.byref(acc), ctypes.byref(loss), self._h,
                                               _choice(_SPLITS, split, "split")))
        return acc.value, loss.value

    def params(self):
        """A copy of the parameters as a float32 array."""
        p, n = P(c_float)(), c_int64()
        _check(_LIB.ng_hetero_trainer_params(ctypes.byref(p), ctypes.byref(n), self._h))
        return np.ctypeslib.as_array(p, shape=(n.value,)).copy()

    def save(self, path):
        """Saves the model (weights, optimizer state, description) as a checkpoint."""
        _check(_LIB.ng_hetero_trainer_save(self._h, os.fsencode(path)))

    def load_weights(self, path):
        """Takes the weights of a checkpoint of the same model and dataset schema."""
        _check(_LIB.ng_hetero_trainer_load_weights(self._h, os.fsencode(path)))

    def predict(self, ids):
        """Logits [len(ids), classes] (float32) of target-type nodes, every neighbour."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        n = ids.size
        out = np.empty((n, self.dataset.classes), dtype=np.float32)
        _check(_LIB.ng_hetero_trainer_predict(out.ctypes.data_as(P(c_float)), self._h,
                                              ids.ctypes.data_as(P(c_int64)), n))
        return out

    def close(self):
        if self._h:
            _LIB.ng_hetero_trainer_destroy(self._h)
            self._h = c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None) and _LIB is not None:
            self.close()
