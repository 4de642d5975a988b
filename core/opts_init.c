/* The option structs' initializers as functions: a binding that cannot expand the header's
 * macros (the Python package, through ctypes) takes its defaults from here, so that the
 * NG_*_OPTS_INIT macros stay the only place that writes them. */
#include "core_impl.h"

void ng_open_opts_init(ng_open_opts *out) {
  *out = (ng_open_opts)NG_OPEN_OPTS_INIT;
}

void ng_convert_opts_init(ng_convert_opts *out) {
  *out = (ng_convert_opts)NG_CONVERT_OPTS_INIT;
}

void ng_layer_opts_init(ng_layer_opts *out) {
  *out = (ng_layer_opts)NG_LAYER_OPTS_INIT;
}

void ng_train_opts_init(ng_train_opts *out) {
  *out = (ng_train_opts)NG_TRAIN_OPTS_INIT;
}

void ng_infer_opts_init(ng_infer_opts *out) {
  *out = (ng_infer_opts)NG_INFER_OPTS_INIT;
}
