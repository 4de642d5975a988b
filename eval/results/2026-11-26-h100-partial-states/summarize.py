import json, sys, struct, statistics as st
for f in sys.argv[1:]:
    d = json.load(open(f))
    ep = d['epochs']; s = [e['seconds'] for e in ep]
    steady = st.median(s[2:]) if len(s) > 2 else s[-1]
    h2d = [e['h2d_bytes'] / 1e9 for e in ep]
    loss = d['final_loss']
    bits = struct.unpack('<I', struct.pack('<f', loss))[0]
    print('%-28s it/s %7.1f  epochs %s  e0/steady %.2f  first_it %.2f s  wall %.2f s  h2d GB/epoch %.2f  peak_rss %.2f GB  loss %.10f (%08x)' % (
        f.split('/')[-1], d['it_per_s'], ' '.join('%.3f' % x for x in s), s[0] / steady,
        d.get('first_iteration_s', 0), d.get('wall_to_last_step_s', 0), h2d[-1], d['memory'].get('peak_rss', 0) / 1e9, loss, bits))
