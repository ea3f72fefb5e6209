#!/usr/bin/env python3
"""Small stdlib-only helpers for bench/proxy/run.sh and bench/edge/run.sh (via bench/lib/common.sh).

Subcommands:
  free-ports N                 print N distinct free TCP ports on 127.0.0.1
  wait-http URL SECONDS        poll GET URL until it answers 200 or the deadline passes
  wait-port PORT SECONDS       poll until 127.0.0.1:PORT accepts a TCP connection
  spread URL N                 GET URL N times on new connections, print "body count" per answer
  cpu-ticks PID...             print utime+stime (clock ticks, all threads) summed over PIDs
  snapshot LOAD PROXY PID...   print the counters a wrk run is measured with, in one read:
                               "busy total steal" jiffies of CPU LOAD and of the CPUs PROXY
                               (/proc/stat), the PIDs' voluntary context switches, the RES + CAL
                               interrupts CPU PROXY received, and the PIDs' CPU ticks
  cpus LIST                    print the CPUs of a taskset-style list, one per line
  wrk-parse FILE               print "rps p99_us errors requests" from a `wrk --latency` output
  idle ...                     hold many idle keep-alive connections, report RSS per connection
  report RAW.tsv META.tsv      render the markdown result table
"""

import json
import os
import random
import resource
import socket
import statistics
import sys
import time
import urllib.request


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    print(" ".join(map(str, ports)))


def wait_http(url, seconds):
    deadline = time.monotonic() + float(seconds)
    last = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    sys.stdout.write(r.read().decode(errors="replace"))
                    return 0
                last = f"HTTP {r.status}"
        except Exception as e:  # connection refused until the server listens
            last = repr(e)
        time.sleep(0.05)
    print(f"error: {url} did not answer 200 within {seconds}s (last: {last})", file=sys.stderr)
    return 1


def wait_port(port, seconds):
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
            return 0
        except OSError:
            time.sleep(0.05)
    print(f"error: nothing accepts on 127.0.0.1:{port} after {seconds}s", file=sys.stderr)
    return 1


def spread(url, n):
    """Which backend answered each of N requests (one connection each): "body count" lines."""
    counts = {}
    for _ in range(int(n)):
        with urllib.request.urlopen(url, timeout=5) as r:
            body = r.read().decode(errors="replace").strip()
        counts[body] = counts.get(body, 0) + 1
    for body in sorted(counts):
        print(f"{body} {counts[body]}")
    return 0


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            # comm may contain spaces; fields after the closing paren are fixed
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total


def _status(path, key):
    """The number after `key:` in a /proc status file."""
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def sleeps(pids):
    """Voluntary context switches of every thread of `pids` so far: how often they slept."""
    return sum(_status(f"/proc/{pid}/task/{tid}/status", "voluntary_ctxt_switches")
               for pid in pids for tid in os.listdir(f"/proc/{pid}/task"))


def cpus(spec):
    """The CPUs of a taskset-style list: "0", "0,1", "0-1"."""
    out = []
    for part in str(spec).split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def wake_ipis(spec):
    """Rescheduling plus function-call interrupts the CPUs of `spec` received so far
    (/proc/interrupts): what other CPUs sent them to wake a task there while it was idle."""
    with open("/proc/interrupts") as f:
        names = f.readline().split()
        cols = [names.index(f"CPU{c}") + 1 for c in cpus(spec)]
        return sum(int(l.split()[col]) for l in f if l.split()[0] in ("RES:", "CAL:") for col in cols)


def cpu_jiffies(spec):
    """Busy, total and stolen jiffies of the CPUs of `spec` so far, from /proc/stat ("busy total
    steal"; steal is time the hypervisor ran something else while a vCPU wanted to run)."""
    want = {f"cpu{c}" for c in cpus(spec)}
    busy = total = steal = 0
    with open("/proc/stat") as f:
        for line in f:
            fields = line.split()
            if fields[0] in want:
                want.discard(fields[0])
                ticks = [int(x) for x in fields[1:]]
                idle = ticks[3] + ticks[4]  # idle, iowait
                busy, total, steal = busy + sum(ticks) - idle, total + sum(ticks), steal + ticks[7]
    if want:
        raise SystemExit(f"error: no {' '.join(sorted(want))} in /proc/stat")
    return busy, total, steal


def rss_kib(pids):
    return sum(_status(f"/proc/{pid}/status", "VmRSS") for pid in pids)


