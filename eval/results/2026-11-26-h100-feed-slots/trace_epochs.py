import json, sys
from collections import defaultdict
doc = json.load(open(sys.argv[1]))
sp = []
for e in doc.get("traceEvents", []):
    if e.get("ph") == "X":
        sp.append((e["tid"], e["name"], float(e["ts"]) / 1e3, float(e["dur"]) / 1e3))
sp.sort(key=lambda s: s[2])
ep = [s for s in sp if s[0] == 0 and s[1] == "epoch"]
print("epoch  start_ms  len_ms | device: take_wait_ms (n>5ms) | workers: slot_grow n ms, slot_wait ms, fetch ms, feed_wait ms, ready_wait ms")
for k, e in enumerate(ep):
    a, b = e[2], e[2] + e[3]
    ins = [s for s in sp if a <= s[2] < b]
    tw = [s[3] for s in ins if s[0] == 0 and s[1] == "take wait"]
    w = defaultdict(float); n = defaultdict(int)
    for s in ins:
        if s[0] != 0:
            w[s[1]] += s[3]; n[s[1]] += 1
    print("%3d %9.1f %8.1f | %8.1f (%d, max %.1f) | %3d %7.1f, %7.1f, %8.1f, %7.1f, %7.1f" % (
        k, a, e[3], sum(tw), sum(1 for x in tw if x > 5), max(tw) if tw else 0,
        n["slot grow"], w["slot grow"], w["slot wait"], w["fetch"], w["feed wait"], w["ready wait"]))
# between epochs
for k in range(1, len(ep)):
    print("gap before epoch %d: %.1f ms" % (k, ep[k][2] - (ep[k-1][2] + ep[k-1][3])))
# the longest take waits of the last 4 epochs and what each worker was doing
last = ep[len(ep) // 2:]
tws = sorted([s for s in sp if s[0] == 0 and s[1] == "take wait" and any(e[2] <= s[2] < e[2] + e[3] for e in last)], key=lambda s: -s[3])[:8]
for t in tws:
    print("take wait %.1f ms at %.1f" % (t[3], t[2]))
    acts = defaultdict(float)
    for s in sp:
        if s[0] != 0:
            ov = min(s[2] + s[3], t[2] + t[3]) - max(s[2], t[2])
            if ov > 0:
                acts[s[1]] += ov
    print("   workers' time in it:", {k: round(v, 1) for k, v in sorted(acts.items(), key=lambda x: -x[1])})
