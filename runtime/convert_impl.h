/* Internals shared by the dataset converters (runtime/convert*.c): a streaming line reader over
 * plain or gzip text, strict number parsers, and the loaders every format uses (edge lists into
 * a CSR, split files). */
#ifndef NG_CONVERT_IMPL_H
#define NG_CONVERT_IMPL_H

#include "dataset_impl.h"

#include <zlib.h>

/// One conversion in progress: the validated options, the output being written and the counts
/// that end up in dataset.json.
typedef struct {
  ng_convert_opts opts;  ///< a validated copy (strings borrowed from the caller)
  const char *src;       ///< the input path as given
  ng_dataset_writer w;   ///< the output (a temporary folder until commit)
  ng_dataset_meta meta;  ///< dataset.json contents
  ng_progress progress;  ///< rate-limited callback
  int64_t removed_dups;  ///< duplicate adjacency entries dropped
  int64_t removed_loops; ///< self-loop lines skipped
  char detail[256];      ///< format-specific words for dataset.json "source"
} ng_conv;

/// Reads a text file line by line in large chunks, through zlib, so that gzip files and plain
/// files are read alike (gzread passes plain files through). Memory: one chunk, grown only for a
/// line longer than a chunk.
typedef struct {
  gzFile gz;
  const char *path; ///< for messages (borrowed)
  char *buf;
  size_t cap, len, pos;
  int64_t line; ///< 1-based number of the line last returned
  bool eof;
  double file_bytes; ///< size on disk, the progress total
  ng_progress *progress;
  const char *phase;
} ng_lines;

/// Opens `path` for reading (NG_ERR_NOT_FOUND when it does not exist). Progress goes to
/// `progress` (may be NULL) under `phase`, once per chunk read.
ng_status ng__lines_open(ng_lines *r, const char *path, ng_progress *progress, const char *phase);
/// The next line, NUL-terminated in place without its end of line ("\n" or "\r\n"); *line is
/// NULL at the end of the file. Fails on read errors, corrupt gzip data and interruption.
ng_status ng__lines_next(ng_lines *r, char **line);
/// Closes; accepts a zeroed or closed reader.
void ng__lines_close(ng_lines *r);

/// The 1-based column of `at` in `line`, for error messages: they name the file, line and column
/// but never echo the text, which may be anything the path points to (a link to a secret).
static inline size_t ng__column(const char *line, const char *at) {
  return (size_t)(at - line) + 1;
}
/// Skips blanks (spaces and tabs).
static inline const char *ng__skip_blanks(const char *p) {
  while (*p == ' ' || *p == '\t')
    p++;
  return p;
}
/// Parses a non-negative decimal integer at *p and advances *p past it; false when there is no
/// digit or the value does not fit int64 (then *p is unchanged).
bool ng__parse_u63(const char **p, int64_t *out);
/// Parses a decimal floating-point number ([sign] digits [. digits] [e [sign] digits]) at *p
/// into the nearest float and advances *p; false when malformed (then *p is unchanged). Words
/// such as "nan" or "inf" are malformed here: features must be finite.
bool ng__parse_float(const char **p, float *out);

/// How the two ids of an edge line are separated.
typedef enum {
  NG_SEP_BLANKS = 0, ///< one or more spaces or tabs; '#' starts a comment line
  NG_SEP_COMMA,      ///< exactly one comma (CSV)
} ng_sep;

/// Reads lines up to the next edge, skipping blank lines and (NG_SEP_BLANKS) '#'
/// comments; *got is
/// false at the end of the input.
ng_status ng__lines_next_edge(ng_lines *r, ng_sep sep, int64_t *src, int64_t *dst, bool *got);

/// An order-sensitive digest of the edges a pass read: the second pass of a conversion must see
/// the very lines the first one counted, or the row cursors would run into each other.
static inline uint64_t ng__edge_digest(uint64_t h, int64_t src, int64_t dst) {
  h ^= (uint64_t)src * 0x9e3779b97f4a7c15ULL + (uint64_t)dst;
  h ^= h >> 29;
  return h * 0xbf58476d1ce4e5b9ULL;
}

/// Turns row lengths ptr[0, nodes) into row starts and stores their total in ptr[nodes].
int64_t ng__counts_to_offsets(int64_t *ptr, int64_t nodes);

