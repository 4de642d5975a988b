"""The C library through ctypes: locating libneargnn.so, the structs of include/neargnn.h and the
prototypes of the functions the package calls.

ctypes (the standard library) rather than cffi: the package then needs no compiler and no build
step, imports wherever numpy does, and a wheel-less install is copying this folder. The price is
that the structs below mirror the header by hand: tests/python/test_tables.py compares each
one's field offsets and size with the compiler's (tests/python/layout.c). Their defaults are not
repeated here: the library's ng_<struct>_init functions fill them from the NG_*_INIT macros.
"""

import ctypes
import ctypes.util
import os

c_int, c_int32, c_int64, c_uint64 = ctypes.c_int, ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64
c_double, c_float, c_size_t = ctypes.c_double, ctypes.c_float, ctypes.c_size_t
c_char_p, c_void_p = ctypes.c_char_p, ctypes.c_void_p
c_enum = ctypes.c_int  # C enums of the header are int-sized

SONAME = "libneargnn.so.0.1"

PROGRESS_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_char_p, c_double, c_double)
TELEMETRY_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)


def _candidates():
    env = os.environ.get("NEARGNN_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in (SONAME, "libneargnn.so"):
        yield os.path.join(here, name)
    try:
        from . import _installed  # written by `cmake --install`

        for name in (SONAME, "libneargnn.so"):
            yield os.path.join(_installed.LIBDIR, name)
    except ImportError:
        pass
    found = ctypes.util.find_library("neargnn")
    if found:
        yield found


def load():
    """Loads libneargnn: $NEARGNN_LIB, else next to this package, else where `cmake --install`
    put it, else the system's library path."""
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path} ({e})")
    raise ImportError(
        "neargnn: cannot find libneargnn.so; build it (cmake --build --preset cpu) and set "
        "NEARGNN_LIB to its path, or install neargnn (cmake --install). Tried: "
        + ("; ".join(tried) or "nothing"))


class OpenOpts(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("check_features", c_int), ("populate", c_int)]


class DatasetInfo(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("name", ctypes.c_char * 64), ("nodes", c_int64),
                ("edges", c_int64), ("feature_dim", c_int64), ("classes", c_int32),
                ("undirected", c_int32), ("index_bytes", c_int32), ("train", c_int64),
                ("val", c_int64), ("test", c_int64), ("orig_ids", c_int32)]


class DatasetArrays(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("name", c_char_p), ("nodes", c_int64),
                ("indptr", c_void_p), ("indptr_type", c_enum), ("indices", c_void_p),
                ("index_type", c_enum), ("edge_src", c_void_p), ("edge_dst", c_void_p),
                ("edges", c_int64), ("undirected", c_int32), ("features", c_void_p),
                ("feature_dim", c_int64), ("labels", c_void_p), ("label_type", c_enum),
                ("classes", c_int32), ("split", c_void_p * 3), ("split_size", c_int64 * 3),
                ("split_type", c_enum), ("check_features", c_int32)]


class ConvertOpts(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("format", c_enum), ("name", c_char_p), ("undirected", c_int),
                ("features", c_enum), ("feature_dim", c_int64), ("classes", c_int32),
                ("train_frac", c_double), ("val_frac", c_double), ("test_frac", c_double),
                ("split", c_char_p), ("seed", c_uint64), ("progress", PROGRESS_FN),
                ("progress_ctx", c_void_p)]


class Aggregator(ctypes.Structure):
    _fields_ = [("reduce", c_enum), ("edge_weight", c_enum), ("finalize", c_enum),
                ("self_loop", c_int32), ("user", c_void_p)]  # user: C-defined aggregators only


class LayerOpts(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("fanout", c_int32), ("aggregator", Aggregator),
                ("out_dim", c_int64), ("activation", c_enum), ("dropout", c_float),
                ("weight_decay", c_float), ("combine", c_enum), ("bias", c_int32),
                ("heads", c_int32), ("attn_dropout", c_float)]


class TrainOpts(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("batch", c_int64), ("lr", c_double), ("optimizer", c_enum),
                ("momentum", c_double), ("seed", c_uint64), ("threads", c_int),
                ("device", c_char_p), ("normalize", c_enum), ("eval_chunk", c_int64),
                ("progress", PROGRESS_FN), ("progress_ctx", c_void_p), ("mode", c_enum),
                ("cache_bytes", c_int64), ("cache_ratio", c_double), ("workers", c_int),
                ("cpuset", c_char_p), ("transfer", c_enum), ("partial_workers", c_int),
                ("period_ms", c_double), ("threshold", c_double), ("telemetry", TELEMETRY_FN),
                ("telemetry_ctx", c_void_p), ("telemetry_s", c_double), ("lookahead", c_int),
                ("features_memory", c_enum), ("device_share", c_double),
                ("trace_spans", c_int64), ("ready_window", c_int), ("precision", c_enum),
                ("op_profile_every", c_int), ("sampler", c_enum),
                ("sampler_memory_share", c_double), ("max_host_memory", c_int64),
                ("infer_host_bytes", c_int64), ("temp_dir", c_char_p), ("comm", c_void_p),
                ("cache_placement", c_enum), ("cache_bench", c_char_p), ("cold_fetch", c_enum)]


def init(lib, cls):
    """A `cls` holding its C initializer's values (NG_TRAIN_OPTS_INIT, ...), from the library's
    ng_<struct>_init function."""
    o = cls()
    getattr(lib, _INITS[cls])(ctypes.byref(o))
    return o


