/* Names of the fetch strategies and runtime modes (public API: ng_fetch_name, ng_mode_name and
 * their parsers). They live in the lowest layer because every layer above prints them: the
 * feature store and the pipeline (sched/) in their messages, the trainer and the command in
 * theirs. */
#include "core_impl.h"

#include <string.h>

static const char *const FETCH_NAMES[] = {"partial", "batch", "zcopy", "auto"};
static const char *const MODE_NAMES[] = {"auto",    "cpu",           "baseline", "zerocopy",
                                         "partial", "hybrid-static", "hybrid"};

ng_status ng_fetch_parse(ng_fetch *out, const char *name) {
  for (size_t i = 0; name && i < NG_ARRAY_LEN(FETCH_NAMES); i++)
    if (strcmp(name, FETCH_NAMES[i]) == 0) {
      *out = (ng_fetch)i;
      return NG_OK;
    }
  return ng__err(NG_ERR_INVALID_ARG, "unknown fetch strategy '%s' (partial, batch, zcopy or auto)",
                 name ? name : "(null)");
}

const char *ng_cache_placement_name(ng_cache_placement p) {
  static const char *const names[] = {"replicated", "partitioned", "auto"};
  return (unsigned)p < NG_ARRAY_LEN(names) ? names[p] : NULL;
}

const char *ng_fetch_name(ng_fetch f) {
  return (unsigned)f < NG_ARRAY_LEN(FETCH_NAMES) ? FETCH_NAMES[f] : "?";
}

ng_status ng_mode_parse(ng_mode *out, const char *name) {
  for (size_t i = 0; name && i < NG_ARRAY_LEN(MODE_NAMES); i++)
    if (strcmp(name, MODE_NAMES[i]) == 0) {
      *out = (ng_mode)i;
      return NG_OK;
    }
  return ng__err(NG_ERR_INVALID_ARG,
                 "unknown mode '%s' (auto, cpu, baseline, zerocopy, partial, hybrid-static or "
                 "hybrid)",
                 name ? name : "(null)");
}

const char *ng_mode_name(ng_mode m) {
  return (unsigned)m < NG_ARRAY_LEN(MODE_NAMES) ? MODE_NAMES[m] : "?";
}
