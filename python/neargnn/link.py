"""Link prediction (docs/link-prediction.md): edge splits and a link trainer, over the C API's
ng_dataset_split_edges and ng_link_trainer_*."""

import ctypes
import os
from ctypes import c_double, c_int, c_int32, c_int64, c_size_t, c_uint64, c_void_p

from . import _lib
from . import _LIB, _check, _choice, _enum_names, _progress_callback, _train_opts, Trainer

c_enum = ctypes.c_int
P = ctypes.POINTER

_NEG_SOURCES = {"source": 0, "uniform": 1}
_SPLITS = {"val": 1, "test": 2}


class SplitEdgesOpts(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("val", c_double), ("test", c_double),
                ("neg_per_pos", c_int32), ("seed", c_uint64), ("undirected", c_int32),
                ("threads", c_int), ("neg_source", c_int32)]


class LinkSplitInfo(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("train", c_int64), ("val", c_int64), ("test", c_int64),
                ("neg_per_pos", c_int32), ("undirected", c_int32), ("mp_edges", c_int64),
                ("seed", c_uint64), ("neg_source", c_int32)]


class LinkOpts(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("decoder", c_enum), ("neg", c_enum),
                ("neg_per_pos", c_int32), ("mlp_hidden", c_int32), ("self_pairs", c_int32)]


class LinkMetrics(ctypes.Structure):
    _fields_ = [("size", c_size_t)] + [(n, c_double) for n in (
        "auc", "ap", "mrr", "hits10", "hits50", "hits100", "loss")] + [
        ("positives", c_int64), ("negatives", c_int64)]


for _name, (_res, _args) in {
        "ng_dataset_split_edges": (c_int, [P(LinkSplitInfo), ctypes.c_char_p, P(SplitEdgesOpts)]),
        "ng_link_trainer_create": (c_int, [P(c_void_p), c_void_p, c_void_p, P(_lib.TrainOpts),
                                           P(LinkOpts)]),
        "ng_link_trainer_epoch": (c_int, [P(_lib.EpochStats), c_void_p]),
        "ng_link_trainer_evaluate": (c_int, [P(LinkMetrics), c_void_p, c_int]),
        "ng_link_trainer_set_epoch_iters": (c_int, [c_void_p, c_int64]),
        "ng_link_trainer_destroy": (None, [c_void_p]),
        "ng_link_decoder_name": (ctypes.c_char_p, [c_enum]),
        "ng_link_neg_name": (ctypes.c_char_p, [c_enum])}.items():
    getattr(_LIB, _name).restype = _res
    getattr(_LIB, _name).argtypes = _args

# Link checkpoints and the offline scoring of given pairs.
for _name, (_res, _args) in {
        "ng_link_trainer_save": (c_int, [c_void_p, ctypes.c_char_p]),
        "ng_link_trainer_load_weights": (c_int, [c_void_p, ctypes.c_char_p]),
        "ng_link_trainer_score": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_int64])}.items():
    getattr(_LIB, _name).restype = _res
    getattr(_LIB, _name).argtypes = _args

# The decoder and negative-sampler names, from the library's tables (core/names_impl.h).
_DECODERS = _enum_names(_LIB.ng_link_decoder_name)
_NEGS = _enum_names(_LIB.ng_link_neg_name)

_INFO_KEYS = ("train", "val", "test", "neg_per_pos", "undirected", "mp_edges", "seed")
_METRIC_KEYS = ("auc", "ap", "mrr", "hits10", "hits50", "hits100", "loss", "positives",
                "negatives")


def split_edges(path, val=0.05, test=0.1, neg_per_pos=100, seed=1, undirected=None,
                neg_source="source", threads=0):
    """Splits the dataset folder `path`'s edges into path/links (neargnn split-edges): held-out
    positives, `neg_per_pos` fixed negatives each ("source": the positive's source and a uniform
    destination; "uniform": random non-edges), and the message-passing graph. `undirected` None
    takes dataset.json's. Returns the split's counts as a dict."""
    o = SplitEdgesOpts(ctypes.sizeof(SplitEdgesOpts), val, test, neg_per_pos, seed,
                       -1 if undirected is None else int(bool(undirected)), threads,
                       _choice(_NEG_SOURCES, neg_source, "neg_source"))
    info = LinkSplitInfo()
    info.size = ctypes.sizeof(info)
    _check(_LIB.ng_dataset_split_edges(ctypes.byref(info), os.fsencode(path), ctypes.byref(o)))
    out = {k: getattr(info, k) for k in _INFO_KEYS}
    out["neg_source"] = {v: n for n, v in _NEG_SOURCES.items()}[info.neg_source]
    return out


