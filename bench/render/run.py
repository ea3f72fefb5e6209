#!/usr/bin/env python3
"""Benchmark `ouroboros render coredns`: wall time and peak memory for 1k, 10k and 100k hostnames.

Generates the Ingress manifests on the fly in a temp dir (one TLS host per Ingress, so every
hostname costs a whole object to parse), renders the kubeadm example Corefile against them with
the release binary, and reports the median wall time over --runs runs and the peak RSS per size.

Needs GNU time at /usr/bin/time for the peak RSS (`apt-get install time` on Debian/Ubuntu).
Usage: cargo build --release && python3 bench/render/run.py [--sizes 1000,10000,100000] [--runs 7]
Exit status 1 if 10k hostnames take 500 ms or more, or time per hostname grows by more than 2x
from the smallest to the largest size (not linear).
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ingress(i):
    host = f"app-{i}.team-{i % 50}.example.com"
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": f"app-{i}",
            "namespace": f"team-{i % 50}",
            "labels": {"app.kubernetes.io/name": f"app-{i}"},
        },
        "spec": {
            "ingressClassName": "nginx",
            "tls": [{"hosts": [host], "secretName": f"app-{i}-tls"}],
            "rules": [{
                "host": host,
                "http": {"paths": [{
                    "path": "/",
                    "pathType": "Prefix",
                    "backend": {"service": {"name": f"app-{i}", "port": {"number": 8080}}},
                }]},
            }],
        },
    }


def to_yaml(obj, indent=0):
    """Block-style YAML for the generated objects (no PyYAML needed)."""
    pad = "  " * indent
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)):
                out.append(f"{pad}{k}:")
                out.append(to_yaml(v, indent + 1))
            else:
                out.append(f"{pad}{k}: {v}")
    else:
        for v in obj:
            item = to_yaml(v, indent + 1) if isinstance(v, (dict, list)) else f"{pad}  {v}"
            out.append(f"{pad}- " + item.lstrip())
    return "\n".join(out)


def write_ingresses(path, count, per_file, fmt):
    """`count` Ingresses, one TLS host each, `per_file` per file: multi-document YAML, or a
    `kind: List` in JSON indented like `kubectl get -o json`."""
    os.makedirs(path, exist_ok=True)
    for start in range(0, count, per_file):
        objs = [ingress(i) for i in range(start, min(start + per_file, count))]
        name = os.path.join(path, f"ingresses-{start:07d}.{fmt}")
        with open(name, "w") as f:
            if fmt == "json":
                json.dump({"apiVersion": "v1", "kind": "List", "items": objs}, f, indent=4)
            else:
                f.write("".join("---\n" + to_yaml(o) + "\n" for o in objs))


def run_once(binary, corefile, manifests):
    cmd = ["/usr/bin/time", "-v", binary, "--log-level=warn,ouroboros::render=debug", "render",
           "coredns", "--corefile", corefile, "--proxy-ip", "10.96.0.53", manifests]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"render failed ({p.returncode}):\n{p.stderr}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    read = int(re.search(r"read_us=(\d+)", p.stderr).group(1)) / 1e6
    select = int(re.search(r"select_us=(\d+)", p.stderr).group(1)) / 1e6
    total = int(re.search(r"total_us=(\d+)", p.stderr).group(1)) / 1e6
    cpu = sum(float(re.search(rf"{k} time \(seconds\): ([0-9.]+)", p.stderr).group(1))
              for k in ("User", "System"))
    # The template block does not list hosts one per line: take the count the render logs.
    lines = int(re.search(r"hosts=(\d+) changed=", p.stderr).group(1))
    return {"wall": wall, "cpu": cpu, "rss": rss, "read": read, "select": select,
            "edit": total - read - select, "lines": lines}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/ouroboros"))
    ap.add_argument("--corefile", default=os.path.join(ROOT, "examples/Corefile"))
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--per-file", type=int, default=1000, help="Ingresses per generated file")
    ap.add_argument("--formats", default="yaml,json", help="manifest formats to generate")
    args = ap.parse_args()
    if not os.path.exists("/usr/bin/time"):
        sys.exit("/usr/bin/time is missing: apt-get install time")
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary} is missing: cargo build --release")
    sizes = [int(s) for s in args.sizes.split(",")]
    load = " ".join(open("/proc/loadavg").read().split()[:3])

    results = []
    with tempfile.TemporaryDirectory(prefix="ouroboros-bench-render-") as tmp:
        empty = os.path.join(tmp, "empty")
        os.makedirs(empty)
        startup = statistics.median(run_once(args.binary, args.corefile, empty)["wall"]
                                    for _ in range(args.runs))
        for fmt in args.formats.split(","):
            for n in sizes:
                d = os.path.join(tmp, f"{fmt}-{n}")
                write_ingresses(d, n, args.per_file, fmt)
                mb = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) / 1e6
                run_once(args.binary, args.corefile, d)  # warm the page cache
                runs = [run_once(args.binary, args.corefile, d) for _ in range(args.runs)]
                for r in runs:
                    if r["lines"] != n:
                        sys.exit(f"{n} hostnames rendered as {r['lines']}")
                med = {k: statistics.median(r[k] for r in runs)
                       for k in ("wall", "cpu", "read", "select", "edit")}
                results.append((fmt, n, mb, med, max(r["rss"] for r in runs)))
                shutil.rmtree(d)

    print(f"binary: {args.binary}   runs per size: {args.runs}   cores: {os.cpu_count()}   "
          f"load average before: {load}")
    print(f"process start, empty manifest dir: {startup * 1e3:.1f} ms wall (median)")
    print("medians; cpu = user+system time (10 ms resolution); read = reading and parsing the "
          "manifests, select = hostname selection and policy, edit = Corefile splice (wall, "
          "measured in the process)")
    print(f"{'format':>6} {'hostnames':>10} {'MB':>6} {'wall ms':>9} {'cpu ms':>8} {'read ms':>9} "
          f"{'select ms':>10} {'edit ms':>8} {'us/host':>8} {'peak RSS MiB':>13}")
    for fmt, n, mb, med, rss in results:
        print(f"{fmt:>6} {n:>10} {mb:>6.1f} {med['wall'] * 1e3:>9.1f} {med['cpu'] * 1e3:>8.0f} "
              f"{med['read'] * 1e3:>9.1f} "
              f"{med['select'] * 1e3:>10.2f} {med['edit'] * 1e3:>8.2f} "
              f"{med['wall'] / n * 1e6:>8.2f} {rss / 1024:>13.1f}")

    failed = False
    for fmt in args.formats.split(","):
        rows = [r for r in results if r[0] == fmt]
        for _, n, _, med, _ in rows:
            if n == 10000 and med["wall"] >= 0.500:
                print(f"FAIL ({fmt}): 10k hostnames took {med['wall'] * 1e3:.1f} ms (target < 500 ms)")
                failed = True
        if len(rows) > 1:
            small, large = rows[0], rows[-1]
            growth = (large[3]["wall"] / large[1]) / (small[3]["wall"] / small[1])
            print(f"{fmt}: time per hostname, {large[1]} vs {small[1]}: {growth:.2f}x "
                  "(linear: about 1x or less)")
            if growth > 2.0:
                print(f"FAIL ({fmt}): time grows faster than linearly")
                failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
