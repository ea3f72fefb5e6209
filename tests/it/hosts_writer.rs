//! The etc-hosts write path on real files in a temp dir: round trips, no write when unchanged,
//! rename vs in-place writes (owner, mode, inode), shrink/grow, CRLF and missing final newline,
//! unparseable files left untouched, and the proxy Service's ClusterIPs read through a mock API.

use std::collections::BTreeSet;
use std::fs;
use std::net::IpAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::kube_mock::{calls, reply, serve, status};
use crate::support::{temp_dir, TempDir};

use ouroboros::dns::etc_hosts::{self, HostsGroup};
use ouroboros::dns::mode::etc_hosts::{
    replace_if_unchanged, update, HostsWriter, WriteMethod, Written,
};
use ouroboros::dns::write::apply::Outcome;
use ouroboros::dns::write::proxy_ips::ProxyIps;
use ouroboros::dns::{BEGIN_MARKER, END_MARKER};
use ouroboros::hostname::{HostPolicy, Hostname};

fn hosts(names: &[&str]) -> BTreeSet<Hostname> {
    let p = HostPolicy::new("cluster.local", &[], &[]);
    names.iter().map(|n| p.check(n).unwrap()).collect()
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hosts")
        .join(name);
    fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `text` written to `dir/hosts`.
fn file(dir: &TempDir, text: &str) -> PathBuf {
    let p = dir.path().join("hosts");
    fs::write(&p, text).unwrap();
    p
}

fn writer(path: &Path, ip_list: &[&str]) -> HostsWriter {
    HostsWriter::new(path.to_path_buf(), ProxyIps::Static(ips(ip_list)))
}

fn stamp(p: &Path) -> (u64, i64, i64, u64) {
    let m = fs::metadata(p).unwrap();
    (m.ino(), m.mtime(), m.mtime_nsec(), m.len())
}

#[tokio::test]
async fn round_trip_by_rename_keeps_owner_and_mode() {
    let dir = temp_dir("hosts-rename");
    let original = fixture("debian.hosts");
    let path = file(&dir, &original);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
    // As root (CI), give the file another owner to see it kept; otherwise it is ours anyway.
    let root = nix::unistd::geteuid().is_root();
    if root {
        std::os::unix::fs::chown(&path, Some(4321), Some(4322)).unwrap();
    }
    let owner = {
        let m = fs::metadata(&path).unwrap();
        (m.uid(), m.gid())
    };
    let inode = fs::metadata(&path).unwrap().ino();

    let want_hosts = hosts(&["www.example.com", "api.example.com", "*.apps.example.com"]);
    let w = writer(&path, &["10.43.0.5", "fd00::5"]);
    let a = w.apply(&want_hosts).await.unwrap();
    assert_eq!(a.outcome, Outcome::Written);
    let text = fs::read_to_string(&path).unwrap();
    let want = format!(
        "{original}{BEGIN_MARKER}\n10.43.0.5 api.example.com\nfd00::5 api.example.com\n\
         10.43.0.5 www.example.com\nfd00::5 www.example.com\n{END_MARKER}\n"
    );
    assert_eq!(text, want);
    let change = a.change.unwrap();
    assert_eq!(change.before.as_deref(), Some(original.as_str()));
    assert_eq!(change.after.as_deref(), Some(want.as_str()));

    let m = fs::metadata(&path).unwrap();
    assert_ne!(m.ino(), inode, "replaced by rename");
    assert_eq!(m.permissions().mode() & 0o7777, 0o640);
    assert_eq!((m.uid(), m.gid()), owner);
    // No temporary file left behind.
    let names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["hosts"]);

    let c = w.cleanup().await.unwrap();
    assert_eq!(c.outcome, Outcome::Written);
    assert_eq!(fs::read_to_string(&path).unwrap(), original);
    // Nothing left to remove: no write.
    let before = stamp(&path);
    assert_eq!(w.cleanup().await.unwrap().outcome, Outcome::Unchanged);
    assert_eq!(stamp(&path), before);
}

#[tokio::test]
async fn unchanged_set_writes_nothing() {
    for method in [WriteMethod::Auto, WriteMethod::InPlace] {
        let dir = temp_dir("hosts-unchanged");
        let path = file(&dir, &fixture("stale-block.hosts"));
        let w = writer(&path, &["10.43.0.5"]).write_method(method);
        let set = hosts(&["www.example.com"]);
        assert_eq!(w.apply(&set).await.unwrap().outcome, Outcome::Written);
        let before = stamp(&path);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let a = w.apply(&set).await.unwrap();
        assert_eq!(a.outcome, Outcome::Unchanged, "{method:?}");
        assert_eq!(a.change, None);
        assert_eq!(stamp(&path), before, "{method:?}: inode, mtime and size");
    }
}

