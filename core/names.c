/* The public name functions of the enums (ng_<enum>_name and ng_<enum>_parse), all derived from
 * the tables of names_impl.h. They live in the lowest layer because every layer above prints
 * them: the feature store and the pipeline (sched/) in their messages, the trainer, the
 * checkpoint codec and the command in theirs, and the Python package reads its tables from them. */
#include "names_impl.h"

#include "core_impl.h"

#include <stdio.h>
#include <string.h>

/* Each table must list its enum's values in order from 0: a name's index is its value, which the
 * functions below and the command's choice lists rely on. */
#define NG_INDEX_(value, name) NG__INDEX_##value,
#define NG_AT_INDEX_(value, name)                                                                  \
  _Static_assert(NG__INDEX_##value == (int)(value), #value " is out of order in its name table");
enum { NG_MODEL_NAMES(NG_INDEX_) };
enum { NG_MODE_NAMES(NG_INDEX_) };
enum { NG_FETCH_NAMES(NG_INDEX_) };
enum { NG_OPTIMIZER_NAMES(NG_INDEX_) };
enum { NG_NORMALIZE_NAMES(NG_INDEX_) };
enum { NG_CACHE_PLACEMENT_NAMES(NG_INDEX_) };
enum { NG_COLD_FETCH_NAMES(NG_INDEX_) };
enum { NG_LINK_DECODER_NAMES(NG_INDEX_) };
enum { NG_LINK_NEG_NAMES(NG_INDEX_) };
enum { NG_HETERO_MODEL_NAMES(NG_INDEX_) };
enum { NG_REDUCE_NAMES(NG_INDEX_) };
enum { NG_EDGE_WEIGHT_NAMES(NG_INDEX_) };
enum { NG_FINALIZE_NAMES(NG_INDEX_) };
enum { NG_COMBINE_NAMES(NG_INDEX_) };
enum { NG_ACTIVATION_NAMES(NG_INDEX_) };
NG_MODEL_NAMES(NG_AT_INDEX_)
NG_MODE_NAMES(NG_AT_INDEX_)
NG_FETCH_NAMES(NG_AT_INDEX_)
NG_OPTIMIZER_NAMES(NG_AT_INDEX_)
NG_NORMALIZE_NAMES(NG_AT_INDEX_)
NG_CACHE_PLACEMENT_NAMES(NG_AT_INDEX_)
NG_COLD_FETCH_NAMES(NG_AT_INDEX_)
NG_LINK_DECODER_NAMES(NG_AT_INDEX_)
NG_LINK_NEG_NAMES(NG_AT_INDEX_)
NG_HETERO_MODEL_NAMES(NG_AT_INDEX_)
NG_REDUCE_NAMES(NG_AT_INDEX_)
NG_EDGE_WEIGHT_NAMES(NG_AT_INDEX_)
NG_FINALIZE_NAMES(NG_AT_INDEX_)
NG_COMBINE_NAMES(NG_AT_INDEX_)
NG_ACTIVATION_NAMES(NG_AT_INDEX_)

int ng__name_index(const char *const *names, int n, const char *name) {
  for (int i = 0; name && i < n; i++)
    if (strcmp(names[i], name) == 0)
      return i;
  return -1;
}

/* "a, b or c": the accepted names, for a parser's message. */
static const char *name_list(char *buf, size_t cap, const char *const *names, int n) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && len < cap; i++) {
    int w = snprintf(buf + len, cap - len, "%s%s",
                     i == 0      ? ""
                     : i + 1 < n ? ", "
                                 : " or ",
                     names[i]);
    len += w > 0 ? (size_t)w : 0;
  }
  return buf;
}

static ng_status parse_name(int *out, const char *const *names, int n, const char *name,
                            const char *what) {
  const int i = ng__name_index(names, n, name);
  if (i >= 0) {
    *out = i;
    return NG_OK;
  }
  char list[256];
  return ng__err(NG_ERR_INVALID_ARG, "unknown %s '%s' (%s)", what, name ? name : "(null)",
                 name_list(list, sizeof list, names, n));
}