/// Maps an id of the input to a node id; returns -1 for an id it does not know.
typedef int64_t (*ng_id_map)(void *ctx, int64_t id);

/// The second pass over an edge list whose first pass filled `ptr` (the output's indptr array,
/// nodes + 1 entries: row starts and the total) and computed `digest` over the same lines
/// (self loops excluded): rewinds `r`, writes the indices array through `map` (NULL: ids are
/// node ids), then sorts rows, drops duplicates, shrinks the file and sets the graph counts of
/// c->meta.info.
ng_status ng__conv_fill_edges(ng_conv *c, ng_lines *r, ng_sep sep, int64_t *ptr, int64_t nodes,
                              bool undirected, uint64_t digest, ng_id_map map, void *map_ctx);

/// Reads the edge list at `path` (lines "src dst"; an edge src -> dst puts src into row dst,
/// i.e. dst aggregates from src; `undirected` also puts dst into row src) for a graph of
/// `nodes` nodes (`nodes_from` says where that count came from, for messages). Two streaming
/// passes: count the row lengths into the indptr array, then fill the indices array; then rows
/// are sorted, duplicates removed and the indices file shrunk. Self loops are skipped.
ng_status ng__conv_edges(ng_conv *c, const char *path, ng_sep sep, int64_t nodes,
                         const char *nodes_from, bool undirected);

/// Reads a split file (one node id per line) into the split array `id` of the output.
/// `member[v]` (one byte per node, shared by the three splits) detects ids listed twice or
/// already in another split; `labels` (NULL when there are none) rejects unlabelled nodes.
/// Sets the split's size in c->meta.info; an empty split writes no array.
ng_status ng__conv_split(ng_conv *c, ng_array_id id, const char *path, int64_t nodes,
                         uint8_t *member, const int32_t *labels);

/// Appends `v` to the growing id list `*ids` (realloc'd, the caller frees it) of `*count` ids
/// in `*cap` slots; `path` names the file being read in the out-of-memory message.
ng_status ng__conv_push_id(int64_t **ids, int64_t *count, int64_t *cap, int64_t v,
                           const char *path);
/// Sets c->meta.info.classes from `labels` (n entries; -1 = unlabelled, others already checked
/// to lie in [0, NG_MAX_CLASSES)): the largest label + 1. Refuses labels where nobody has a
/// label, and sparse labels that would leave most classes empty (see NG_SPARSE_CLASS_FACTOR),
/// naming `path` and the row (`line_numbers`: "path:LINE" with LINE = row + 1, else "node ROW").
ng_status ng__conv_classes(ng_conv *c, const int32_t *labels, int64_t n, const char *path,
                           bool line_numbers);

/// The converters, each filling c->w and c->meta.info (all but the name) and c->detail.
ng_status ng__convert_planetoid(ng_conv *c);
ng_status ng__convert_snap(ng_conv *c);
ng_status ng__convert_ogb(ng_conv *c);
/// An OGB link-property folder (ogbl-*: no raw/node-label.csv.gz), which ng__convert_ogb hands
/// over: the graph, the features and, from a plain-file split, the links/ folder.
ng_status ng__convert_ogbl(ng_conv *c);

/* ---- pieces of the OGB node-property converter (runtime/convert_ogb.c) that the link-property
 * one shares ---- */

/// Refuses a node count that a file of one line per `per_line` nodes (`what` names those lines
/// in the message) cannot hold, before anything is allocated for it.
ng_status ng__ogb_check_node_count(int64_t nodes, const char *path, int per_line, const char *what);
/// Reads raw/num-node-list.csv.gz at `path`: one node count.
ng_status ng__ogb_node_count(ng_conv *c, const char *path, int64_t *nodes);
/// Reads raw/node-feat.csv.gz at `path` (one line of D floats per node) into the features.
ng_status ng__ogb_features(ng_conv *c, const char *path, int64_t nodes);
/// The split scheme under `split_dir`: opts.split, or the only folder there; *scheme (the
/// caller frees it) is NULL when there is no split/ folder.
ng_status ng__ogb_choose_split(ng_conv *c, const char *split_dir, char **scheme);

#endif /* NG_CONVERT_IMPL_H */
