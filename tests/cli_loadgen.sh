#!/usr/bin/env bash
# The serving load generator, eval/loadgen.c (docs/eval.md#load-generator), on loopback only:
# against its own trivial endpoint (every request answered, all four classes counted), against
# a small Python server that checks each request's KServe body and answers with 503s, chunked
# bodies, Connection: close and bodies that run to the end of the connection (the generator's
# HTTP parsing and its counts by class), and with --timeout-ms against a server that stalls one
# class (abandoned, never counted as answered). Graph updates (--updates): against the trivial
# endpoint (each counted by it), the checking server (each body checked: a feature row of --dim
# values or an edge between two nodes), and a real `neargnn serve --log` on Cora, whose update
# counter moves by exactly the updates the generator reports acknowledged. Counts only: no
# latency or rate is asserted.
# $1: the neargnn binary; the generator is built beside it (NG_LOADGEN overrides);
# NG_DATA_DIR: the real datasets.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
LG=${NG_LOADGEN:-$(dirname "$BIN")/loadgen}
[ -x "$LG" ] || { echo "FAIL: no load generator at $LG (build the loadgen target)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "FAIL: python3 is not installed" >&2; exit 1; }

SPID=
stop() {
  if [ -n "$SPID" ]; then
    kill -TERM "$SPID" 2>/dev/null
    wait "$SPID" 2>/dev/null
    SRC=$?
    SPID=
  fi
}
trap 'stop; rm -rf "$TMP"' EXIT
# wait_url FILE: the URL a server printed as "listening on URL" (empty if it did not start).
wait_url() {
  local url=
  for _ in $(seq 1 400); do
    url=$(sed -n 's/^listening on //p' "$1" 2>/dev/null | head -n 1)
    [ -n "$url" ] && break
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.05
  done
  echo "$url"
}
# lg ARGS...: the generator, bounded in time; report in $TMP/r.json, table in $TMP/lg.err.
lg() {
  LAST="loadgen $*"
  timeout 120 "$LG" "$@" >"$TMP/r.json" 2>"$TMP/lg.err"
}
# check PYTHON: runs PYTHON with r (the report) bound; fails with the report on an assertion.
check() {
  python3 -c "import json,sys
r = json.load(open(sys.argv[1]))
$1" "$TMP/r.json" 2>"$TMP/check.err" ||
    fail "$LAST: $(cat "$TMP/check.err"); report: $(cat "$TMP/r.json")"
}
# Every class: scheduled = sent + never sent, sent = 2xx + 503 + errors + abandoned after sending.
CONSERVED='
for name, c in r["classes"].items():
    assert c["scheduled"] == c["sent"] + c["abandoned_unsent"], (name, c)
    assert c["sent"] == c["ok"] + c["refused_503"] + c["errors"] + c["abandoned"] - c["abandoned_unsent"], (name, c)
for k in ("scheduled", "sent", "ok", "refused_503", "errors", "abandoned"):
    assert r["classes"]["all"][k] == sum(c[k] for n, c in r["classes"].items() if n != "all"), k
    assert r[k] == r["classes"]["all"][k], k
'

# Node lists of the hub classes.
seq 5000 5009 >"$TMP/hubs.txt"
printf '# top nodes\n7000\n7001\n\n7002\n' >"$TMP/top.txt"

# ---- usage errors: exit 2 with a message ----
lg --nodes 10 --port 1 --model m
[ $? = 2 ] && grep -q -- "--rate" "$TMP/lg.err" || fail "no --rate: $(cat "$TMP/lg.err")"
lg --rate 10 --nodes 10 --port 1 --model m --mix full:1,bogus:1
[ $? = 2 ] && grep -q "unknown class 'bogus'" "$TMP/lg.err" || fail "bad class: $(cat "$TMP/lg.err")"
lg --rate 10 --nodes 10 --port 1 --model m --mix full:0.5,hub:0.5
[ $? = 2 ] && grep -q -- "--hubs" "$TMP/lg.err" || fail "hub without --hubs: $(cat "$TMP/lg.err")"
lg --rate 10 --port 1 --model m --mix sampled:1
[ $? = 2 ] && grep -q -- "--nodes" "$TMP/lg.err" || fail "sampled without --nodes: $(cat "$TMP/lg.err")"
lg --rate 10 --nodes 10 --url http://127.0.0.1/v2/models/m --threads 4 --connections 2
[ $? = 2 ] || fail "more threads than connections: $(cat "$TMP/lg.err")"
lg --rate 10 --nodes 10 --port 1 --model m --updates 10
[ $? = 2 ] && grep -q -- "--dim" "$TMP/lg.err" || fail "updates without --dim: $(cat "$TMP/lg.err")"
lg --rate 10 --nodes 10 --port 1 --model m --updates 10 --update-kind bogus
[ $? = 2 ] && grep -q "update-kind" "$TMP/lg.err" || fail "bad --update-kind: $(cat "$TMP/lg.err")"
lg --rate 0 --nodes 10 --port 1 --model m
[ $? = 2 ] && grep -q -- "--rate" "$TMP/lg.err" || fail "--rate 0 alone: $(cat "$TMP/lg.err")"

# ---- the trivial endpoint: everything answered, each class counted ----
"$LG" --serve-trivial 0 --threads 1 >"$TMP/trivial.out" 2>"$TMP/trivial.err" &
SPID=$!
URL=$(wait_url "$TMP/trivial.out")
[ -n "$URL" ] || { echo "FAIL: the trivial endpoint did not start: $(cat "$TMP/trivial.err")" >&2; exit 1; }
lg --url "$URL" --rate 200 --duration 1 --connections 4 --threads 2 --nodes 1000 \
  --mix full:0.4,sampled:0.2,hub:0.2,tophub:0.2 --hubs "$TMP/hubs.txt" --tophubs "$TMP/top.txt" ||
  fail "$LAST: exit $?: $(cat "$TMP/lg.err")"
check "$CONSERVED
assert set(r['classes']) == {'full', 'sampled', 'hub', 'tophub', 'all'}, list(r['classes'])
a = r['classes']['all']
assert a['scheduled'] > 100, a
for name, c in r['classes'].items():
    assert c['scheduled'] > 0 and c['sent'] == c['scheduled'] == c['ok'], (name, c)
    assert c['latency_ms']['count'] == c['ok'], (name, c)
    assert c['latency_ms']['p50'] <= c['latency_ms']['p99'] <= c['latency_ms']['max'], (name, c)
assert r['errors'] == r['refused_503'] == r['abandoned'] == 0, r
assert r['mix'] == {'full': 0.4, 'sampled': 0.2, 'hub': 0.2, 'tophub': 0.2}, r['mix']"
grep -q "^tophub " "$TMP/lg.err" || fail "$LAST: no table on stderr: $(cat "$TMP/lg.err")"
# The same seed gives the same schedule: the same counts by class.
cp "$TMP/r.json" "$TMP/first.json"
lg --url "$URL" --rate 200 --duration 1 --connections 4 --threads 2 --nodes 1000 \
  --mix full:0.4,sampled:0.2,hub:0.2,tophub:0.2 --hubs "$TMP/hubs.txt" --tophubs "$TMP/top.txt" ||
  fail "$LAST: exit $?"
python3 - "$TMP/first.json" "$TMP/r.json" <<'PY' || fail "the same seed scheduled other requests"
import json, sys
a, b = (json.load(open(p))["classes"] for p in sys.argv[1:3])
assert {k: v["scheduled"] for k, v in a.items()} == {k: v["scheduled"] for k, v in b.items()}
PY
# Updates beside the infer stream, then updates alone (--rate 0): each answered and counted
# apart from the classes, and the endpoint counts them as graph updates.
lg --url "$URL" --rate 100 --duration 1 --connections 2 --threads 1 --nodes 1000 \
  --updates 300 --update-kind mix --dim 64 --update-connections 3 ||
  fail "$LAST: exit $?: $(cat "$TMP/lg.err")"
check "$CONSERVED
u = r['updates']
assert r['update_rate'] == 300 and r['update_kind'] == 'mix' and r['dim'] == 64, r
assert u['scheduled'] > 100 and u['sent'] == u['scheduled'] == u['ok'], u
assert u['latency_ms']['count'] == u['ok'] and u['errors'] == u['abandoned'] == 0, u
assert r['classes']['all']['ok'] == r['classes']['all']['scheduled'] > 0, r"
grep -q "^updates " "$TMP/lg.err" || fail "$LAST: no updates row: $(cat "$TMP/lg.err")"
ACKED=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['updates']['ok'])" "$TMP/r.json")
lg --url "$URL" --rate 0 --duration 1 --nodes 1000 --updates 200 --dim 1433 ||
  fail "$LAST: exit $?: $(cat "$TMP/lg.err")"