def _to_us(text):
    for unit, mult in (("us", 1.0), ("ms", 1e3), ("s", 1e6), ("m", 60e6)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * mult
    raise ValueError(f"unknown latency unit in {text!r}")


def wrk_parse(path):
    rps = p99 = requests = None
    errors = 0
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[1] == "requests" and parts[2] == "in":
                requests = int(parts[0])
            elif line.startswith("Requests/sec:"):
                rps = float(parts[1])
            elif len(parts) == 2 and parts[0] == "99%":
                p99 = _to_us(parts[1])
            elif line.strip().startswith("Socket errors:"):
                # Socket errors: connect 0, read 0, write 0, timeout 0
                nums = [int(p.rstrip(",")) for p in parts[2:] if p.rstrip(",").isdigit()]
                errors += sum(nums)
            elif line.strip().startswith("Non-2xx or 3xx responses:"):
                errors += int(parts[-1])
    if rps is None or p99 is None or not requests:
        print(f"error: cannot parse wrk output {path}", file=sys.stderr)
        return 1
    print(f"{rps:.2f} {p99:.1f} {errors} {requests}")
    return 0


def _established_on_port(ports):
    """Count ESTABLISHED TCP sockets whose local port is one of `ports` (the backends' side)."""
    n = 0
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "01" and int(parts[1].rsplit(":", 1)[1], 16) in ports:
                        n += 1
        except FileNotFoundError:
            pass
    return n


def _read_response(sock):
    """Read one HTTP/1.1 response with Content-Length; return the status code."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("peer closed before response headers")
        buf += chunk
    head, body = buf.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for h in lines[1:]:
        k, _, v = h.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("peer closed mid-body")
        body += chunk
    return status


def idle(args):
    """idle PORT COUNT BACKEND_PORTS SETTLE_S PATH PID...

    Opens COUNT connections to 127.0.0.1:PORT one after the other; on each sends one keep-alive
    GET PATH and reads the full response (so the connection is established end to end and the
    proxy has relayed both ways), then leaves it idle. After SETTLE_S seconds it samples VmRSS of
    PIDs and the number of ESTABLISHED sockets on BACKEND_PORTS (comma-separated: the backends'
    PROXY listeners), prints a JSON line, closes all.
    """
    port, count = int(args[0]), int(args[1])
    backend_port = {int(p) for p in args[2].split(",")}
    settle, path, pids = float(args[3]), args[4], [int(p) for p in args[5:]]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < count + 64:
        print(f"error: RLIMIT_NOFILE hard limit {hard} < {count + 64}; raise it (ulimit -Hn)", file=sys.stderr)
        return 1
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    backend_before = _established_on_port(backend_port)
    rss_before = rss_kib(pids)
    req = f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    socks = []
    t0 = time.monotonic()
    try:
        for i in range(count):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(req)
            status = _read_response(s)
            if status != 200:
                raise RuntimeError(f"connection {i}: HTTP {status}")
            socks.append(s)
        opened_s = time.monotonic() - t0
        time.sleep(settle)  # let the proxy finish any deferred frees before sampling
        rss_after = rss_kib(pids)
        backend_after = _established_on_port(backend_port)
        # every connection must still be alive: a second request on a sample would change
        # what we measure, so only check that none was closed by the peer meanwhile
        alive = 0
        for s in socks:
            s.setblocking(False)
            try:
                alive += 0 if s.recv(1) == b"" else 1
            except BlockingIOError:
                alive += 1
            except OSError:
                pass
    finally:
        for s in socks:
            s.close()
    out = {
        "connections": count,
        "alive": alive,
        "backend_established_delta": backend_after - backend_before,
        "rss_before_kib": rss_before,
        "rss_after_kib": rss_after,
        "kib_per_conn": (rss_after - rss_before) / count,
        "open_seconds": round(opened_s, 2),
    }
    print(json.dumps(out))
    return 0


# ---- report -------------------------------------------------------------------------------

# Variant keys the scripts use. "direct" is the no-proxy ceiling; the HAProxy variants are the
# baselines every other variant is compared with, and the targets are judged against the first
# of BASES that ran (splice-auto, the stronger one). The first of the others is the one judged.
DEFAULT_LABELS = {
    "direct": "direct (no proxy)",
    "haproxy": "HAProxy 2.6",
    "haproxy_splice": "HAProxy 2.6 splice-auto",
    "ouroboros": "ouroboros",
    "ouroboros_userspace": "ouroboros --copy-mode userspace",
    "ouroboros_splice": "ouroboros --copy-mode splice",
    "ouroboros_sockmap": "ouroboros --copy-mode sockmap",
    "ouroboros_busy": "ouroboros --busy-poll",
    "ouroboros_t1": "ouroboros --threads 1",
    "ouroboros_t2": "ouroboros --threads 2",
    "ouroboros_prev": "ouroboros (PREV_BIN)",
}
BASES = ("haproxy_splice", "haproxy")
RATIO_NAME = {"ouroboros": "ouroboros", "ouroboros_userspace": "userspace",
              "ouroboros_splice": "splice", "ouroboros_sockmap": "sockmap", "ouroboros_busy": "busy-poll", "ouroboros_t1": "threads 1", "ouroboros_t2": "threads 2", "ouroboros_prev": "PREV_BIN",
              "haproxy_splice": "splice-auto", "haproxy": "HAProxy"}

# metric key, label, unit format, better ("high"|"low"; "none": a condition of the run, no
# ratio), target ratio or None
ROWS = [
    ("bulk_mbps", "Bulk throughput, {bulk_mb} MiB file (MB/s)", "{:.0f}", "high", 1.2),
    ("cpu_s_per_gb", "Proxy CPU seconds per GB relayed", "{:.3f}", "low", 0.7),
    ("ka_rps", "Keep-alive requests/s (wrk -c{wrk_conns})", "{:.0f}", "high", 1.0),
    ("ka_p99_us", "Keep-alive p99 latency (ms)", "ms", "low", 1.0),
    ("ka_cpu_us_per_req", "Proxy CPU µs per keep-alive request", "{:.1f}", "low", None),
    ("ka_sys_us_per_req", "Both CPUs' busy µs per keep-alive request (wrk, nginx, proxy, kernel)",
     "{:.1f}", "low", None),
    ("ka_added_us_per_req", "CPU µs the proxy adds per keep-alive request (both CPUs, less direct's)",
     "{:.1f}", "low", None),
    ("close_rps", "New connection per request, requests/s", "{:.0f}", "high", 1.0),
    ("close_p99_us", "New connection per request, p99 latency (ms)", "ms", "low", 1.0),
    ("close_cpu_us_per_req", "Proxy CPU µs per new-connection request", "{:.1f}", "low", None),
    ("ka_cap_rps", "Keep-alive requests/s, proxy limited to {cpu_limit} CPU", "{:.0f}", "high", 1.0),
    ("ka_cap_p99_us", "Keep-alive p99 latency, proxy limited to {cpu_limit} CPU (ms)", "ms", "low", 1.0),
    ("close_cap_rps", "New connection per request, requests/s, proxy limited to {cpu_limit} CPU",
     "{:.0f}", "high", 1.0),
    ("close_cap_p99_us", "New connection per request, p99 latency, proxy limited to {cpu_limit} CPU (ms)",
     "ms", "low", 1.0),
    ("idle_kib_per_conn", "RSS per idle connection (KiB, {idle_conns} held)", "{:.1f}", "low", 0.5),
    ("ka_load_busy", "Load CPU busy (wrk + nginx) during keep-alive runs (%)", "{:.0f}", "low", None),
    ("ka_proxy_busy", "Proxy CPU busy during keep-alive runs (%)", "{:.0f}", "low", None),
    ("close_load_busy", "Load CPU busy (wrk + nginx) during new-connection runs (%)", "{:.0f}", "low", None),
    ("close_proxy_busy", "Proxy CPU busy during new-connection runs (%)", "{:.0f}", "low", None),
    ("ka_steal", "Host steal on both CPUs during keep-alive runs (%)", "{:.0f}", "none", None),
    ("close_steal", "Host steal on both CPUs during new-connection runs (%)", "{:.0f}", "none", None),
    ("ka_load_us_per_req", "Load CPU µs per keep-alive request (wrk + nginx)", "{:.1f}", "low", None),
    ("ka_sleeps_per_req", "Proxy sleeps per keep-alive request", "{:.3f}", "low", None),
    ("ka_wake_ipis_per_req", "Wake-up interrupts to the proxy CPU per keep-alive request", "{:.3f}", "low", None),
    ("close_load_us_per_req", "Load CPU µs per new-connection request (wrk + nginx)", "{:.1f}", "low", None),
    ("close_sleeps_per_req", "Proxy sleeps per new-connection request", "{:.3f}", "low", None),
    ("close_wake_ipis_per_req", "Wake-up interrupts to the proxy CPU per new-connection request", "{:.3f}", "low", None),
]
# Judged variants whose issue set other targets. The kernel relay's own work (the BPF verdict
# in softirq, the sends from a kernel work queue) runs on whichever CPU the packets arrive on
# and is charged to no process, so its CPU row is the CPU the proxy adds to the whole machine
# per request (both CPUs' busy time less the no-proxy run's), not the process's CPU time.
TARGETS_FOR = {
    "ouroboros_sockmap": {"bulk_mbps": 1.3, "ka_added_us_per_req": 0.3, "ka_rps": 1.2,
                          "ka_p99_us": 0.8},
}
# Past this share of the load CPU, wrk and nginx are the bottleneck rather than the proxy.
SATURATED_PCT = 97


def _fmt(fmt, v):
    if v is None:
        return "—"
    if fmt == "ms":
        return f"{v / 1000:.2f}"
    return fmt.format(v)


def ratio_interval(subject, base, n=2000, level=0.90):
    """Bootstrap interval of median(subject) / median(base), resampling each variant's rounds:
    how far the ratio could move on this machine's run-to-run noise alone. None below 3 samples
    or when a base sample is 0 (a resampled median could be 0)."""
    if len(subject) < 3 or len(base) < 3 or min(base) <= 0:
        return None
    rng = random.Random(1)  # the same samples always print the same interval
    ratios = sorted(
        statistics.median(rng.choices(subject, k=len(subject)))
        / statistics.median(rng.choices(base, k=len(base)))
        for _ in range(n)
    )
    tail = (1 - level) / 2
    return ratios[int(tail * n)], ratios[int((1 - tail) * n) - 1]


def report(raw_path, meta_path):
    samples = {}
    errors = {}
    with open(raw_path) as f:
        for line in f:
            variant, metric, value = line.rstrip("\n").split("\t")[:3]
            if metric.endswith("_errors"):
                errors[(variant, metric)] = errors.get((variant, metric), 0) + int(float(value))
                continue
            samples.setdefault((variant, metric), []).append(float(value))
    # Derived: what each variant adds to the machine's CPU per request over the direct run.
    for mode in ("ka", "close"):
        direct = samples.get(("direct", f"{mode}_sys_us_per_req"))
        if not direct:
            continue
        floor = statistics.median(direct)
        for (v, m), vals in list(samples.items()):
            if m == f"{mode}_sys_us_per_req" and v != "direct":
                samples[(v, f"{mode}_added_us_per_req")] = [x - floor for x in vals]
    meta = {}
    with open(meta_path) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("\t")
            meta[k] = v

    def med(v, m):
        s = samples.get((v, m))
        return statistics.median(s) if s else None

    labels = dict(DEFAULT_LABELS)
    for pair in filter(None, meta.get("labels", "").split(";")):
        k, _, v = pair.partition("=")
        labels[k] = v
    present = {v for v, _ in samples}
    order = meta.get("variants", " ".join(DEFAULT_LABELS)).split()
    variants = [v for v in order if v in present or v in ("direct",) + BASES]
    bases = [b for b in BASES if b in variants]
    subjects = [v for v in variants if v != "direct" and v not in BASES]
    judged = subjects[0] if subjects else None
    judge_base = bases[0] if bases else None

    out = []
    out.append(f"Run {meta.get('date', '?')} on {meta.get('machine', '?')}; "
               f"ouroboros {meta.get('ouroboros_rev', '?')}.")
    out.append("")
    out.append(f"Command: `{meta.get('command', '?')}`; {meta.get('settings', '')}")
    out.append("")
    head = f"| Metric | {labels['direct']} |" + "".join(f" {labels[b]} |" for b in bases)
    rule = "| --- | ---: |" + " ---: |" * len(bases)
    for v in subjects:
        head += f" {labels[v]} |" + "".join(f" {RATIO_NAME.get(v, v)} / {RATIO_NAME[b]} |" for b in bases)
        rule += " ---: |" * (1 + len(bases))
    out.append(head + " target | met |")
    out.append(rule + " --- | --- |")
    for key, label, fmt, better, target in ROWS:
        if judged in TARGETS_FOR:
            target = TARGETS_FOR[judged].get(key)
        vals = {v: med(v, key) for v in variants}
        if all(x is None for x in vals.values()):
            continue  # a phase this run skipped (CPU_LIMIT=0)

        def ratio(v, b):
            base = vals.get(b)
            return vals[v] / base if (base and vals[v] is not None and better != "none") else None

        judged_ratio = ratio(judged, judge_base) if judged and judge_base else None
        if target is None:
            tgt, met = "—", ""
        else:
            tgt = f"≥ {target:.1f}×" if better == "high" else f"≤ {target:.1f}×"
            if judged_ratio is None:
                met = "n/a"
            elif (better == "high" and judged_ratio >= target) or (better == "low" and judged_ratio <= target):
                met = "yes"
            else:
                met = "**no**"
        cells = [_fmt(fmt, vals.get("direct"))] + [_fmt(fmt, vals.get(b)) for b in bases]
        for v in subjects:
            cells.append(_fmt(fmt, vals[v]))
            for b in bases:
                r = ratio(v, b)
                if r is None:
                    cells.append("—")
                    continue
                ci = ratio_interval(samples.get((v, key), []), samples.get((b, key), []))
                cells.append(f"{r:.2f}×" + (f" ({ci[0]:.2f}–{ci[1]:.2f})" if ci else ""))
        out.append(f"| {label.format(**meta)} | {' | '.join(cells)} | {tgt} | {met} |")
    if judged and judge_base:
        out.append("")
        out.append(f"Target and met: {labels[judged]} against {labels[judge_base]}.")
    out.append("")
    out.append("Ratios are of medians; in brackets, a 90 % bootstrap interval over the rounds. Where "
               "it spans the target, this run cannot tell the two apart on that row.")
    saturated = []
    for m in ("ka", "close"):
        busy = [med(v, f"{m}_load_busy") for v in variants if (v, f"{m}_load_busy") in samples]
        if busy and min(busy) >= SATURATED_PCT:
            saturated.append(m)
    if saturated:
        runs = " and ".join({"ka": "keep-alive", "close": "new-connection"}[m] for m in saturated)
        out.append("")
        out.append(f"The load CPU (wrk and nginx) was saturated during the {runs} runs of every "
                   f"variant (median ≥ {SATURATED_PCT} % busy): there, requests/s and p99 are "
                   "bounded by the load generator, and the proxy's own cost is its CPU per request "
                   "and the rows with the proxy under a CPU limit.")
    out.append("")
    # per-round samples, so the spread is visible
    out.append("<details><summary>All samples (rounds in run order)</summary>")
    out.append("")
    out.append("| Metric | Variant | samples |")
    out.append("| --- | --- | --- |")
    for key, label, fmt, _, _ in ROWS:
        for v in variants:
            s = samples.get((v, key))
            if s:
                out.append(f"| {label.format(**meta)} | {labels[v]} | {', '.join(_fmt(fmt, x) for x in s)} |")
    out.append("")
    out.append("</details>")
    out.append("")
    bad = {k: n for k, n in errors.items() if n}
    if bad:
        out.append("**Errors during the run** (wrk socket errors / non-2xx, idle connections lost):")
        for (v, m), n in sorted(bad.items()):
            out.append(f"- {v} {m}: {n}")
    else:
        out.append("No request errors in any phase (wrk socket errors and non-2xx responses: 0; "
                   "all idle connections alive and established at the backend).")
    for k in ("load_start", "load_end", "notes"):
        if meta.get(k):
            out.append(f"\n{k.replace('_', ' ')}: {meta[k]}")
    print("\n".join(out))
    return 0


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "free-ports":
        free_ports(int(args[0]))
        return 0
    if cmd == "wait-http":
        return wait_http(args[0], args[1])
    if cmd == "wait-port":
        return wait_port(args[0], args[1])
    if cmd == "spread":
        return spread(args[0], args[1])
    if cmd == "cpu-ticks":
        print(cpu_ticks(args))
        return 0
    if cmd == "snapshot":
        load, proxy, pids = args[0], args[1], args[2:]
        # One process for all counters, so the helper's own start-up stays out of the window.
        print(*cpu_jiffies(load), *cpu_jiffies(proxy), sleeps(pids), wake_ipis(proxy),
              cpu_ticks(pids))
        return 0
    if cmd == "cpus":
        print("\n".join(map(str, cpus(args[0]))))
        return 0
    if cmd == "rss-kib":
        print(rss_kib(args))
        return 0
    if cmd == "wrk-parse":
        return wrk_parse(args[0])
    if cmd == "idle":
        return idle(args)
    if cmd == "report":
        return report(args[0], args[1])
    print(f"unknown subcommand {cmd!r}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
