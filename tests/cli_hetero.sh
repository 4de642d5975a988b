#!/usr/bin/env bash
# `neargnn generate --hetero`: a custom graph's summary lists its types and relations with the
# counts asked for, the same seed writes the same bytes whatever --threads, a preset scales, and
# options that belong to the other generator are usage errors. $1: the neargnn binary.
# shellcheck source=SCRIPTDIR/lib_cli.sh
source "$(dirname "$0")/lib_cli.sh"

TYPES=paper:2000:16,author:3k:0
RELS=author:writes:paper:4,paper:written_by:author:2.5,paper:cites:paper:6
run 0 generate --out "$TMP/h1" --hetero custom --types "$TYPES" --relations "$RELS" \
  --classes 4 --seed 3 --threads 1 --progress none --name tiny-h
[ "$(field generated)" = "$TMP/h1" ] || fail "summary does not name the folder: $(cat "$TMP/out")"
[ "$(field name)" = tiny-h ] || fail "summary: name '$(field name)', expected tiny-h"
[ "$(field nodes)" = 5000 ] || fail "summary: nodes '$(field nodes)', expected 5000"
[ "$(field classes)" = 4 ] || fail "summary: classes '$(field classes)', expected 4"
has out "paper: 2000 nodes, 16 features (target)"
has out "author: 3000 nodes, 0 features"
# Mean 4 entries per paper: about 8000, never 0.
WRITES=$(sed -n 's/^relation   (author, writes, paper): \([0-9]*\) edges$/\1/p' "$TMP/out")
[ "${WRITES:-0}" -gt 7000 ] && [ "${WRITES:-0}" -lt 9000 ] || fail "writes: '$WRITES' edges"
grep -q '"node_types"' "$TMP/h1/dataset.json" || fail "dataset.json lacks node_types"

run 0 generate --out "$TMP/h2" --hetero custom --types "$TYPES" --relations "$RELS" \
  --classes 4 --seed 3 --threads 2 --progress none --name tiny-h
