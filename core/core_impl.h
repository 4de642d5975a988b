/* Internal core of neargnn: error reporting, allocation, timing. Not installed. */
#ifndef NG_CORE_IMPL_H
#define NG_CORE_IMPL_H

#include "neargnn.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define NG_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#define NG_LIKELY(x) __builtin_expect(!!(x), 1)
#define NG_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define NG_PRINTF(fmt_idx, arg_idx)
#define NG_LIKELY(x) (x)
#define NG_UNLIKELY(x) (x)
#endif

#define NG_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define NG_MIN(a, b) ((a) < (b) ? (a) : (b))
#define NG_MAX(a, b) ((a) > (b) ? (a) : (b))

/// Records the detail of a failure in the calling thread's ng_last_error() buffer and returns
/// `status`, so that error paths read `return ng__err(NG_ERR_IO, "%s: ...", path);`.
ng_status ng__err(ng_status status, const char *fmt, ...) NG_PRINTF(2, 3);
/// As ng__err(), appending ": strerror(errnum)".
ng_status ng__err_errno(ng_status status, int errnum, const char *fmt, ...) NG_PRINTF(3, 4);
/// Prefixes the current ng_last_error() with "prefix: " (adds context on the way up).
void ng__err_prefix(const char *fmt, ...) NG_PRINTF(1, 2);

/// Returns from the enclosing function when `call` fails, keeping its status and message.
#define NG_CHECK(call)                                                                             \
  do {                                                                                             \
    ng_status ng_check_st_ = (call);                                                               \
    if (NG_UNLIKELY(ng_check_st_ != NG_OK))                                                        \
      return ng_check_st_;                                                                         \
  } while (0)

/// Jumps to `label` with `st` set when `call` fails (cleanup in reverse order of acquisition).
#define NG_CHECK_GOTO(st, call, label)                                                             \
  do {                                                                                             \
    (st) = (call);                                                                                 \
    if (NG_UNLIKELY((st) != NG_OK))                                                                \
      goto label;                                                                                  \
  } while (0)

/// Allocation with a clear error: returns NULL after recording NG_ERR_NOMEM naming `what`.
void *ng__malloc(size_t bytes, const char *what);
void *ng__calloc(size_t count, size_t elem_bytes, const char *what);
/// Makes *p (realloc'd memory of *cap bytes) hold at least `bytes`, growing by half again at
/// least so that buffers sized for the largest request stop growing; contents are kept.
ng_status ng__host_reserve(void **p, size_t *cap, size_t bytes, const char *what);
/// 64-byte aligned allocation (cache lines, AVX-512); free with ng__aligned_free().
void *ng__aligned_alloc(size_t bytes, const char *what);
void ng__aligned_free(void *ptr);
/// Sorts a[0, n) ascending and drops repeats: returns how many distinct ids are left at the
/// front of `a` (the sort-unique of node id sets: a mini-batch's targets, rows to exchange).
int64_t ng__sort_unique_i64(int64_t *a, int64_t n);
/// Large anonymous mapping (transparent huge pages advised), zero-filled; free with ng__big_free().
void *ng__big_alloc(size_t bytes, const char *what);
void ng__big_free(void *ptr, size_t bytes);
/// Hands the whole pages inside [p, p + bytes) back to the kernel (MADV_DONTNEED): a shared file
/// mapping's are read again from the page cache or the file when touched; anonymous memory's
/// would read as zeros, so callers give file mappings only.
void ng__drop_pages(const void *p, size_t bytes);

