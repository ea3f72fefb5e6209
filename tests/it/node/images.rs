//! The node's images, built from this machine's files with `deploy/oci-image.py` (no registry
//! is reachable, and none is needed): the pause sandbox, CoreDNS, nginx as the ingress
//! controller, a client with bash and curl, and ours from `deploy/image.sh`. All are imported
//! into containerd's `k8s.io` namespace before the kubelet starts; pods use them with
//! `imagePullPolicy: IfNotPresent`, so nothing is ever pulled.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Binaries, Node};

/// containerd's `sandbox_image`, under the name the kubelet expects.
pub const PAUSE: &str = "registry.k8s.io/pause:3.10";
/// CoreDNS under kubeadm's image name, at the version `.ci/peers/build.sh` builds.
pub const COREDNS: &str = "registry.k8s.io/coredns/coredns:v1.15.0";
pub const NGINX: &str = "ouroboros.test/nginx:1";
pub const CLIENT: &str = "ouroboros.test/client:1";
/// Ours, as `deploy/image.sh` names it: the chart's default image, tagged with its appVersion.
pub fn ours_name() -> String {
    let chart = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/ouroboros/Chart.yaml"),
    )
    .unwrap();
    let app_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .expect("Chart.yaml has an appVersion")
        .trim()
        .trim_matches('"');
    format!("ghcr.io/ouroboros-hairpin/ouroboros:{app_version}")
}

/// Our image as `deploy/image.sh` writes it (its default name: the chart's default image).
pub fn ours() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let target = if target.is_absolute() {
        target
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(target)
    };
    target.join("image/ouroboros.oci.tar")
}

/// `deploy/oci-image.py --name NAME --out OUT ARGS...`.
fn build(name: &str, out: &Path, args: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/oci-image.py");
    let result = Command::new("python3")
        .arg(script)
        .args(["--name", name, "--out"])
        .arg(out)
        .args(args)
        .output()
        .unwrap();
    assert!(
        result.status.success(),
        "building the image {name}: {}",
        String::from_utf8_lossy(&result.stderr)
    );
}

/// Builds the test images (once per test process) and imports them with ours into the node.
pub fn import_all(node: &Node, bins: &Binaries) {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let dir = node
            .dir
            .parent()
            .unwrap()
            .join(format!("ouroboros-node-images-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Swept by a later run once this process is gone, as a node's directory is.
        std::fs::write(dir.join(super::OWNER_FILE), std::process::id().to_string()).unwrap();
        build_test_images(&dir, bins);
        dir
    });
    let socket = node.dir.join("containerd/containerd.sock");
    let archives = ["pause", "coredns", "nginx", "client"].map(|n| dir.join(format!("{n}.tar")));
    for archive in archives.iter().chain([&ours()]) {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&socket)
            .args(["-n", "k8s.io", "images", "import"])
            .arg(archive)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ctr images import {}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn build_test_images(dir: &Path, bins: &Binaries) {
    let arg = |p: &Path, dest: &str| format!("{}:{dest}", p.display());
    let pause = dir.join("pause.tar");
    build(
        PAUSE,
        &pause,
        &[
            "--exe",
            &arg(&bins.pause, "/pause"),
            "--entrypoint",
            "/pause",
        ],
    );
    let coredns = dir.join("coredns.tar");
    build(
        COREDNS,
        &coredns,
        &[
            "--base-files",
            "--exe",
            &arg(&bins.coredns, "/coredns"),
            "--entrypoint",
            "/coredns",
        ],
    );
    let nginx = dir.join("nginx.tar");
    build(
        NGINX,
        &nginx,
        &[
            "--base-files",
            "--exe",
            "/usr/sbin/nginx",
            "--mkdir",
            "/var/log/nginx",
            "--mkdir",
            "/var/lib/nginx",
            "--mkdir",
            "/run",
            "--entrypoint",
            "/usr/sbin/nginx",
        ],
    );
    let client = dir.join("client.tar");
    build(
        CLIENT,
        &client,
        &[
            "--base-files",
            "--exe",
            "/bin/bash",
            "--exe",
            "/usr/bin/curl",
            "--exe",
            "/bin/sleep",
            "--exe",
            "/bin/date",
            "--entrypoint",
            "/bin/bash",
        ],
    );
}

/// `tar -xOf ARCHIVE MEMBER`: one file of an archive, as bytes.
fn member(archive: &Path, name: &str) -> Vec<u8> {
    let out = Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg(name)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name} of {}: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn blob(archive: &Path, digest: &serde_json::Value) -> Vec<u8> {
    let digest = digest.as_str().unwrap();
    member(
        archive,
        &format!("blobs/sha256/{}", digest.strip_prefix("sha256:").unwrap()),
    )
}

/// The image `deploy/image.sh` builds is the Containerfile's: the chart's default name, user
/// 65532, the binary as the entrypoint, no shell; its binary stripped of debug information,
/// and the whole at most 25 MB.
#[test]
fn our_image_is_the_containerfiles_stripped_and_small() {
    let archive = ours();
    if !archive.exists() {
        super::unavailable(&format!(
            "our image {} is not built: run deploy/image.sh",
            archive.display()
        ));
        return;
    }
    let size = std::fs::metadata(&archive).unwrap().len();
    assert!(
        size <= 25_000_000,
        "the image archive is {size} bytes, over 25 MB"
    );
    let index: serde_json::Value = serde_json::from_slice(&member(&archive, "index.json")).unwrap();
    let manifest_ref = &index["manifests"][0];
    assert_eq!(
        manifest_ref["annotations"]["io.containerd.image.name"],
        ours_name(),
        "the chart's default image"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&blob(&archive, &manifest_ref["digest"])).unwrap();
    let config: serde_json::Value =
        serde_json::from_slice(&blob(&archive, &manifest["config"]["digest"])).unwrap();
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/usr/local/bin/ouroboros"])
    );
    let layer = blob(&archive, &manifest["layers"][0]["digest"]);
    let dir = crate::support::temp_dir("image");
    std::fs::write(dir.path().join("layer.tar.gz"), &layer).unwrap();
    let listing = Command::new("tar")
        .arg("-tzf")
        .arg(dir.path().join("layer.tar.gz"))
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.lines().any(|l| l == "usr/local/bin/ouroboros"));
    for shell in ["bin/sh", "bin/bash", "usr/bin/sh", "bin/busybox"] {
        assert!(
            !listing.lines().any(|l| l == shell),
            "the image has a shell: {shell}"
        );
    }
    let extract = Command::new("tar")
        .arg("-xzf")
        .arg(dir.path().join("layer.tar.gz"))
        .arg("-C")
        .arg(dir.path())
        .arg("usr/local/bin/ouroboros")
        .output()
        .unwrap();
    assert!(extract.status.success());
    let sections = Command::new("objdump")
        .arg("-h")
        .arg(dir.path().join("usr/local/bin/ouroboros"))
        .output()
        .unwrap();
    let sections = String::from_utf8_lossy(&sections.stdout);
    assert!(
        sections.contains(".text") && !sections.contains(".debug_line"),
        "the binary keeps its debug line tables:\n{sections}"
    );
}
