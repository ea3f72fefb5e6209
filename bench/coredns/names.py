"""Writes the inputs of bench/coredns/run.sh for N hostnames: an Ingress (JSON) with N varied
names (unrelated pronounceable labels, one to three under registrable domains of a dozen public
suffixes, customers' apexes and their www.; deterministic), and dnsperf query files:
hits (the names), covered (a near miss in the same zone of each), neighbour (names of other
registrable domains under the same public suffixes), outside (names under a top-level domain
the block does not cover) and cluster (in-cluster Service names, answered by `hosts`).

SHAPE=varied (default): 1-3 labels under about N/15 customer domains, their apexes and www.
SHAPE=apex: www. under N customer apex domains.

Usage: [SHAPE=varied|apex] names.py N DIR
"""
import os
import json
import random
import sys

SUFFIXES = ["com", "de", "io", "co.uk", "net", "org", "fr", "nl", "app", "dev", "ch", "com.au"]
ONSETS = ["b", "k", "t", "z", "m", "v", "r", "l", "s", "n", "d", "p", "g", "f", "br", "st"]
VOWELS = ["a", "e", "i", "o", "u", "ie"]


def label(rng):
    s = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(2 + rng.randrange(3)))
    r = rng.randrange(10)
    if r == 0:
        s += str(rng.randrange(10))
    elif r == 1:
        s += "-" + rng.choice(ONSETS) + rng.choice(VOWELS)
    return s


def names(n, seed=7):
    rng = random.Random(seed)
    out, domain = set(), None
    if os.environ.get("SHAPE", "varied") == "apex":
        while len(out) < n:
            out.add(f"www.{label(rng)}.{rng.choice(SUFFIXES)}")
        return sorted(out)
    while len(out) < n:
        if domain is None or rng.randrange(15) == 0:
            domain = f"{label(rng)}.{rng.choice(SUFFIXES)}"
        shape = rng.randrange(6)
        if shape == 0:
            name = domain
        elif shape == 1:
            name = f"www.{domain}"
        elif shape == 2:
            name = f"{label(rng)}.{label(rng)}.{domain}"
        else:
            name = f"{label(rng)}.{domain}"
        out.add(name)
    result = sorted(out)
    rng.shuffle(result)
    return result


def main():
    n, d = int(sys.argv[1]), sys.argv[2]
    hosts = names(n)
    ingress = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "bench", "namespace": "default"},
        "spec": {"tls": [{"hosts": hosts, "secretName": "tls"}]},
    }
    with open(f"{d}/ingress.json", "w") as f:
        json.dump(ingress, f)
    sample = hosts[: min(len(hosts), 5000)]
    files = {
        "hits": [f"{h} A" for h in sample],
        "covered": [f"x{h} A" for h in sample],
        "neighbour": [f"host{i}.unrelated-{i % 50}.{SUFFIXES[i % len(SUFFIXES)]} A" for i in range(5000)],
        "outside": [f"host{i}.unrelated-{i % 50}.test A" for i in range(5000)],
        "cluster": [f"svc{i}.ns{i % 20}.svc.cluster.local A" for i in range(1000)],
    }
    for name, lines in files.items():
        with open(f"{d}/{name}.txt", "w") as f:
            f.write("\n".join(lines) + "\n")
    with open(f"{d}/cluster-hosts", "w") as f:
        for i in range(1000):
            f.write(f"10.96.{i // 250}.{i % 250 + 1} svc{i}.ns{i % 20}.svc.cluster.local\n")


if __name__ == "__main__":
    main()
