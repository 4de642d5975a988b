import json, sys
from collections import defaultdict
doc = json.load(open(sys.argv[1]))
names = {}
sp = []
for e in doc.get("traceEvents", []):
    if e.get("ph") == "M" and e.get("name") == "thread_name":
        names[e["tid"]] = e["args"]["name"]
    elif e.get("ph") == "X":
        sp.append((e["tid"], e["name"], float(e["ts"]), float(e["dur"])))
sp.sort(key=lambda s: s[2])
ep = [s for s in sp if s[0] == 0 and s[1] == "epoch"]
print("threads", names)
print("epochs", [(round(s[2] / 1e3, 1), round(s[3] / 1e3, 1)) for s in ep])
for k, e in enumerate(ep[:2]):
    agg = defaultdict(lambda: [0.0, 0, 0.0])
    for s in sp:
        if s[0] == 0 and s[1] != "epoch" and e[2] <= s[2] < e[2] + e[3]:
            a = agg[s[1]]; a[0] += s[3] / 1e3; a[1] += 1; a[2] = max(a[2], s[3] / 1e3)
    print("epoch", k, "device thread: name total_ms count max_ms")
    for n, a in sorted(agg.items(), key=lambda x: -x[1][0]):
        print("  %-24s %8.2f %6d %8.2f" % (n, a[0], a[1], a[2]))
e = ep[0]
print("first 80 device-thread spans of epoch 0 (start ms from epoch start, dur ms)")
k = 0
for s in sp:
    if s[0] == 0 and s[1] != "epoch" and e[2] <= s[2] < e[2] + e[3]:
        print("  %8.2f %8.2f %s" % ((s[2] - e[2]) / 1e3, s[3] / 1e3, s[1])); k += 1
        if k >= 80: break
print("spans of other threads before the first device span of epoch 0 ends, first 30")
k = 0
for s in sp:
    if s[0] != 0 and s[2] < e[2] + 200e3:
        print("  t%-3s %8.2f %8.2f %s" % (s[0], (s[2] - e[2]) / 1e3, s[3] / 1e3, s[1])); k += 1
        if k >= 30: break
print("worker 0..2 spans in the first 250 ms of epoch 0")
for w in (1, 2, 3):
    k = 0
    for s in sp:
        if s[0] == w and e[2] <= s[2] < e[2] + 250e3:
            print("  t%-3s %8.2f %8.2f %s" % (s[0], (s[2] - e[2]) / 1e3, s[3] / 1e3, s[1])); k += 1
            if k >= 25: break