for f in "$TMP"/h1/*.npy; do
  cmp -s "$f" "$TMP/h2/$(basename "$f")" || fail "$(basename "$f") differs with --threads 2"
done

# A preset at 1/1000 of ogbn-mag's size: its four types, paper the target.
run 0 generate --out "$TMP/mag" --hetero mag --scale 0.001 --progress none
[ "$(field nodes)" = 1940 ] || fail "mag at 0.001: nodes '$(field nodes)', expected 1940"
has out "paper: 736 nodes, 128 features (target)"
has out "(institution, affiliated_with, author)"

# info describes a heterogeneous folder with the heterogeneous reader.
run 0 info "$TMP/h1"
[ "$(field layout)" = heterogeneous ] || fail "info: layout '$(field layout)'"
[ "$(field nodes)" = 5000 ] || fail "info: nodes '$(field nodes)', expected 5000"
has out "(author, writes, paper): $WRITES edges"
[ ! -s "$TMP/err" ] || fail "info on a heterogeneous folder wrote to stderr: $(cat "$TMP/err")"
run 0 info "$TMP/h1" --json
has out '"layout":	"heterogeneous"'
has out '"relation":	"written_by"'
run 2 info "$TMP/h1" --gpu-memory 1G
has err "--gpu-memory applies to homogeneous datasets"
# A broken heterogeneous folder: the heterogeneous reader's refusal, naming the file.
cp -r "$TMP/h1" "$TMP/broken"
rm "$TMP/broken/paper.cites.paper.indices.npy"
run 1 info "$TMP/broken"
has err "paper.cites.paper.indices.npy: missing"

run 2 generate --out "$TMP/x" --hetero mag --nodes 10
has err "--nodes applies to homogeneous graphs"
run 2 generate --out "$TMP/x" --types "$TYPES"
has err "--types applies with --hetero only"
run 2 generate --out "$TMP/x" --hetero custom --types "$TYPES"
has err "--hetero custom needs --types and --relations"
run 2 generate --out "$TMP/x" --hetero dblp
has err "the shapes are mag, igbh and custom"
run 2 generate --out "$TMP/x" --hetero custom --types "$TYPES" --relations paper:cites:venue:2
has err "\"venue\" is not one of the node types"
[ ! -e "$TMP/x" ] || fail "a refused generate left $TMP/x"
run 1 generate --out "$TMP/h1" --hetero mag --scale 0.001 --progress none
has err "already exists"

# convert --format ogb on a folder with raw/relations/ (ogbn-mag's layout) writes the
# heterogeneous layout; --undirected adds the reverse relations.
O="$TMP/ogb"
gz() { mkdir -p "$(dirname "$O/$1")" && printf "$2" | gzip -c >"$O/$1"; }
gz raw/num-node-dict.csv.gz 'author,paper\n3,4\n'
gz raw/relations/author___writes___paper/edge.csv.gz '0,0\n1,0\n1,1\n2,3\n'
gz raw/relations/paper___cites___paper/edge.csv.gz '1,0\n2,0\n3,2\n'
gz raw/node-feat/paper/node-feat.csv.gz '0.5,1\n-2,3.25\n4,5\n6e-1,-7\n'
gz raw/node-label/paper/node-label.csv.gz '0\n1\nnan\n1\n'
gz split/time/paper/train.csv.gz '0\n1\n'
gz split/time/paper/valid.csv.gz '3\n'
gz split/time/paper/test.csv.gz ''
run 0 convert --format ogb --in "$O" --out "$TMP/mag_small" --undirected --progress none
[ "$(field converted)" = "$TMP/mag_small" ] || fail "summary does not name the folder"
[ "$(field nodes)" = 7 ] || fail "converted: nodes '$(field nodes)', expected 7"
has out "paper: 4 nodes, 2 features (target)"
has out "(paper, rev_writes, author): 4 edges"
has out "(paper, cites, paper): 6 edges"
[ "$(field splits)" = "train 2, val 1, test 0" ] || fail "converted: splits '$(field splits)'"

# train-hetero: R-GCN on a generated graph; the output (the loss bits with %a) is the same for 1
# and 2 threads; R-SAGE with a whole hop; refusals.
run 0 train-hetero --data "$TMP/h1" --hidden 16 --fanouts 5,5 --batch 64 --epochs 2 --threads 1
has out "epoch 2: loss"
has out "test: acc"
cp "$TMP/out" "$TMP/train1"
run 0 train-hetero --data "$TMP/h1" --hidden 16 --fanouts 5,5 --batch 64 --epochs 2 --threads 2
cmp -s "$TMP/out" "$TMP/train1" || fail "train-hetero: 1 and 2 threads differ: $(cat "$TMP/out")"
run 0 train-hetero --data "$TMP/h1" --model rsage --hidden 8 --fanouts 3,-1 --epochs 1
has out "epoch 1: loss"
# --checkpoint saves the model; --load into a trainer of another seed with --epochs 0 predicts
# the same classes; a checkpoint of another width is refused, naming the option.
run 0 train-hetero --data "$TMP/h1" --hidden 16 --fanouts 5,5 --batch 64 --epochs 2 \
  --checkpoint "$TMP/h.ckpt" --predict "$TMP/p1.csv"
has out "checkpoint: $TMP/h.ckpt"
has out "predictions: $TMP/p1.csv"
[ "$(head -1 "$TMP/p1.csv")" = "node,class" ] || fail "predictions: no header"
[ "$(wc -l <"$TMP/p1.csv")" -gt 10 ] || fail "predictions: too few lines"
run 0 train-hetero --data "$TMP/h1" --hidden 16 --fanouts 5,5 --epochs 0 --seed 9 \
  --load "$TMP/h.ckpt" --predict "$TMP/p2.csv"
cmp -s "$TMP/p1.csv" "$TMP/p2.csv" || fail "predictions from the checkpoint differ"
# Predictions are written whole or not at all: a missing folder is an error naming the path.
run 1 train-hetero --data "$TMP/h1" --hidden 16 --fanouts 5,5 --epochs 0 --load "$TMP/h.ckpt" \
  --predict "$TMP/no/such/p.csv"
has err "$TMP/no/such/p.csv"
run 1 train-hetero --data "$TMP/h1" --hidden 8 --fanouts 5,5 --epochs 0 --load "$TMP/h.ckpt"
has err "--hidden"

# R-GAT: the same bits for 1 and 2 threads too; --bases for R-GCN.
run 0 train-hetero --data "$TMP/h1" --model rgat --heads 2 --hidden 8 --fanouts 3,3 --epochs 1 \
  --threads 1
has out "epoch 1: loss"
cp "$TMP/out" "$TMP/gat1"
run 0 train-hetero --data "$TMP/h1" --model rgat --heads 2 --hidden 8 --fanouts 3,3 --epochs 1 \
  --threads 2
cmp -s "$TMP/out" "$TMP/gat1" || fail "train-hetero rgat: 1 and 2 threads differ: $(cat "$TMP/out")"
run 1 train-hetero --data "$TMP/h1" --model rgat --heads 3 --hidden 8 --epochs 1
has err "hidden must be a multiple of heads"
run 0 train-hetero --data "$TMP/h1" --bases 2 --hidden 8 --fanouts 3,3 --epochs 1
has out "epoch 1: loss"
run 2 train-hetero --data "$TMP/h1" --model rgin
has err "unknown value 'rgin' (expected one of: rgcn, rsage, rgat)"
run 2 train-hetero --data "$TMP/h1" --fanouts 5,-2
has err "--fanouts: -2 is not a non-negative integer or -1 (all)"
run 1 train-hetero --data "$TMP/none"

cli_finish
