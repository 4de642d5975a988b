/* The placement of a data-parallel run's hot tier (runtime/cache_place.c, docs/distributed.md
 * "The feature cache across GPUs"): replicated (every GPU caches rows [0, H)) or partitioned
 * (the R GPUs of one host cache rows [0, R x H) striped between them, row g on GPU g mod R, read
 * by their peers through CUDA IPC), the rule that chooses, and the set-up of either over the
 * communicator. */
#ifndef NG_CACHE_PLACE_IMPL_H
#define NG_CACHE_PLACE_IMPL_H

#include "comm_impl.h"
#include "csr_impl.h"
#include "feature_store_impl.h"

/// The rule's threshold on condition 1: R x H rows must hold at least this share more of the
/// graph's row entries than H rows do ("markedly higher").
#define NG_CACHE_MIN_GAIN 0.05
/// And on condition 2: a peer read must run faster than this many times a host-to-device copy.
#define NG_CACHE_PEER_FACTOR 2.0

/// What the rule decides from.
typedef struct {
  ng_cache_placement requested;
  int ranks;                ///< ranks of the run
  int local_ranks;          ///< ranks on this rank's host
  bool device;              ///< the backend has its own memory (not the CPU backend)
  bool peer_ok;             ///< every GPU opened every peer's part (false until tried)
  bool peer_tried;          ///< peer_ok is known
  int64_t nodes, hot;       ///< the table's rows and H, the hot rows one GPU holds
  double share_h, share_rh; ///< the share of row entries into [0, H) and [0, min(R x H, nodes))
  bool shares_known;
  double peer_gbs, h2d_gbs; ///< <= 0: not known yet
  bool bench_p2p;           ///< the rates' source saw peer-to-peer copies (a bench_floor file)
} ng_cache_inputs;

typedef enum {
  NG_CACHE_GO_REPLICATED = 0, ///< replicated: decided
  NG_CACHE_GO_PARTITIONED,    ///< partitioned: decided
  NG_CACHE_GO_TRY,            ///< set partitioned up (peer access), then decide again
  NG_CACHE_GO_MEASURE,        ///< measure the rates on the partitioned set-up, then decide again
  NG_CACHE_GO_REFUSE,         ///< an error: the request cannot be met (why says so)
} ng_cache_go;

/// The rule: what to do next given what is known, and why (one sentence into why[cap]). A pure
/// function, so that the same inputs give every rank the same answer.
ng_cache_go ng__cache_decide(const ng_cache_inputs *in, char *why, size_t cap);

/// The share of the row entries of `g` pointing into [0, h1) and into [0, h2), counted over at
/// most `max_entries` entries at a fixed stride (all of them when the graph has fewer).
void ng__cache_entry_shares(const ng_csr *g, int64_t h1, int64_t h2, int64_t max_entries,
                            double *s1, double *s2);

/// The record each rank contributes to the exchange of parts (one allgather), NG_PART_MSG_BYTES
/// bytes, little-endian: magic u32 "ngpc" (0x6370676e) at 0, version u16 (1) at 4, ok u16 at 6,
/// rank i32 at 8, parts i32 at 12, hot i64 at 16, part_rows i64 at 24, the PCI id (32 bytes,
/// NUL-padded) at 32, the IPC handle (NG_IPC_HANDLE_BYTES) at 64.
#define NG_PART_MSG_BYTES 128
#define NG_PART_MSG_MAGIC 0x6370676eu
#define NG_PART_MSG_VERSION 1
typedef struct {
  int32_t ok; ///< the rank opened and exported its part (0: it could not; the others fall back)
  int32_t rank;
  int32_t parts;
  int64_t hot;       ///< the hot set, rows [0, hot): every rank must agree
  int64_t part_rows; ///< rows of this rank's part
  char pci[32];      ///< the device's PCI id, "" unknown
  unsigned char handle[NG_IPC_HANDLE_BYTES];
} ng_part_msg;

void ng__part_msg_pack(unsigned char out[NG_PART_MSG_BYTES], const ng_part_msg *m);
/// Reads rank `rank`'s record of an exchange among `parts` ranks with hot set `hot`: an error
/// naming what does not match (magic, version, rank, parts, hot set, part rows).
ng_status ng__part_msg_unpack(ng_part_msg *m, const unsigned char in[NG_PART_MSG_BYTES], int rank,
                              int parts, int64_t hot);

/// Reads "peer_gbs", "h2d_gbs" and "peer_p2p" from a bench_floor --json file.
ng_status ng__cache_bench_read(const char *path, double *peer_gbs, double *h2d_gbs, bool *p2p);

/// Opens the trainer's store by the placement: replicated exactly as ng__store_open(_bf16), or
/// partitioned over the ranks of `comm` (collective: every rank calls it, with the same
/// arguments but its own backend). `table` holds fp32 (`elem` 4) or bf16 (2) values; `hot` is H,
/// the rows one GPU holds. Fills *info (the choice, its reason and what it cost).
ng_status ng__cache_open(ng_store *st, ng_cache_info *info, struct ng_comm *comm, ng_backend *be,
                         const ng_csr *g, const void *table, size_t elem, int64_t nodes,
                         int64_t dim, int64_t hot, ng_fetch mode, bool read_only,
                         ng_cache_placement requested, const char *bench_json);

#endif /* NG_CACHE_PLACE_IMPL_H */