#[tokio::test]
async fn in_place_grow_and_shrink_keep_the_inode() {
    let dir = temp_dir("hosts-inplace");
    let original = fixture("stale-block.hosts");
    let path = file(&dir, &original);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o604)).unwrap();
    let inode = fs::metadata(&path).unwrap().ino();
    let w = writer(&path, &["10.43.0.5", "fd00::5"]).write_method(WriteMethod::InPlace);
    let ipl = ips(&["10.43.0.5", "fd00::5"]);

    let mut text = original.clone();
    // Grow, shrink to one name, shrink to nothing, grow again.
    for set in [
        hosts(&["a.example.com", "b.example.com", "c.example.com"]),
        hosts(&["b.example.com"]),
        BTreeSet::new(),
        hosts(&["a.example.com", "b.example.com"]),
    ] {
        let want = etc_hosts::splice(&text, &set, &ipl).unwrap().text;
        assert_eq!(w.apply(&set).await.unwrap().outcome, Outcome::Written);
        let got = fs::read_to_string(&path).unwrap();
        assert_eq!(got, want, "exact text, no padding left");
        let m = fs::metadata(&path).unwrap();
        assert_eq!(m.ino(), inode);
        assert_eq!(m.len() as usize, want.len());
        assert_eq!(m.permissions().mode() & 0o7777, 0o604);
        text = got;
    }
    // The text outside the block is what it was (the re-added block goes at the end).
    assert_eq!(
        etc_hosts::splice(&text, &BTreeSet::new(), &[])
            .unwrap()
            .text,
        "127.0.0.1 localhost\n10.0.0.4 registry.internal\n"
    );
}

#[tokio::test]
async fn crlf_and_no_final_newline_round_trip() {
    for name in [
        "crlf-no-final-newline.hosts",
        "no-final-newline.hosts",
        "empty.hosts",
        "reference-tool-block-at-end.hosts",
    ] {
        for method in [WriteMethod::Auto, WriteMethod::InPlace] {
            let dir = temp_dir("hosts-eol");
            let original = fixture(name);
            let path = file(&dir, &original);
            let w = writer(&path, &["10.43.0.5"]).write_method(method);
            let set = hosts(&["www.example.com", "shop.example.com"]);
            w.apply(&set).await.unwrap();
            let got = fs::read_to_string(&path).unwrap();
            assert_eq!(
                got,
                etc_hosts::splice(&original, &set, &ips(&["10.43.0.5"]))
                    .unwrap()
                    .text,
                "{name} {method:?}"
            );
            if original.contains("\r\n") {
                assert!(got.contains(&format!("{BEGIN_MARKER}\r\n")), "{got:?}");
            }
            w.cleanup().await.unwrap();
            let back = fs::read_to_string(&path).unwrap();
            if name == "reference-tool-block-at-end.hosts" {
                // The reference tool's block is adopted, and removed on cleanup.
                let want = etc_hosts::splice(&original, &BTreeSet::new(), &[]).unwrap();
                assert_eq!(back, want.text, "{method:?}");
                assert!(!back.contains(BEGIN_MARKER));
            } else {
                assert_eq!(back, original, "{name} {method:?}");
            }
        }
    }
}

#[tokio::test]
async fn unparseable_file_is_never_written() {
    for (name, line) in [
        ("bad/two-blocks.hosts", 4),
        ("bad/begin-without-end.hosts", 2),
    ] {
        for method in [WriteMethod::Auto, WriteMethod::InPlace] {
            let dir = temp_dir("hosts-bad");
            let original = fixture(name);
            let path = file(&dir, &original);
            let before = stamp(&path);
            let w = writer(&path, &["10.43.0.5"]).write_method(method);
            let e = w.apply(&hosts(&["www.example.com"])).await.unwrap_err();
            assert_eq!(e.reason, "unparseable");
            assert!(e.object.is_none());
            assert!(
                e.message.contains(&path.display().to_string())
                    && e.message.contains(&format!("line {line}:"))
                    && e.message.contains("nothing was written"),
                "{}",
                e.message
            );
            // Cleanup refuses as well.
            assert_eq!(w.cleanup().await.unwrap_err().reason, "unparseable");
            assert_eq!(fs::read_to_string(&path).unwrap(), original);
            assert_eq!(stamp(&path), before);
        }
    }
}