class FetchStats(ctypes.Structure):
    _fields_ = [(n, c_int64) for n in ("hot_rows", "cold_rows", "h2d_bytes", "zcopy_bytes",
                                       "cpu_cold_bytes", "cold_edges", "destinations")]


class EpochStats(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("epoch", c_int64), ("iterations", c_int64),
                ("loss", c_double), ("train_acc", c_double), ("seconds", c_double),
                ("it_per_s", c_double), ("sampled_edges", c_int64), ("fetch", FetchStats),
                ("workers", c_int32 * 2), ("iter_ms_median", c_double),
                ("iter_ms_p99", c_double), ("device_share", c_double), ("ranks", c_int32),
                ("allreduce_ms", c_double)]


class InferOpts(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("layer", c_int32), ("chunk", c_int64),
                ("host_bytes", c_int64), ("temp_dir", c_char_p), ("progress", PROGRESS_FN),
                ("progress_ctx", c_void_p), ("device_bytes", c_int64), ("report", c_void_p)]


class CheckpointInfo(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("described", c_int32), ("kind", c_enum),
                ("layers", c_int32), ("normalize", c_enum), ("dataset", ctypes.c_char * 64),
                ("nodes", c_int64), ("feature_dim", c_int64), ("classes", c_int32),
                ("epochs_done", c_int64), ("seed", c_uint64), ("batch", c_int64),
                ("optimizer", c_enum)]


P = ctypes.POINTER
# The mirrors that have a C initializer, and its function.
_INITS = {OpenOpts: "ng_open_opts_init", ConvertOpts: "ng_convert_opts_init",
          LayerOpts: "ng_layer_opts_init", TrainOpts: "ng_train_opts_init",
          InferOpts: "ng_infer_opts_init"}
_PROTOTYPES = {
    "ng_version": (c_char_p, []),
    "ng_status_name": (c_char_p, [c_int]),
    "ng_last_error": (c_char_p, []),
    "ng_has_cuda": (c_int, []),
    "ng_dataset_open": (c_int, [P(c_void_p), c_char_p, P(OpenOpts)]),
    "ng_dataset_from_arrays": (c_int, [P(c_void_p), P(DatasetArrays)]),
    "ng_dataset_close": (None, [c_void_p]),
    "ng_dataset_info_get": (c_int, [P(DatasetInfo), c_void_p]),
    "ng_dataset_features": (c_int, [P(c_void_p), c_void_p]),
    "ng_dataset_split": (c_int, [P(c_void_p), P(c_int64), c_void_p, c_int]),
    "ng_dataset_orig_ids": (c_int, [P(c_void_p), c_void_p]),
    "ng_dataset_convert": (c_int, [c_char_p, c_char_p, P(ConvertOpts)]),
    "ng_model_create": (c_int, [P(c_void_p), c_int, c_int64]),
    "ng_model_add_layer": (c_int, [c_void_p, P(LayerOpts)]),
    "ng_model_shape": (c_int, [P(c_int32), P(c_int64), c_void_p]),
    "ng_model_kind_get": (c_int, [P(c_int), P(c_int64), c_void_p]),
    "ng_model_layer_get": (c_int, [P(LayerOpts), c_void_p, c_int32]),
    "ng_model_from_checkpoint": (c_int, [P(c_void_p), c_char_p]),
    "ng_model_destroy": (None, [c_void_p]),
    "ng_aggregator_name": (c_char_p, [Aggregator]),
    "ng_aggregator_parse": (c_int, [P(Aggregator), c_char_p]),
    "ng_aggregator_builtin_name": (c_char_p, [c_int32]),
    "ng_model_name": (c_char_p, [c_enum]),
    "ng_model_parse": (c_int, [P(c_enum), c_char_p]),
    "ng_mode_name": (c_char_p, [c_enum]),
    "ng_mode_parse": (c_int, [P(c_enum), c_char_p]),
    "ng_fetch_name": (c_char_p, [c_enum]),
    "ng_fetch_parse": (c_int, [P(c_enum), c_char_p]),
    "ng_optimizer_name": (c_char_p, [c_enum]),
    "ng_optimizer_parse": (c_int, [P(c_enum), c_char_p]),
    "ng_normalize_name": (c_char_p, [c_enum]),
    "ng_normalize_parse": (c_int, [P(c_enum), c_char_p]),
    "ng_trainer_create": (c_int, [P(c_void_p), c_void_p, c_void_p, P(TrainOpts)]),
    "ng_trainer_epoch": (c_int, [P(EpochStats), c_void_p]),
    "ng_trainer_evaluate": (c_int, [P(c_double), P(c_double), c_void_p, c_int]),
    "ng_trainer_predict_nodes": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_int64]),
    "ng_trainer_embed_dim": (c_int, [P(c_int64), c_void_p, c_int32]),
    "ng_trainer_embed": (c_int, [c_void_p, c_void_p, c_void_p, c_int64, P(InferOpts)]),
    "ng_trainer_save": (c_int, [c_void_p, c_char_p]),
    "ng_trainer_load": (c_int, [c_void_p, c_char_p]),
    "ng_trainer_load_weights": (c_int, [c_void_p, c_char_p]),
    "ng_trainer_epochs_done": (c_int64, [c_void_p]),
    "ng_trainer_destroy": (None, [c_void_p]),
    "ng_checkpoint_info_get": (c_int, [P(CheckpointInfo), c_char_p]),
}
_PROTOTYPES.update({fn: (None, [P(cls)]) for cls, fn in _INITS.items()})


def bind(lib):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib
