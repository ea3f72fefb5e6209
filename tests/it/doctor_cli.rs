//! `ouroboros doctor` as a binary: help, usage errors (exit 64) before any cluster access, and a
//! runtime failure (exit 1) when no cluster can be reached.

use crate::common;

use crate::common::names;

fn doctor(args: &[&str]) -> (i32, String, String) {
    let mut cmd = common::command("doctor");
    cmd.args(args);
    let out = cmd.output().expect("running ouroboros");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_lists_doctor_flags_and_their_variables() {
    let (code, out, _) = doctor(&["--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--output",
        "OUROBOROS_DOCTOR_OUTPUT",
        "--ingress-controller-service",
        "OUROBOROS_DOCTOR_INGRESS_CONTROLLER_SERVICE",
        "--controller-service-account",
        "OUROBOROS_DOCTOR_CONTROLLER_SERVICE_ACCOUNT",
        "--dial",
        "OUROBOROS_DOCTOR_DIAL",
        "--dial-timeout",
        "--leader-elect",
        "--lease-namespace",
        "--node-local-dns",
        "--node-local-dns-configmap",
        "--coredns-answer",
        "--mode",
        "--coredns-configmap",
        "--gateway-api",
        "--allow-domain",
    ] {
        assert!(names(&out, flag), "{flag} missing from --help:\n{out}");
    }
}

#[test]
fn usage_errors_exit_64() {
    for args in [
        &["--ingress-controller-service", "no-slash"][..],
        &["--output", "yaml"],
        &["--gateway-class", "internal"],
        &["--deny-domain", "bad domain"],
        &["--node-local-dns", "--coredns-answer", "rewrite"],
    ] {
        let (code, _, err) = doctor(args);
        assert_eq!(code, 64, "{args:?}: {err}");
        // With --output json, stdout is JSON naming the error, whether clap or doctor's own
        // checks refused the flags.
        if args.contains(&"--output") {
            continue;
        }
        let json: Vec<&str> = args.iter().copied().chain(["--output", "json"]).collect();
        let (code, out, err) = doctor(&json);
        assert_eq!(code, 64, "{json:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{json:?}: stdout is not JSON ({e}): {out:?}"));
        assert_eq!(v["exit_code"], 64, "{v}");
        assert_eq!(v["checks"], serde_json::json!([]), "{v}");
        let error = v["error"].as_str().unwrap_or_default();
        assert!(
            !error.is_empty() && err.contains(error),
            "{json:?}: {error:?} vs {err}"
        );
    }
}

#[test]
fn unreadable_kubeconfig_is_a_runtime_failure() {
    let (code, out, err) = doctor(&["--kubeconfig", "/nonexistent/kubeconfig"]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    // One plain line with the path once, unquoted, and the reason.
    assert_eq!(
        err.trim_end(),
        "error: reading --kubeconfig /nonexistent/kubeconfig: No such file or directory (os error 2)"
    );
}

/// Outside a cluster with no kubeconfig: one plain line naming where it looked, without kube's
/// nested, quote-escaped error text.
#[test]
fn no_configuration_at_all_is_said_plainly() {
    let mut cmd = common::command("doctor");
    cmd.env("HOME", "/nonexistent-home");
    let out = cmd.output().expect("running ouroboros");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not running in a cluster")
            && err.contains("no kubeconfig at /nonexistent-home/.kube/config"),
        "{err}"
    );
    assert!(!err.contains("\\\""), "escaped quotes: {err}");
}

/// `--output json` prints JSON however doctor ends: an error object when it cannot run.
#[test]
fn json_output_is_json_even_when_doctor_cannot_run() {
    let (code, out, err) = doctor(&[
        "--output",
        "json",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is JSON");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("/nonexistent/kubeconfig")),
        "{v}"
    );
    assert_eq!(v["exit_code"], 1);
    assert_eq!(v["checks"], serde_json::json!([]));
}

/// An API server that refuses connections: the failing line itself names the server and where
/// its address came from, with the hint for a connection failure (not RBAC's).
#[test]
fn unreachable_api_server_is_named_in_the_error_line() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: x\n\
             clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n\
             contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\n"
        ),
    )
    .unwrap();
    for output in ["text", "json"] {
        let mut cmd = common::command("doctor");
        cmd.env("KUBECONFIG", &kc).args(["--output", output]);
        let out = cmd.output().expect("running ouroboros");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let want = format!(
            "the API server https://127.0.0.1:{port}/ (from KUBECONFIG={}) is unreachable; \
             check the address and the network path to it",
            kc.display()
        );
        let text = if output == "json" {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
            v["error"].as_str().unwrap().to_string()
        } else {
            let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
            assert_eq!(errors.len(), 1, "{err}");
            errors[0].to_string()
        };
        assert!(text.contains(&want), "{output}: {text}");
        assert!(
            !text.contains("forbidden") && !text.contains("\\\""),
            "{text}"
        );
    }
}

/// A kubeconfig in `dir` for the API server at `https://127.0.0.1:PORT`, not verifying its
/// certificate.
fn kubeconfig_for(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    let kc = dir.join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: x\n\
             clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}', \
             insecure-skip-tls-verify: true}}}}]\n\
             contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\n"
        ),
    )
    .unwrap();
    kc
}

/// An address that accepts TCP and never answers (a load balancer without a healthy backend),
/// and a TLS server that completes the handshake and never answers the request: doctor gives
/// up after one `--api-timeout` (not three attempts of kube's 30 s connect timeout, and not
/// never) and says that the server did not answer in time, not that it refused.
#[test]
fn a_silent_api_server_is_a_timeout_said_as_such() {
    let dir = tempfile::tempdir().unwrap();
    // Accepts, then holds every connection open without a byte.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_tcp = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let held: Vec<_> = listener.incoming().map_while(Result::ok).collect();
        drop(held);
    });
    // TLS completes (openssl s_server), then nothing answers the HTTP request.
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "k.pem",
        "-out",
        "c.pem",
        "-days",
        "1",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    let silent_tls = crate::support::free_port(crate::support::V4);
    let mut server = std::process::Command::new("openssl")
        .args([
            "s_server", "-quiet", "-cert", "c.pem", "-key", "k.pem", "-accept",
        ])
        .arg(silent_tls.to_string())
        .current_dir(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let up = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", silent_tls)).is_err() {
        assert!(
            up.elapsed() < std::time::Duration::from_secs(10),
            "openssl s_server"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for port in [silent_tcp, silent_tls] {
        let kc = kubeconfig_for(dir.path(), port);
        let kc = kc.to_str().unwrap();
        let (code, _, err) = doctor(&["--kubeconfig", kc, "--api-timeout", "1s"]);
        assert_eq!(code, 1, "{err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(errors.len(), 1, "{err}");
        assert!(
            errors[0].contains(&format!(
                "the API server https://127.0.0.1:{port}/ (from --kubeconfig {kc}) did not \
                 answer within 1s (--api-timeout)"
            )),
            "{err}"
        );
        // The start-up line says where doctor is waiting, and for how long.
        assert!(err.contains("timeout=1s"), "{err}");
    }
    let _ = server.kill();
    let _ = server.wait();
}

/// Doctor writes nothing: its help does not offer the write-side flags, which it still accepts
/// so the controller's arguments can be passed as they are.
#[test]
fn help_offers_no_write_side_flags_yet_accepts_them() {
    let (code, help, _) = doctor(&["--help"]);
    assert_eq!(code, 0);
    for flag in ["--dry-run", "--etc-hosts "] {
        assert!(!help.contains(flag), "{flag} in doctor --help:\n{help}");
    }
    // Accepted: the run fails later, for the bad flag after them, not for them.
    let (code, _, err) = doctor(&["--dry-run", "--etc-hosts", "/host/etc/hosts", "--bogus"]);
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("'--bogus'") && !err.contains("'--dry-run'"),
        "{err}"
    );
}