/// Overflow-checked size arithmetic: false when the product or sum does not fit.
static inline bool ng__mul_ok(size_t a, size_t b, size_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}
static inline bool ng__add_ok(size_t a, size_t b, size_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

/// Monotonic time in seconds.
double ng__now(void);
/// The monotonic clock in nanoseconds.
int64_t ng__now_ns(void);

/// Copies `src` into `dst` of `cap` bytes, always NUL-terminating (truncates).
void ng__strlcpy(char *dst, const char *src, size_t cap);

/// Joins a folder and a relative path into a new string (NULL after recording NG_ERR_NOMEM).
char *ng__path_join(const char *dir, const char *rel);
/// Temporary files and folders are written beside their destination as
/// `<dst>.tmp-<pid>-XXXXXX` and renamed into place; a killed writer leaves one behind.
#define NG_TMP_INFIX ".tmp-"
/// A mkstemp/mkdtemp template for `dst` carrying this process's id; free() it. NULL: no memory.
char *ng__tmp_template(const char *dst);
/// Removes `path` and, for a folder, everything under it, without following links (best
/// effort: what cannot be removed stays). 0 once the walk is done, -1 when it could not start.
int ng__remove_tree(const char *path);
/// Removes the temporary files and folders of `dst` whose writing process has died (best
/// effort; those of live processes stay). Returns how many it removed.
int ng__tmp_sweep(const char *dst);
/// What a file of st_mode `mode` is, for messages: "a regular file", "a folder", "a FIFO (named
/// pipe)", "a character device", "a symbolic link", ...
const char *ng__file_kind(unsigned mode);
/// Checks that the file `dst` may be replaced by an atomic write (docs/guarantees.md, "Atomic
/// writes"): it is absent or a regular file (*exists tells which), and its folder exists. A
/// symbolic link, folder, device, FIFO or socket at `dst` is NG_ERR_INVALID_ARG naming what it
/// is; a missing folder is NG_ERR_NOT_FOUND naming the folder and how to create it.
ng_status ng__dst_check(const char *dst, bool *exists);
/// Begins an atomic write of the file `dst`: checks it (ng__dst_check), removes dead writers'
/// temporaries and returns in *out_tmp the path of a temporary file beside it that does not
/// exist yet; the caller creates it exclusively (O_CREAT | O_EXCL), writes it, and hands *out_tmp
/// to ng__atomic_end, which frees it.
ng_status ng__atomic_begin(char **out_tmp, const char *dst);
/// Ends an atomic write: with `st` NG_OK, syncs the temporary file, checks `dst` again, renames
/// the temporary over it (never over something that appeared at an absent `dst` meanwhile) and
/// syncs the folder; otherwise, or when one of those fails, removes the temporary. Frees `tmp`
/// (NULL: returns `st`). Returns `st`, or the status of the step that failed.
ng_status ng__atomic_end(char *tmp, const char *dst, ng_status st);
/// Writes `len` bytes of `data` to the file `dst` atomically (ng__atomic_begin/end).
ng_status ng__atomic_write(const char *dst, const void *data, size_t len);
/// Whether `path` names an existing regular file.
bool ng__file_exists(const char *path);
/// Opens `path` read-only (never blocking on a FIFO) and checks that it is a regular file; on
/// success *out_fd is open and *out_len holds its size. `missing_fix` and `irregular_fix`, when
/// not NULL, say how to fix a missing file ("path: missing; <fix>") or one that is not regular
/// ("path: not a regular file; <fix>"); without them the messages name the path only.
ng_status ng__file_open_regular(int *out_fd, size_t *out_len, const char *path,
                                const char *missing_fix, const char *irregular_fix);
/// Maps the whole regular file `path` read-only and shared (MAP_POPULATE when `populate`); unmap
/// with munmap(*out_map, *out_len). A file under `min_len` bytes fails with NG_ERR_FORMAT
/// "path: file of N bytes is too short to be <kind>", followed by "; <short_fix>" when not NULL.
ng_status ng__file_map(void **out_map, size_t *out_len, const char *path, size_t min_len,
                       const char *kind, const char *short_fix, bool populate);
/// As ng__file_map, and watches the mapping (ng__map_watch): end the watch with ng__map_unwatch
/// before unmapping it.
ng_status ng__file_map_watched(void **out_map, size_t *out_len, const char *path, size_t min_len,
                               const char *kind, const char *short_fix, bool populate);
/// Watches the read-only shared mapping [map, map + len) of the file open as `fd` (taken: closed
/// by ng__map_unwatch) named `path`: ng__map_verify then reports it shrinking, and a SIGBUS in it
/// (a read past the file's new end) prints a line naming the file before the process ends as it
/// would have without the watch (docs/guarantees.md, "Files that shrink"). A process-wide
/// SIGBUS handler is installed with the first watch; it chains to the one it replaced.
void ng__map_watch(const void *map, size_t len, int fd, const char *path);
/// Ends the watch of the mapping starting at `map` (nothing when it is not watched).
void ng__map_unwatch(const void *map);
/// NG_ERR_IO naming the file when the watched mapping holding `p` lost bytes since it was mapped
/// (its file was truncated: reading them would raise SIGBUS); NG_OK otherwise, and when `p` is
/// in no watched mapping.
ng_status ng__map_verify(const void *p);

/// Rate-limits progress callbacks: calls `fn` at most every `interval` seconds (and always for
/// the final step). Returns NG_ERR_INTERRUPTED when the callback asks to stop.
typedef struct {
  ng_progress_fn fn;
  void *ctx;
  double last;
  double interval;
} ng_progress;
void ng__progress_init(ng_progress *p, ng_progress_fn fn, void *ctx);
ng_status ng__progress(ng_progress *p, const char *phase, double done, double total, bool force);

#ifdef __cplusplus
}
#endif

#endif /* NG_CORE_IMPL_H */