class LinkTrainer:
    """Trains `model` (its last layer is the node embedding) for link prediction on `dataset`'s
    split (split_edges first). decoder "dot"/"mlp", neg "uniform"/"degree", neg_per_pos,
    self_pairs (GAE's A + I), mlp_hidden, epoch_iters (at most that many mini-batches per epoch;
    0: every training edge); the other keyword options are Trainer's (batch counts positive
    edges, 0 = full batch)."""

    def __init__(self, dataset, model, decoder="dot", neg="uniform", neg_per_pos=1,
                 self_pairs=False, mlp_hidden=64, epoch_iters=0, progress=None, **options):
        self._h = ctypes.c_void_p()
        self.dataset, self.model = dataset, model
        o = _train_opts("LinkTrainer", options)
        self._errors = []
        self._progress = _progress_callback(progress, self._errors)
        o.progress = self._progress
        lo = LinkOpts(ctypes.sizeof(LinkOpts), _choice(_DECODERS, decoder, "decoder"),
                      _choice(_NEGS, neg, "neg"), neg_per_pos, mlp_hidden, int(bool(self_pairs)))
        h = ctypes.c_void_p()
        _check(_LIB.ng_link_trainer_create(ctypes.byref(h), dataset._handle(), model._h,
                                           ctypes.byref(o), ctypes.byref(lo)))
        self._h = h
        dataset._trainers.add(self)
        if epoch_iters:
            self._call(_LIB.ng_link_trainer_set_epoch_iters(self._h, epoch_iters))

    _call = Trainer._call

    def epoch(self):
        """Trains one epoch; returns epoch, iterations, loss, train_acc, seconds, it_per_s."""
        s = _lib.EpochStats()
        s.size = ctypes.sizeof(s)
        self._call(_LIB.ng_link_trainer_epoch(ctypes.byref(s), self._h))
        return {k: getattr(s, k) for k in ("epoch", "iterations", "loss", "train_acc", "seconds",
                                           "it_per_s")}

    def evaluate(self, split="test"):
        """AUC, AP, MRR, Hits@10/50/100 and the loss of split "val" or "test" against its fixed
        negatives, as a dict."""
        m = LinkMetrics()
        m.size = ctypes.sizeof(m)
        self._call(_LIB.ng_link_trainer_evaluate(ctypes.byref(m), self._h,
                                                 _choice(_SPLITS, split, "split")))
        return {k: getattr(m, k) for k in _METRIC_KEYS}

    def save(self, path):
        """Writes a link checkpoint: the GNN as Trainer.save writes it, plus the decoder (its
        name, and the MLP's weights). `neargnn serve` answers pair-score requests from it."""
        self._call(_LIB.ng_link_trainer_save(self._h, os.fsencode(path)))

    def load_weights(self, path):
        """Loads a link checkpoint's weights (the GNN's and the decoder's; same model, feature
        normalisation and decoder)."""
        self._call(_LIB.ng_link_trainer_load_weights(self._h, os.fsencode(path)))

    def score(self, src, dst):
        """The decoder's scores of the pairs (src[i], dst[i]) as a float32 array, from
        full-neighbour layer-wise embeddings over the split's message-passing graph (the bits
        `neargnn serve` answers on the same graph on the CPU)."""
        import numpy as np
        s = np.ascontiguousarray(src, dtype=np.int64).reshape(-1)
        d = np.ascontiguousarray(dst, dtype=np.int64).reshape(-1)
        if s.shape != d.shape:
            raise ValueError("score: src and dst must have the same length")
        out = np.empty(len(s), dtype=np.float32)
        self._call(_LIB.ng_link_trainer_score(out.ctypes.data, self._h, s.ctypes.data,
                                              d.ctypes.data, len(s)))
        return out

    def close(self):
        if self._h:
            _LIB.ng_link_trainer_destroy(self._h)
            self._h = ctypes.c_void_p()

    # As Trainer's: a context manager, and closed when collected (each calls this class's close).
    __enter__, __exit__, __del__ = Trainer.__enter__, Trainer.__exit__, Trainer.__del__
