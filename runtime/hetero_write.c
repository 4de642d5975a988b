/* The heterogeneous dataset writer: arrays named per type and relation in a temporary folder,
 * dataset.json written last, the folder opened and checked before it is renamed into place
 * (the homogeneous writer's publishing step, runtime/dataset_write.c). */
#include "hetero_impl.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ng_status ng__hetero_writer_begin(ng_hetero_writer *hw, const char *dst_dir) {
  memset(hw, 0, sizeof *hw);
  return ng__writer_begin(&hw->w, dst_dir);
}

ng_status ng__hetero_writer_array(ng_npy **out, ng_hetero_writer *hw, const char *file,
                                  ng_dtype dtype, int ndim, const int64_t *shape) {
  *out = NULL;
  for (int i = 0; i < hw->n; i++)
    if (strcmp(hw->a[i].file, file) == 0)
      return ng__err(NG_ERR_INTERNAL, "dataset writer: %s created twice", file);
  if (strlen(file) >= sizeof hw->a[0].file)
    return ng__err(NG_ERR_INTERNAL, "dataset writer: file name %s too long", file);
  if (hw->n == hw->cap) {
    int cap = hw->cap ? 2 * hw->cap : 16;
    void *a = realloc(hw->a, (size_t)cap * sizeof *hw->a);
    if (!a)
      return ng__err(NG_ERR_NOMEM, "out of memory (dataset writer)");
    hw->a = a;
    hw->cap = cap;
  }
  struct ng_hetero_warray *e = &hw->a[hw->n];
  memset(e, 0, sizeof *e);
  ng__strlcpy(e->file, file, sizeof e->file);
  char *path = ng__path_join(hw->w.tmp_dir, file);
  if (!path)
    return NG_ERR_NOMEM;
  ng_status st = ng__npy_create(&e->npy, path, dtype, ndim, shape);
  free(path);
  if (st != NG_OK)
    return st;
  hw->n++;
  *out = &e->npy;
  return NG_OK;
}

static ng_status write_json(const char *path, const struct ng_hetero *d, const char *source) {
  char id[2 * NG_DATASET_ID_BYTES + 1];
  NG_CHECK(ng__dataset_random_id(id));
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return ng__err(NG_ERR_NOMEM, "out of memory building dataset.json");
  cJSON_AddStringToObject(root, "format", NG_DATASET_FORMAT);
  cJSON_AddNumberToObject(root, "version", NG_DATASET_VERSION);
  cJSON_AddStringToObject(root, "name", d->info.name);
  cJSON_AddStringToObject(root, "id", id);
  cJSON_AddStringToObject(root, "index_dtype", d->info.index_bytes == 8 ? "int64" : "int32");
  cJSON_AddStringToObject(root, "feature_dtype", "float32");
  cJSON *types = cJSON_AddArrayToObject(root, "node_types");
  for (int32_t t = 0; types && t < d->info.node_types; t++) {
    cJSON *e = cJSON_CreateObject();
    if (!e || !cJSON_AddItemToArray(types, e))
      break;
    cJSON_AddStringToObject(e, "name", d->ntypes[t].name);
    cJSON_AddNumberToObject(e, "count", (double)d->ntypes[t].count);
    cJSON_AddNumberToObject(e, "feature_dim", (double)d->ntypes[t].feature_dim);
    if (d->ntypes[t].classes > 0)
      cJSON_AddNumberToObject(e, "classes", d->ntypes[t].classes);
  }
  cJSON *rels = cJSON_AddArrayToObject(root, "edge_types");
  for (int32_t r = 0; rels && r < d->info.edge_types; r++) {
    cJSON *e = cJSON_CreateObject();
    if (!e || !cJSON_AddItemToArray(rels, e))
      break;
    cJSON_AddStringToObject(e, "src", d->ntypes[d->etypes[r].src].name);
    cJSON_AddStringToObject(e, "relation", d->etypes[r].relation);
    cJSON_AddStringToObject(e, "dst", d->ntypes[d->etypes[r].dst].name);
    cJSON_AddNumberToObject(e, "edges", (double)d->etypes[r].csr.nnz);
  }
  cJSON *splits = cJSON_AddObjectToObject(root, "splits");
  if (splits) {
    cJSON_AddNumberToObject(splits, "train", (double)d->info.train);
    cJSON_AddNumberToObject(splits, "val", (double)d->info.val);
    cJSON_AddNumberToObject(splits, "test", (double)d->info.test);
  }
  cJSON_AddStringToObject(root, "source", source ? source : "");
  return ng__json_write(path, root);
}

ng_status ng__hetero_writer_commit(ng_hetero_writer *hw, const struct ng_hetero *desc,
                                   const char *source) {
  ng_status st = NG_OK;
  for (int i = 0; i < hw->n && st == NG_OK; i++) {
    char *path = ng__path_join(hw->w.tmp_dir, hw->a[i].file);
    st = path ? ng__npy_sync(&hw->a[i].npy, path) : NG_ERR_NOMEM;
    free(path);
    ng__npy_close(&hw->a[i].npy);
  }
  if (st == NG_OK) {
    char *json = ng__path_join(hw->w.tmp_dir, "dataset.json");
    st = json ? write_json(json, desc, source) : NG_ERR_NOMEM;
    free(json);
  }
  if (st == NG_OK) {
    /* As the homogeneous writer: what its own reader refuses is never published. */
    ng_hetero_t ds = NULL;
    st = ng_hetero_open(&ds, hw->w.tmp_dir, NULL);
    ng_hetero_close(ds);
    if (st != NG_OK)
      ng__err_prefix("%s: the dataset written fails its own check, so it was not kept",
                     hw->w.dst_dir);
  }
  if (st != NG_OK) {
    ng__hetero_writer_abort(hw);
    return st;
  }
  st = ng__writer_publish(&hw->w);
  ng__hetero_writer_abort(hw);
  return st;
}

void ng__hetero_writer_abort(ng_hetero_writer *hw) {
  if (!hw)
    return;
  for (int i = 0; i < hw->n; i++)
    ng__npy_close(&hw->a[i].npy);
  free(hw->a);
  ng__writer_abort(&hw->w); /* removes every file of the temporary folder */
  memset(hw, 0, sizeof *hw);
}