check "u = r['updates']
assert u['scheduled'] > 50 and u['ok'] == u['scheduled'], u
assert r['scheduled'] == 0 and r['updates'] is not None, r"
ACKED=$((ACKED + $(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['updates']['ok'])" "$TMP/r.json")))
stop
[ "$SRC" = 0 ] || fail "the trivial endpoint exited $SRC on SIGTERM"
grep -q "answered" "$TMP/trivial.err" || fail "trivial endpoint: $(cat "$TMP/trivial.err")"
grep -q "answered [0-9]* requests, $ACKED of them graph updates" "$TMP/trivial.err" ||
  fail "the trivial endpoint did not count $ACKED graph updates: $(cat "$TMP/trivial.err")"
# Nothing listens on that port now: the generator says so and exits 1.
lg --url "$URL" --rate 10 --duration 1 --nodes 10 --connections 1 --threads 1
[ $? = 1 ] && grep -q "cannot connect" "$TMP/lg.err" || fail "closed port: $(cat "$TMP/lg.err")"

# ---- a checking server: KServe bodies, 503, chunked, Connection: close, bodies to EOF ----
cat >"$TMP/server.py" <<'PY'
import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

hubs = {int(x) for x in open(sys.argv[1]) if x.strip() and not x.startswith("#")}
top = {int(x) for x in open(sys.argv[2]) if x.strip() and not x.startswith("#")}
stall = sys.argv[3] == "stall"  # top nodes answered after 1 s
want_timeout = int(sys.argv[4])
dim = int(sys.argv[5]) if len(sys.argv) > 5 else 0  # the feature width updates must have
BODY = b'{"model_name":"m","outputs":[{"name":"class","datatype":"INT64","shape":[1],"data":[1]}]}'


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def fixed(self, code, close=False, extra=()):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        for k, v in extra:
            self.send_header(k, v)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(BODY)

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v2/models/m/graph":
            try:  # one feature row of `dim` values in [0, 1), or one edge between two nodes
                q = json.loads(body)
                if "add_edges" in q:
                    assert list(q) == ["add_edges"], q
                    ((s, d),) = q["add_edges"]
                    assert 0 <= s < 1000 and 0 <= d < 1000 and s != d, q
                else:
                    assert list(q) == ["update_features"], q
                    f = q["update_features"]
                    ((v,),) = [f["ids"]]
                    ((row,),) = [f["values"]]
                    assert 0 <= v < 1000 and len(row) == dim, (v, len(row))
                    assert all(0 <= x < 1 for x in row), row
            except (AssertionError, ValueError, KeyError, TypeError) as e:
                self.send_error(400, "bad update: %r" % (e,))
                return
            self.fixed(200)
            return
        try:
            q = json.loads(body)
            assert self.path == "/v2/models/m/infer", self.path
            (inp,) = q["inputs"]
            assert inp["name"] == "node_ids" and inp["datatype"] == "INT64", inp
            assert inp["shape"] == [1] and len(inp["data"]) == 1, inp
            assert q["outputs"] == [{"name": "class"}], q
            node = inp["data"][0]
            p = q.get("parameters", {})
            assert p.get("timeout_ms") == (want_timeout or None), p
            sampled = "fanouts" in p
            if sampled:
                assert p["fanouts"] == [10, 5] and 0 <= p["seed"] < 2 ** 53, p
            assert sampled or "seed" not in p, p
        except (AssertionError, ValueError, KeyError, TypeError) as e:
            self.send_error(400, "bad request: %r" % (e,))
            return
        if node in hubs:
            self.fixed(503, extra=[("Retry-After", "1")])
        elif node in top:
            if stall:
                time.sleep(1.0)
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (BODY[:10], BODY[10:]):
                self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\nX-Trailer: 1\r\n\r\n")
        elif sampled and p["seed"] % 2:
            # No length: the body runs to the end of the connection.
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(BODY)
            self.close_connection = True
        elif sampled:
            self.fixed(200, close=True)
        else:
            self.fixed(200)


ThreadingHTTPServer.request_queue_size = 64  # the default, 5, refuses a burst of connects
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
print("listening on http://127.0.0.1:%d/v2/models/m" % srv.server_address[1], flush=True)
srv.serve_forever()
PY
python3 "$TMP/server.py" "$TMP/hubs.txt" "$TMP/top.txt" normal 0 16 >"$TMP/py.out" 2>"$TMP/py.err" &
SPID=$!
URL=$(wait_url "$TMP/py.out")
[ -n "$URL" ] || { echo "FAIL: the Python server did not start: $(cat "$TMP/py.err")" >&2; exit 1; }
lg --url "$URL" --rate 200 --duration 1 --connections 8 --threads 2 --nodes 1000 \
  --mix full:0.4,sampled:0.3,hub:0.2,tophub:0.1 --hubs "$TMP/hubs.txt" --tophubs "$TMP/top.txt" ||
  fail "$LAST: exit $?: $(cat "$TMP/lg.err")"
check "$CONSERVED
c = r['classes']
for name in ('full', 'sampled', 'tophub'):
    assert c[name]['scheduled'] > 0 and c[name]['ok'] == c[name]['scheduled'], (name, c[name])
h = c['hub']
assert h['scheduled'] > 0 and h['refused_503'] == h['scheduled'] and h['ok'] == 0, h
assert h['refused_latency_ms']['count'] == h['refused_503'] and h['latency_ms'] is None, h
assert r['errors'] == 0 and r['abandoned'] == 0, r"
# Update bodies as the server checks them: both kinds, none refused.
lg --url "$URL" --rate 20 --duration 1 --connections 2 --threads 1 --nodes 1000 \
  --updates 100 --update-kind mix --dim 16 --update-connections 2
check "$CONSERVED
u = r['updates']
assert u['scheduled'] > 20 and u['ok'] == u['scheduled'] and u['errors'] == 0, u"
# An error status is counted by its code: the sampled class at a path the server refuses.
lg --url "${URL%/m}/other" --rate 100 --duration 1 --connections 2 --threads 1 --nodes 1000
check "$CONSERVED
c = r['classes']['full']
assert c['errors'] == c['sent'] == c['scheduled'] > 0 and c['errors_by_status'] == {'400': c['errors']}, c"
stop

# ---- --timeout-ms: a stalled class is abandoned, its deadline sent as parameters.timeout_ms ----
python3 "$TMP/server.py" "$TMP/hubs.txt" "$TMP/top.txt" stall 300 >"$TMP/py.out" 2>"$TMP/py.err" &
SPID=$!
URL=$(wait_url "$TMP/py.out")
[ -n "$URL" ] || { echo "FAIL: the Python server did not start: $(cat "$TMP/py.err")" >&2; exit 1; }
lg --url "$URL" --rate 100 --duration 1 --connections 16 --threads 2 --nodes 1000 \
  --mix full:0.7,tophub:0.3 --tophubs "$TMP/top.txt" --timeout-ms 300 ||
  fail "$LAST: exit $?: $(cat "$TMP/lg.err")"
check "$CONSERVED
t = r['classes']['tophub']
assert t['scheduled'] > 0 and t['abandoned'] == t['scheduled'] and t['ok'] == 0, t
assert r['timeout_ms'] == 300 and r['errors'] == 0, r
f = r['classes']['full']
assert r['measured_s'] >= r['duration_s'] - r['warmup_s'], r
assert abs(f['goodput_rate'] * r['measured_s'] - f['ok']) < 1, r"
# --deadline-slack-ms: the client waits past the deadline, and the stalled answers (1 s after
# their send, past the 300 ms deadline) are seen and counted as answered after it.
lg --url "$URL" --rate 20 --duration 1 --connections 64 --threads 2 --nodes 1000 \
  --mix tophub:1 --tophubs "$TMP/top.txt" --timeout-ms 300 --deadline-slack-ms 20000 --drain 60 ||
  fail "$LAST: exit $?: $(cat "$TMP/lg.err")"
check "$CONSERVED
t = r['classes']['tophub']
assert t['scheduled'] > 0 and t['sent'] == t['scheduled'] == t['abandoned'], t
assert t['answered_after_deadline'] == t['scheduled'] and t['ok'] == 0, t
assert r['answered_after_deadline'] == t['answered_after_deadline'] and r['deadline_slack_ms'] == 20000, r"
grep -q "answered after the deadline" "$TMP/lg.err" || fail "$LAST: no deadline line: $(cat "$TMP/lg.err")"
stop

# ---- updates against `neargnn serve --log` on Cora: its counter moves by what was acknowledged ----
DATA=${NG_DATA_DIR:-../shared/data}
"$BIN" convert --format planetoid --in "$DATA/cora" --out "$TMP/cora" --progress none >/dev/null ||
  { echo "FAIL: cannot convert $DATA/cora" >&2; exit 1; }
# shellcheck disable=SC2054 # "10,5" is one value
model=(--model sage --fanouts 10,5 --hidden 16 --normalize-features row)
"$BIN" train --dataset "$TMP/cora" "${model[@]}" --batch 256 --epochs 1 --eval-every 0 \
  --progress none --checkpoint "$TMP/ck.st" >/dev/null 2>"$TMP/train.err" ||
  { echo "FAIL: train: $(cat "$TMP/train.err")" >&2; exit 1; }
"$BIN" serve --dataset "$TMP/cora" --checkpoint "$TMP/ck.st" "${model[@]}" --host 127.0.0.1 \
  --port 0 --threads 2 --workers 1 --log "$TMP/updates.log" >"$TMP/serve.out" 2>"$TMP/serve.err" &
SPID=$!
URL=$(wait_url "$TMP/serve.out")
for _ in $(seq 1 1200); do # a sanitizer's build starts slowly
  [ -n "$URL" ] && break
  kill -0 "$SPID" 2>/dev/null || break
  sleep 0.05
  URL=$(sed -n 's/^listening on //p' "$TMP/serve.out" | head -n 1)
done
[ -n "$URL" ] || { echo "FAIL: serve did not start: $(cat "$TMP/serve.err")" >&2; exit 1; }
# applied: the server's neargnn_engine_updates_applied_total.
applied() {
  python3 - "${URL%/v2/models/*}/metrics" <<'PY'
import sys, urllib.request
for line in urllib.request.urlopen(sys.argv[1], timeout=60).read().decode().splitlines():
    if line.startswith("neargnn_engine_updates_applied_total"):
        print(int(float(line.split()[-1])))
PY
}
BEFORE=$(applied)
# Feature rows: every acknowledged one is a logged update. No client deadline and a long drain:
# an update the client gave up on might still be applied.
lg --url "$URL" --rate 20 --duration 2 --connections 2 --threads 1 --nodes 2708 \
  --updates 100 --update-kind features --dim 1433 --update-connections 4 --drain 300 ||
  fail "$LAST: exit $?: $(cat "$TMP/lg.err")"
check "$CONSERVED
u = r['updates']
assert u['scheduled'] > 50 and u['ok'] == u['scheduled'] and u['errors'] == u['abandoned'] == 0, u
assert r['classes']['all']['ok'] == r['classes']['all']['scheduled'], r"
ACKED=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['updates']['ok'])" "$TMP/r.json")
AFTER=$(applied)
[ -n "$BEFORE" ] && [ -n "$AFTER" ] && [ $((AFTER - BEFORE)) = "$ACKED" ] ||
  fail "the server applied $BEFORE -> $AFTER updates, the generator reports $ACKED acknowledged"
# Edges: all answered 200 (an edge the graph has is answered too, and not counted as applied).
lg --url "$URL" --rate 0 --duration 1 --nodes 2708 --updates 100 --update-kind edges --drain 300 ||
  fail "$LAST: exit $?: $(cat "$TMP/lg.err")"
check "u = r['updates']
assert u['scheduled'] > 20 and u['ok'] == u['scheduled'] and u['errors'] == 0, u"
EDGES=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['updates']['ok'])" "$TMP/r.json")
LAST_APPLIED=$(applied)
[ -n "$LAST_APPLIED" ] && [ $((LAST_APPLIED - AFTER)) -le "$EDGES" ] && [ $((LAST_APPLIED - AFTER)) -gt 0 ] ||
  fail "edges: the server applied $AFTER -> $LAST_APPLIED updates for $EDGES acknowledged"
stop
[ "$SRC" = 0 ] || fail "serve exited $SRC on SIGTERM: $(cat "$TMP/serve.err")"

cli_finish