/* ng_<enum>_name (`unknown` for a value outside the table) and ng_<enum>_parse of one table. */
#define NG_NAME_FUNCTIONS(enum_t, fn, TABLE, what, unknown)                                        \
  static const char *const fn##_names[] = {TABLE(NG_NAME_ONLY)};                                   \
  const char *ng_##fn##_name(enum_t v) {                                                           \
    return (unsigned)v < NG_ARRAY_LEN(fn##_names) ? fn##_names[v] : (unknown);                     \
  }                                                                                                \
  ng_status ng_##fn##_parse(enum_t *out, const char *name) {                                       \
    int i = 0;                                                                                     \
    NG_CHECK(parse_name(&i, fn##_names, (int)NG_ARRAY_LEN(fn##_names), name, what));               \
    *out = (enum_t)i;                                                                              \
    return NG_OK;                                                                                  \
  }

NG_NAME_FUNCTIONS(ng_model_kind, model, NG_MODEL_NAMES, "model", "?")
NG_NAME_FUNCTIONS(ng_mode, mode, NG_MODE_NAMES, "mode", "?")
NG_NAME_FUNCTIONS(ng_fetch, fetch, NG_FETCH_NAMES, "fetch strategy", "?")
NG_NAME_FUNCTIONS(ng_optimizer, optimizer, NG_OPTIMIZER_NAMES, "optimizer", "?")
NG_NAME_FUNCTIONS(ng_normalize, normalize, NG_NORMALIZE_NAMES, "normalisation", "?")
NG_NAME_FUNCTIONS(ng_link_decoder, link_decoder, NG_LINK_DECODER_NAMES, "link decoder", "?")
NG_NAME_FUNCTIONS(ng_link_neg, link_neg, NG_LINK_NEG_NAMES, "negative sampler", "?")
NG_NAME_FUNCTIONS(ng_hetero_model_kind, hetero_model, NG_HETERO_MODEL_NAMES, "relational model",
                  "?")
NG_NAME_FUNCTIONS(ng_cache_placement, cache_placement, NG_CACHE_PLACEMENT_NAMES, "cache placement",
                  NULL)
NG_NAME_FUNCTIONS(ng_cold_fetch, cold_fetch, NG_COLD_FETCH_NAMES, "cold fetch", NULL)

static const struct {
  const char *name;
  ng_aggregator a;
} BUILTIN_AGGREGATORS[] = {
#define NG_BUILTIN_(init, nm) {nm, init},
    NG_AGGREGATOR_NAMES(NG_BUILTIN_)
#undef NG_BUILTIN_
};

static bool same_parts(const ng_aggregator *a, const ng_aggregator *b) {
  return a->reduce == b->reduce && a->edge_weight == b->edge_weight && a->finalize == b->finalize &&
         (a->self_loop != 0) == (b->self_loop != 0);
}

const char *ng_aggregator_name(ng_aggregator a) {
  if (a.user)
    return a.user->name ? a.user->name : "custom";
  for (size_t i = 0; i < NG_ARRAY_LEN(BUILTIN_AGGREGATORS); i++)
    if (same_parts(&BUILTIN_AGGREGATORS[i].a, &a))
      return BUILTIN_AGGREGATORS[i].name;
  return "custom";
}

const char *ng_aggregator_builtin_name(int32_t index) {
  return index >= 0 && (size_t)index < NG_ARRAY_LEN(BUILTIN_AGGREGATORS)
             ? BUILTIN_AGGREGATORS[index].name
             : NULL;
}

ng_status ng_aggregator_parse(ng_aggregator *out, const char *name) {
  for (size_t i = 0; name && i < NG_ARRAY_LEN(BUILTIN_AGGREGATORS); i++)
    if (strcmp(name, BUILTIN_AGGREGATORS[i].name) == 0) {
      *out = BUILTIN_AGGREGATORS[i].a;
      return NG_OK;
    }
  const char *names[NG_ARRAY_LEN(BUILTIN_AGGREGATORS)];
  for (size_t i = 0; i < NG_ARRAY_LEN(BUILTIN_AGGREGATORS); i++)
    names[i] = BUILTIN_AGGREGATORS[i].name;
  char list[128];
  return ng__err(NG_ERR_INVALID_ARG, "unknown aggregator '%s' (%s)", name ? name : "(null)",
                 name_list(list, sizeof list, names, (int)NG_ARRAY_LEN(names)));
}