#[tokio::test]
async fn not_found_and_not_utf8() {
    let dir = temp_dir("hosts-errors");
    let missing = dir.path().join("nope");
    let e = writer(&missing, &["10.0.0.1"])
        .apply(&hosts(&["a.example.com"]))
        .await
        .unwrap_err();
    assert_eq!(e.reason, "not_found");
    assert!(e.message.contains("--etc-hosts"), "{}", e.message);
    assert!(!missing.exists(), "never created");

    let path = dir.path().join("hosts");
    fs::write(&path, b"127.0.0.1 localhost\n10.0.0.1 caf\xe9\n").unwrap();
    let e = writer(&path, &["10.0.0.1"])
        .apply(&hosts(&["a.example.com"]))
        .await
        .unwrap_err();
    assert_eq!(e.reason, "unparseable");
    assert!(
        e.message.contains("not UTF-8") && e.message.contains("offset 32"),
        "{}",
        e.message
    );
    assert_eq!(
        fs::read(&path).unwrap(),
        b"127.0.0.1 localhost\n10.0.0.1 caf\xe9\n"
    );
}

/// A hard-linked file must keep its links, so even `Auto` writes it in place: a real
/// condition, unlike a read-only directory, that also holds for root.
#[tokio::test]
async fn hard_linked_file_is_written_in_place() {
    let dir = temp_dir("hosts-link");
    let original = fixture("debian.hosts");
    let path = file(&dir, &original);
    let other = dir.path().join("hosts.link");
    fs::hard_link(&path, &other).unwrap();
    let set = hosts(&["www.example.com"]);
    let ip = ips(&["10.0.0.1"]);
    let u = update(
        &path,
        &[HostsGroup {
            hosts: &set,
            ips: &ip,
        }],
        WriteMethod::Auto,
        false,
        5,
    )
    .unwrap();
    assert_eq!(u.written, Some(Written::InPlace));
    assert_eq!(u.restarts, 0);
    let got = fs::read_to_string(&path).unwrap();
    assert_eq!(got, u.after);
    assert_eq!(
        fs::read_to_string(&other).unwrap(),
        got,
        "both links see it"
    );
    assert_eq!(fs::metadata(&path).unwrap().nlink(), 2);

    // With a single link the same call renames.
    fs::remove_file(&other).unwrap();
    let u = update(&path, &[], WriteMethod::Auto, false, 5).unwrap();
    assert_eq!(u.written, Some(Written::Renamed));
    assert_eq!(fs::read_to_string(&path).unwrap(), original);
}

#[tokio::test]
async fn symlink_target_is_edited_and_the_link_kept() {
    let dir = temp_dir("hosts-symlink");
    let original = fixture("debian.hosts");
    let target = file(&dir, &original);
    let link = dir.path().join("hosts-link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let w = writer(&link, &["10.0.0.1"]);
    w.apply(&hosts(&["www.example.com"])).await.unwrap();
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(fs::read_to_string(&target)
        .unwrap()
        .contains("10.0.0.1 www.example.com\n"));
}

#[tokio::test]
async fn dry_run_writes_nothing() {
    let dir = temp_dir("hosts-dry");
    let original = fixture("debian.hosts");
    let path = file(&dir, &original);
    let before = stamp(&path);
    let w = writer(&path, &["10.0.0.1"]).dry_run(true);
    let a = w.apply(&hosts(&["www.example.com"])).await.unwrap();
    assert_eq!(a.outcome, Outcome::DryRun);
    assert!(a
        .change
        .unwrap()
        .after
        .unwrap()
        .contains("10.0.0.1 www.example.com"));
    assert_eq!(stamp(&path), before);
    assert_eq!(fs::read_to_string(&path).unwrap(), original);
}

const SERVICE_PATH: &str = "/api/v1/namespaces/ouroboros/services/ouroboros-proxy";

fn service(cluster_ips: &[&str]) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "ouroboros-proxy", "namespace": "ouroboros", "resourceVersion": "7"},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": cluster_ips[0],
            "clusterIPs": cluster_ips,
            "ports": [{"port": 443, "protocol": "TCP"}]
        }
    })
}

#[tokio::test]
async fn proxy_ips_from_the_service_each_sync() {
    let dir = temp_dir("hosts-svc");
    let path = file(&dir, "127.0.0.1 localhost\n");
    let (client, task) = serve(vec![
        reply(200, service(&["fd00:10:96::a", "10.96.0.10"])),
        reply(200, service(&["10.96.0.10"])),
    ]);
    let ipsrc = ProxyIps::new(
        Some(client),
        &[],
        "ouroboros",
        "ouroboros-proxy",
        "--proxy-ip",
    );
    let w = HostsWriter::new(path.clone(), ipsrc);
    w.apply(&hosts(&["www.example.com", "*.example.org"]))
        .await
        .unwrap();
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        format!(
            "127.0.0.1 localhost\n{BEGIN_MARKER}\n10.96.0.10 www.example.com\n\
             fd00:10:96::a www.example.com\n{END_MARKER}\n"
        )
    );
    // The Service went single-stack: the next sync follows.
    w.apply(&hosts(&["www.example.com"])).await.unwrap();
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        format!("127.0.0.1 localhost\n{BEGIN_MARKER}\n10.96.0.10 www.example.com\n{END_MARKER}\n")
    );
    // Only wildcards, and cleanup: nothing to resolve, no API call.
    w.apply(&hosts(&["*.example.org"])).await.unwrap();
    w.cleanup().await.unwrap();
    drop(w);
    let seen = task.await.unwrap();
    assert_eq!(calls(&seen), [("GET", SERVICE_PATH), ("GET", SERVICE_PATH)]);
}

