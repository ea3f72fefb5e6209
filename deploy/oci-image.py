#!/usr/bin/env python3
"""Packs files of this machine into a one-layer OCI image archive, without a container engine.

The archive (an OCI image layout in a tar) loads with `ctr -n k8s.io images import`,
`k3s ctr images import`, `kind load image-archive` or `podman load`, and pods use it with
`imagePullPolicy: IfNotPresent` (nothing is pulled). The output is reproducible: the same inputs
give the same bytes (sorted entries, zero times, fixed owners, gzip without a name or time).

Each executable is packed with the shared libraries it loads (as `ldd` lists them, at the same
paths), so a dynamic binary runs in the image as it does here.

  deploy/oci-image.py --name ouroboros:dev --out ouroboros.oci.tar \\
      --exe target/release/ouroboros:/usr/local/bin/ouroboros --user 65532:65532 \\
      --entrypoint /usr/local/bin/ouroboros --cmd --help

deploy/image.sh builds our image this way, as the Containerfile's result is (docs/install.md).
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile

# What distroless's base images carry that a program may look for: the user database (root,
# nobody and nonroot, 65532), CA certificates for TLS clients, and a writable /tmp.
PASSWD = ("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
          "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
GROUP = "root:x:0:\nnobody:x:65534:\nnogroup:x:65534:\nnonroot:x:65532:\n"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def libraries(exe):
    """The shared libraries `exe` loads, as absolute paths on this machine (none if static)."""
    out = subprocess.run(["ldd", exe], capture_output=True, text=True)
    if out.returncode != 0:
        # "not a dynamic executable": a static binary needs nothing more.
        return []
    libs = []
    for line in out.stdout.splitlines():
        line = line.strip()
        if "=>" in line:
            path = line.split("=>", 1)[1].split("(")[0].strip()
        else:
            path = line.split("(")[0].strip()
        if path.startswith("/"):
            if not os.path.exists(path):
                sys.exit(f"oci-image: {exe} needs {path}, which is missing")
            libs.append(path)
    return libs


class Layer:
    """A deterministic tar of the image's files."""

    def __init__(self):
        self.entries = {}

    def parents(self, path):
        """The directories above `path` that are not there yet, as root's 0755."""
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            p = "/".join(parts[:i])
            if p not in self.entries:
                self.entries[p] = ("dir", 0o755, 0, None)

    def directory(self, path, mode=0o755, uid=0):
        path = path.strip("/")
        if path and path != ".":
            self.parents(path)
            self.entries[path] = ("dir", mode, uid, None)

    def file(self, path, data, mode=0o644, uid=0):
        path = path.strip("/")
        self.parents(path)
        self.entries[path] = ("file", mode, uid, data)

    def symlink(self, path, target):
        path = path.strip("/")
        self.parents(path)
        self.entries[path] = ("link", 0o777, 0, target)

    def host_file(self, src, dest, mode=None):
        """`src` of this machine at `dest`, following symlinks to the file's bytes; the path a
        library is known by stays a symlink where it is one here, as in a Debian root."""
        with open(src, "rb") as f:
            data = f.read()
        if mode is None:
            mode = os.stat(src).st_mode & 0o777
        real = os.path.realpath(src)
        if dest == src and real != src:
            self.file(real, data, mode)
            self.symlink(src, os.path.relpath(real, os.path.dirname(src)))
        else:
            self.file(dest, data, mode)

    def tar(self):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            for path in sorted(self.entries):
                kind, mode, uid, data = self.entries[path]
                info = tarfile.TarInfo(path)
                info.mtime = 0
                info.uid = info.gid = uid
                info.uname = info.gname = ""
                info.mode = mode
                if kind == "dir":
                    info.type = tarfile.DIRTYPE
                    t.addfile(info)
                elif kind == "link":
                    info.type = tarfile.SYMTYPE
                    info.linkname = data
                    t.addfile(info)
                else:
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
        return buf.getvalue()


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", required=True, help="the image reference the archive names (io.containerd.image.name)")
    ap.add_argument("--out", required=True, help="the archive to write")
    ap.add_argument("--exe", action="append", default=[], metavar="SRC[:DEST]",
                    help="an executable, packed with the libraries it loads (DEST defaults to SRC)")
    ap.add_argument("--file", action="append", default=[], metavar="SRC[:DEST]",
                    help="a file or a directory (recursively), as it is")
    ap.add_argument("--mkdir", action="append", default=[], metavar="PATH[:MODE[:UID]]",
                    help="an empty directory (MODE in octal)")
    ap.add_argument("--user", default="", help="the image's user (UID:GID)")
    ap.add_argument("--entrypoint", action="append", default=[], help="the entrypoint (repeat for each word)")
    ap.add_argument("--cmd", action="append", default=[], help="the default arguments (repeat for each word)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--port", action="append", default=[], help="an exposed port, as 8080/tcp")
    ap.add_argument("--base-files", action="store_true",
                    help="distroless's base files: /etc/passwd and /etc/group (root, nonroot 65532), "
                         "the CA bundle, /tmp, /home/nonroot")
    ap.add_argument("--arch", default="amd64")
    args = ap.parse_args()

    layer = Layer()
    if args.base_files:
        layer.file("etc/passwd", PASSWD.encode())
        layer.file("etc/group", GROUP.encode())
        if os.path.exists(CA_BUNDLE):
            layer.host_file(CA_BUNDLE, CA_BUNDLE, 0o644)
        layer.directory("tmp", 0o1777)
        layer.directory("home/nonroot", 0o700, 65532)
    for spec in args.exe:
        src, _, dest = spec.partition(":")
        layer.host_file(src, dest or src, 0o755)
        for lib in libraries(src):
            layer.host_file(lib, lib)
    for spec in args.file:
        src, _, dest = spec.partition(":")
        dest = dest or src
        if os.path.isdir(src):
            for root, dirs, files in os.walk(src):
                dirs.sort()
                rel = os.path.relpath(root, src)
                layer.directory(os.path.normpath(os.path.join(dest, rel)))
                for f in sorted(files):
                    layer.host_file(os.path.join(root, f), os.path.normpath(os.path.join(dest, rel, f)))
        else:
            layer.host_file(src, dest)
    for spec in args.mkdir:
        path, mode, uid = (spec.split(":") + ["755", "0"])[:3]
        layer.directory(path, int(mode, 8), int(uid))

    tar = layer.tar()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, filename="", compresslevel=6) as g:
        g.write(tar)
    layer_gz = gz.getvalue()

    config = {
        "architecture": args.arch,
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
            + ([f"SSL_CERT_FILE={CA_BUNDLE}"] if args.base_files else []) + args.env,
        },
        "rootfs": {"type": "layers", "diff_ids": [sha256(tar)]},
        "history": [{"created_by": "deploy/oci-image.py"}],
    }
    if args.user:
        config["config"]["User"] = args.user
    if args.entrypoint:
        config["config"]["Entrypoint"] = args.entrypoint
    if args.cmd:
        config["config"]["Cmd"] = args.cmd
    if args.port:
        config["config"]["ExposedPorts"] = {p: {} for p in args.port}
    config_json = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha256(config_json), "size": len(config_json)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": sha256(layer_gz), "size": len(layer_gz)}],
    }
    manifest_json = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha256(manifest_json), "size": len(manifest_json),
            "annotations": {"io.containerd.image.name": args.name,
                            "org.opencontainers.image.ref.name": args.name.rsplit(":", 1)[-1]},
            "platform": {"architecture": args.arch, "os": "linux"},
        }],
    }
    index_json = json.dumps(index, sort_keys=True, separators=(",", ":")).encode()

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
        def add(path, data):
            info = tarfile.TarInfo(path)
            info.mtime = 0
            info.mode = 0o644
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", index_json)
        for blob in sorted([config_json, manifest_json, layer_gz], key=sha256):
            add("blobs/sha256/" + sha256(blob)[7:], blob)
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(out.getvalue())
    os.replace(tmp, args.out)
    print(f"oci-image: {args.name} -> {args.out}: layer {len(layer_gz)} bytes compressed, "
          f"{len(tar)} uncompressed, manifest {sha256(manifest_json)}", file=sys.stderr)


if __name__ == "__main__":
    main()
