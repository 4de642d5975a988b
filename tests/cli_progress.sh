#!/usr/bin/env bash
# Progress and Ctrl-C of `neargnn generate` on a graph too large to finish within the test:
#  - stderr not a terminal: plain progress lines, no \r; stdout stays empty;
#  - stderr a terminal (a pseudo-terminal): one line redrawn with \r;
#  - SIGINT after the first progress report: exit 130, a message, and no folder (not even the
#    temporary one) left behind.
# $1: the neargnn binary.
# shellcheck source=SCRIPTDIR/lib_cli.sh
source "$(dirname "$0")/lib_cli.sh"

python3 - "$BIN" "$TMP" <<'EOF'
import os, pty, select, signal, subprocess, sys, time

binary, tmp = sys.argv[1], sys.argv[2]
# 160 M edges: many times the second or two this test lets it run before interrupting it.
ARGS = ["generate", "--nodes", "10M", "--avg-degree", "16", "--dim", "0"]
WAIT_S = 15  # the first report comes after about a second; give a slow (sanitizer) build time
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)


def read_until(fd, needle, deadline):
    """Reads fd until `needle` appears (or EOF, or the deadline); returns all bytes read."""
    data = b""
    while needle not in data and time.time() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # a pty reads EIO once the child closed it
                break
            if not chunk:
                break
            data += chunk
    return data


def interrupt_and_check(proc, out_dir, label):
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        check(False, f"{label}: did not stop within {WAIT_S} s of SIGINT")
        return
    check(proc.returncode == 130, f"{label}: exit {proc.returncode} after SIGINT, expected 130")
    parent = os.path.dirname(out_dir)
    left = [n for n in os.listdir(parent) if n.startswith(os.path.basename(out_dir))]
    check(not left, f"{label}: interrupted run left {left} behind")


# ---- stderr is a pipe: plain lines ----
out_dir = os.path.join(tmp, "plain")
proc = subprocess.Popen([binary] + ARGS + ["--out", out_dir], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE)
err = read_until(proc.stderr.fileno(), b"\n", time.time() + WAIT_S)
check(err.startswith(b"neargnn generate: "), f"plain: first progress line is {err!r}")
interrupt_and_check(proc, out_dir, "plain")
out_rest, err_rest = proc.communicate()
err += err_rest
check(b"\r" not in err, f"plain: progress to a pipe contains \\r: {err!r}")
check(out_rest == b"", f"plain: stdout is not empty: {out_rest!r}")
check(b"neargnn generate: interrupted after" in err, f"plain: no final progress line: {err!r}")
check(f"neargnn: interrupted; {out_dir} was not created".encode() in err,
      f"plain: no interruption message: {err!r}")

# ---- stderr is a terminal: one line redrawn with \r ----
out_dir = os.path.join(tmp, "tty")
master, slave = pty.openpty()
proc = subprocess.Popen([binary] + ARGS + ["--out", out_dir], stdout=subprocess.DEVNULL,
                        stderr=slave, env=dict(os.environ, TERM="xterm"))
os.close(slave)
err = read_until(master, b"\r", time.time() + WAIT_S)
check(b"\rgenerate: " in err, f"tty: no redrawn progress line: {err!r}")
interrupt_and_check(proc, out_dir, "tty")
err += read_until(master, b"was not created", time.time() + WAIT_S)
os.close(master)
check(b"\n" not in err.split(b"neargnn: interrupted")[0],
      f"tty: progress used more than one line: {err!r}")
check(b"neargnn: interrupted;" in err, f"tty: no interruption message: {err!r}")

sys.exit(1 if failures else 0)
EOF
rc=$?
[ "$rc" -eq 0 ] && echo "cli_progress: all checks passed"
exit "$rc"