#[tokio::test]
async fn proxy_service_errors_write_nothing() {
    for (code, body, reason, needle) in [
        (
            403,
            status(
                403,
                "Forbidden",
                "services \"ouroboros-proxy\" is forbidden: User \"system:serviceaccount:ouroboros:ouroboros\" cannot get resource \"services\"",
            ),
            "forbidden",
            "grant the controller's ServiceAccount `get` on services (resourceNames: [ouroboros-proxy]) in namespace ouroboros, or pass --proxy-ip",
        ),
        (
            404,
            status(404, "NotFound", "services \"ouroboros-proxy\" not found"),
            "not_found",
            "proxy Service ouroboros/ouroboros-proxy not found",
        ),
        (200, service(&["None"]), "no_cluster_ip", "headless"),
    ] {
        let dir = temp_dir("hosts-svc-err");
        let path = file(&dir, "127.0.0.1 localhost\n");
        let (client, task) = serve(vec![reply(code, body)]);
        let ipsrc =
            ProxyIps::new(Some(client), &[], "ouroboros", "ouroboros-proxy", "--proxy-ip");
        let e = HostsWriter::new(path.clone(), ipsrc)
            .apply(&hosts(&["www.example.com"]))
            .await
            .unwrap_err();
        assert_eq!(e.reason, reason);
        assert!(e.message.contains(needle), "{}", e.message);
        let obj = e.object.unwrap();
        assert_eq!((obj.kind, obj.name.as_str()), ("Service", "ouroboros-proxy"));
        assert_eq!(fs::read_to_string(&path).unwrap(), "127.0.0.1 localhost\n");
        assert_eq!(calls(&task.await.unwrap()), [("GET", SERVICE_PATH)]);
    }
}

/// The file changed between our read and our write (another program added a line): nothing
/// is written, with either method, and the other program's edit stays.
#[test]
fn a_concurrent_edit_is_never_clobbered() {
    for method in [WriteMethod::Auto, WriteMethod::InPlace] {
        let dir = temp_dir("hosts-race");
        let original = fixture("debian.hosts");
        let path = file(&dir, &original);
        let ours = etc_hosts::splice(&original, &hosts(&["www.example.com"]), &ips(&["10.0.0.1"]))
            .unwrap()
            .text;
        let theirs = format!("{original}192.168.1.20 printer.lan\n");
        fs::write(&path, &theirs).unwrap();
        let before = stamp(&path);
        let got =
            replace_if_unchanged(&path, original.as_bytes(), ours.as_bytes(), method).unwrap();
        assert_eq!(got, None, "{method:?}");
        assert_eq!(fs::read_to_string(&path).unwrap(), theirs);
        assert_eq!(stamp(&path), before);
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left");

        // Edited again from what is there now, both edits are kept.
        let (set, ip) = (hosts(&["www.example.com"]), ips(&["10.0.0.1"]));
        let u = update(
            &path,
            &[HostsGroup {
                hosts: &set,
                ips: &ip,
            }],
            method,
            false,
            5,
        )
        .unwrap();
        assert!(u.written.is_some());
        let text = fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("192.168.1.20 printer.lan\n")
                && text.contains("10.0.0.1 www.example.com\n")
        );
    }
}

use crate::sys::{get_xattr, set_xattr};

/// Extended attributes (where the SELinux label and ACLs live) survive the rename path.
#[tokio::test]
async fn extended_attributes_survive_a_rename() {
    let dir = temp_dir("hosts-xattr");
    let path = file(&dir, &fixture("debian.hosts"));
    if let Err(e) = set_xattr(&path, "user.ouroboros-test", b"kept") {
        // Not silent: filesystems without user xattrs (old tmpfs) cannot run this check.
        assert_eq!(e.raw_os_error(), Some(libc::ENOTSUP), "{e}");
        eprintln!(
            "extended_attributes_survive_a_rename: {} has no user xattrs; not checked",
            dir.path().display()
        );
        return;
    }
    let inode = fs::metadata(&path).unwrap().ino();
    writer(&path, &["10.0.0.1"])
        .apply(&hosts(&["www.example.com"]))
        .await
        .unwrap();
    assert_ne!(fs::metadata(&path).unwrap().ino(), inode, "renamed");
    assert_eq!(
        get_xattr(&path, "user.ouroboros-test").as_deref(),
        Some(&b"kept"[..])
    );
}
