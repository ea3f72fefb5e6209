//! Values written for the reference chart, mapped onto ours.

use super::*;

// --- values written for the reference chart ------------------------------------------------------

/// Every key of the reference tool's chart values (lexfrei/ouroboros), set to a realistic value
/// other than its default.
const FIXTURE: &str = "tests/fixtures/chart/reference-values.yaml";
/// Its fullnameOverride.
pub(super) const REFERENCE_FULLNAME: &str = "hairpin-fix";
/// The fixture turns the controller and the proxy off; most of its keys show on them.
pub(super) const REFERENCE_ON: &[&str] = &["controller.enabled=true", "proxy.enabled=true"];

pub(super) fn reference_values() -> PathBuf {
    root().join(FIXTURE)
}

/// The fixture as is, then with the controller and proxy on, and variations of that.
pub(super) const REFERENCE_CASES: &[(&str, &[&str])] = &[
    ("reference values", &[]),
    ("reference values, controller and proxy on", REFERENCE_ON),
    (
        "reference values, coredns mode",
        &[
            "controller.enabled=true",
            "proxy.enabled=true",
            "controller.mode=coredns",
        ],
    ),
    (
        "reference values, coredns-import mode",
        &[
            "controller.enabled=true",
            "proxy.enabled=true",
            "controller.mode=coredns-import",
        ],
    ),
    (
        "reference values, a target host",
        &[
            "controller.enabled=true",
            "proxy.enabled=true",
            "proxy.target.host=traefik.traefik.svc.cozy.local",
        ],
    ),
    (
        "reference values, maxUnavailable",
        &[
            "controller.enabled=true",
            "proxy.enabled=true",
            "podDisruptionBudget.minAvailable=null",
            "podDisruptionBudget.maxUnavailable=2",
        ],
    ),
    (
        "reference values, PodDisruptionBudget off",
        &[
            "controller.enabled=true",
            "proxy.enabled=true",
            "podDisruptionBudget.enabled=false",
        ],
    ),
];

pub(super) fn reference_renders() -> Vec<Rendered> {
    render_cases("helm", &[&reference_values()], REFERENCE_CASES)
}

fn reference(case: &str) -> &'static [Value] {
    let (_, sets) = REFERENCE_CASES
        .iter()
        .find(|(c, _)| *c == case)
        .unwrap_or_else(|| panic!("no case {case:?}"));
    &render_with("helm", &[&reference_values()], sets).objs
}

/// What NOTES.txt says about a key of the reference chart.
#[derive(Clone, Copy, Debug)]
enum Note {
    /// "`old` is deprecated: use `new`".
    Renamed(&'static str),
    /// "`old` is ignored: why".
    Ignored,
    /// Nothing: this chart has the key under the same name.
    Same,
}

/// One key of the reference chart: its note, and a check that it has its effect.
type KeyCheck = (&'static str, Note, Box<dyn Fn()>);

fn args(objs: &[Value], k: &str, suffix: &str) -> Vec<String> {
    let n = format!("{REFERENCE_FULLNAME}-{suffix}");
    container_args(pod_named(objs, k, &n).unwrap_or_else(|| panic!("no {k} {n}")))
}

fn pod<'a>(objs: &'a [Value], k: &str, suffix: &str) -> &'a Value {
    let n = format!("{REFERENCE_FULLNAME}-{suffix}");
    pod_named(objs, k, &n).unwrap_or_else(|| panic!("no {k} {n}"))
}

fn obj<'a>(objs: &'a [Value], k: &str, suffix: &str) -> Option<&'a Value> {
    find(objs, k, &format!("{REFERENCE_FULLNAME}-{suffix}"))
}

pub(super) fn has(args: &[String], a: &str) -> bool {
    args.iter().any(|x| x == a)
}

/// The value at a dotted path (a number indexes a list).
fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, k| match k.parse::<usize>() {
        Ok(i) => &v[i],
        Err(_) => &v[k],
    })
}

/// The fixture's value at a dotted path, as JSON.
fn fixture_value(path: &str) -> Value {
    let v: Value =
        yaml_serde::from_str(&std::fs::read_to_string(reference_values()).unwrap()).unwrap();
    at(&v, path).clone()
}

fn ref_off() -> &'static [Value] {
    reference("reference values")
}
fn ref_on() -> &'static [Value] {
    reference("reference values, controller and proxy on")
}
fn ref_ctl() -> Vec<String> {
    args(ref_on(), "Deployment", "controller")
}
fn ref_ds() -> Vec<String> {
    args(ref_off(), "DaemonSet", "etc-hosts")
}
fn ref_px() -> Vec<String> {
    args(ref_on(), "Deployment", "proxy")
}
fn ref_ctl_pod() -> &'static Value {
    pod(ref_on(), "Deployment", "controller")
}
fn ref_px_pod() -> &'static Value {
    pod(ref_on(), "Deployment", "proxy")
}
fn ref_ds_pod() -> &'static Value {
    pod(ref_off(), "DaemonSet", "etc-hosts")
}

/// The container whose arguments `args` gives is passed `arg`.
fn passes(args: fn() -> Vec<String>, arg: &'static str) -> Box<dyn Fn()> {
    Box::new(move || {
        let a = args();
        assert!(has(&a, arg), "{arg} missing: {a:?}");
    })
}

/// The containers of the controller, the etc-hosts DaemonSet and the proxy are all passed `arg`.
fn all_pass(arg: &'static str) -> Box<dyn Fn()> {
    Box::new(move || {
        for a in [ref_ctl(), ref_ds(), ref_px()] {
            assert!(has(&a, arg), "{a:?}");
        }
    })
}

/// The controller of the reference case `case` is passed `arg`.
fn controller_passes_in(case: &'static str, arg: &'static str) -> Box<dyn Fn()> {
    Box::new(move || {
        let a = args(reference(case), "Deployment", "controller");
        assert!(has(&a, arg), "{case}: {a:?}");
    })
}

/// No uninstall hook in that case.
fn no_hook(case: &'static str) -> Box<dyn Fn()> {
    Box::new(move || assert!(obj(reference(case), "Job", "cleanup").is_none(), "{case}"))
}

/// A pod field the reference chart passed through verbatim.
fn same(key: &'static str, pod: fn() -> &'static Value, field: &'static str) -> Box<dyn Fn()> {
    Box::new(move || assert_eq!(at(pod(), field), &fixture_value(key), "{key}"))
}

/// The object `k` `<fullname>-suffix` of the fixture with the controller and proxy on has
/// `want` at `path`.
fn on_is(k: &'static str, suffix: &'static str, path: &'static str, want: Value) -> Box<dyn Fn()> {
    Box::new(move || {
        let o = obj(ref_on(), k, suffix).unwrap_or_else(|| panic!("no {k} {suffix}"));
        assert_eq!(at(o, path), &want, "{k} {suffix}: {path}");
    })
}

/// The pod-level keys the controller and proxy Deployments share, checked the same way for both.
fn pod_checks(component: &'static str, pod: fn() -> &'static Value) -> Vec<KeyCheck> {
    // Keys live for the whole test run: leaked once per component.
    let key = |k: &str| -> &'static str { Box::leak(format!("{component}.{k}").into_boxed_str()) };
    let annotations = key("podAnnotations");
    let mut checks: Vec<KeyCheck> = vec![
        (
            key("resources"),
            Note::Same,
            same(key("resources"), pod, "containers.0.resources"),
        ),
        (
            annotations,
            Note::Same,
            on_is(
                "Deployment",
                component,
                "spec.template.metadata.annotations",
                fixture_value(annotations),
            ),
        ),
        (
            key("podLabels"),
            Note::Same,
            on_is(
                "Deployment",
                component,
                "spec.template.metadata.labels.team",
                "platform".into(),
            ),
        ),
    ];
    for field in [
        "nodeSelector",
        "tolerations",
        "affinity",
        "topologySpreadConstraints",
    ] {
        let k = key(field);
        checks.push((k, Note::Same, same(k, pod, field)));
    }
    checks
}

/// Every key of the reference chart's values with its check: one table per part of the chart.
fn key_checks() -> Vec<KeyCheck> {
    [
        image_and_name_keys(),
        controller_keys(),
        proxy_keys(),
        external_dns_keys(),
        etc_hosts_and_account_keys(),
        disruption_and_network_keys(),
        pod_checks("controller", ref_ctl_pod),
        pod_checks("proxy", ref_px_pod),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn image_and_name_keys() -> Vec<KeyCheck> {
    use Note::*;
    vec![
        (
            "image.repository",
            Same,
            Box::new(|| {
                let image = ref_ctl_pod()["containers"][0]["image"].as_str().unwrap();
                assert!(
                    image.starts_with("registry.example/mirror/ouroboros:"),
                    "{image}"
                );
            }),
        ),
        (
            "image.tag",
            Same,
            Box::new(|| {
                let image = ref_px_pod()["containers"][0]["image"].as_str().unwrap();
                assert!(image.ends_with(":0.1.0-mirror.1"), "{image}");
            }),
        ),
        (
            "image.pullPolicy",
            Same,
            Box::new(|| {
                assert_eq!(ref_ds_pod()["containers"][0]["imagePullPolicy"], "Always");
            }),
        ),
        (
            "imagePullSecrets",
            Same,
            same("imagePullSecrets", ref_px_pod, "imagePullSecrets"),
        ),
        (
            "nameOverride",
            Same,
            Box::new(|| {
                let ds = obj(ref_off(), "DaemonSet", "etc-hosts").unwrap();
                assert_eq!(
                    ds["metadata"]["labels"]["app.kubernetes.io/name"],
                    "hairpin"
                );
            }),
        ),
        (
            "fullnameOverride",
            Same,
            Box::new(|| assert!(obj(ref_on(), "Service", "proxy").is_some())),
        ),
        (
            "controller.cleanupHookImage",
            Ignored,
            Box::new(|| {
                let text = serde_json::to_string(ref_on()).unwrap();
                assert!(!text.contains("kubectl"), "no kubectl image is rendered");
            }),
        ),
        (
            "externalDns.cleanupHookImage",
            Ignored,
            Box::new(|| {
                let text =
                    serde_json::to_string(reference("reference values, coredns mode")).unwrap();
                assert!(!text.contains("kubectl"), "no kubectl image is rendered");
            }),
        ),
        (
            "terminationGracePeriodSeconds",
            Ignored,
            Box::new(|| assert!(ref_ctl_pod()["terminationGracePeriodSeconds"].is_null())),
        ),
    ]
}

fn controller_keys() -> Vec<KeyCheck> {
    use Note::*;
    const COREDNS: &str = "reference values, coredns mode";
    const IMPORT: &str = "reference values, coredns-import mode";
    vec![
        (
            "controller.enabled",
            Same,
            Box::new(|| {
                assert!(obj(ref_off(), "Deployment", "controller").is_none());
                assert!(obj(ref_on(), "Deployment", "controller").is_some());
            }),
        ),
        (
            "controller.replicaCount",
            Renamed("controller.replicas"),
            on_is("Deployment", "controller", "spec.replicas", 2.into()),
        ),
        (
            "controller.clusterDomain",
            Renamed("clusterDomain"),
            all_pass("--cluster-domain=cozy.local"),
        ),
        (
            "controller.mode",
            Same,
            passes(ref_ctl, "--mode=external-dns"),
        ),
        (
            "controller.gatewayApi.enabled",
            Renamed("controller.gatewayApi"),
            Box::new(|| {
                assert!(has(&ref_ctl(), "--gateway-api") && has(&ref_ds(), "--gateway-api"))
            }),
        ),
        (
            "controller.ingressClass",
            Same,
            passes(ref_ctl, "--ingress-class=nginx-public"),
        ),
        (
            "controller.gatewayClass",
            Same,
            passes(ref_ctl, "--gateway-class=envoy-public"),
        ),
        (
            "controller.coredns.namespace",
            Same,
            controller_passes_in(COREDNS, "--coredns-namespace=dns-system"),
        ),
        (
            "controller.coredns.configmap",
            Same,
            controller_passes_in(COREDNS, "--coredns-configmap=coredns-main"),
        ),
        (
            "controller.coredns.key",
            Same,
            controller_passes_in(COREDNS, "--coredns-key=Corefile.main"),
        ),
        (
            "controller.coredns.cleanupOnUninstall",
            Renamed("controller.cleanupOnUninstall"),
            no_hook(COREDNS),
        ),
        (
            "controller.corednsImport.namespace",
            Same,
            controller_passes_in(IMPORT, "--coredns-import-namespace=dns-system"),
        ),
        (
            "controller.corednsImport.configmap",
            Same,
            controller_passes_in(IMPORT, "--coredns-import-configmap=coredns-extra"),
        ),
        (
            "controller.corednsImport.key",
            Same,
            controller_passes_in(IMPORT, "--coredns-import-key=hairpin.override"),
        ),
        (
            "controller.corednsImport.cleanupOnUninstall",
            Renamed("controller.cleanupOnUninstall"),
            no_hook(IMPORT),
        ),
        ("controller.resync", Same, passes(ref_ctl, "--resync=1m")),
        (
            "controller.logLevel",
            Renamed("logLevel"),
            all_pass("--log-level=debug"),
        ),
    ]
}

fn proxy_keys() -> Vec<KeyCheck> {
    use Note::*;
    vec![
        (
            "proxy.enabled",
            Same,
            Box::new(|| {
                assert!(
                    obj(ref_off(), "Deployment", "proxy").is_none()
                        && obj(ref_off(), "Service", "proxy").is_none()
                );
                assert!(obj(ref_on(), "Deployment", "proxy").is_some());
            }),
        ),
        (
            "proxy.replicaCount",
            Renamed("proxy.replicas"),
            on_is("Deployment", "proxy", "spec.replicas", 3.into()),
        ),
        (
            "proxy.service.type",
            Same,
            on_is("Service", "proxy", "spec.type", "NodePort".into()),
        ),
        (
            "proxy.service.annotations",
            Same,
            on_is(
                "Service",
                "proxy",
                "metadata.annotations",
                fixture_value("proxy.service.annotations"),
            ),
        ),
        (
            "proxy.target.host",
            Same,
            Box::new(|| {
                // Empty in the fixture: the Service below. Set, it wins, as in the reference chart.
                let host = reference("reference values, a target host");
                let a = args(host, "Deployment", "proxy");
                assert!(
                    has(&a, "--target-host=traefik.traefik.svc.cozy.local"),
                    "{a:?}"
                );
                assert!(
                    !a.iter().any(|x| x.starts_with("--target-service")),
                    "{a:?}"
                );
                // A host target is not watched for its ipMode.
                let c = args(host, "Deployment", "controller");
                assert!(!c.iter().any(|x| x.contains("ingress-controller")), "{c:?}");
            }),
        ),
        (
            "proxy.target.serviceName",
            Same,
            passes(ref_px, "--target-service-name=traefik"),
        ),
        (
            "proxy.target.namespace",
            Renamed("proxy.target.serviceNamespace"),
            Box::new(|| {
                assert!(has(&ref_px(), "--target-service-namespace=traefik"));
                // The Service it makes the target is watched for its ipMode.
                assert!(has(
                    &ref_ctl(),
                    "--ingress-controller-service=traefik/traefik"
                ));
                let role = obj(ref_on(), "Role", "controller-ipmode-traefik").unwrap();
                assert_eq!(role["metadata"]["namespace"], "traefik");
            }),
        ),
        (
            "proxy.target.httpPort",
            Same,
            passes(ref_px, "--target-http-port=8000"),
        ),
        (
            "proxy.target.httpsPort",
            Same,
            passes(ref_px, "--target-https-port=8443"),
        ),
        (
            "proxy.dialTimeout",
            Same,
            passes(ref_px, "--dial-timeout=3s"),
        ),
        (
            "proxy.readyTimeout",
            Same,
            passes(ref_px, "--ready-timeout=1s"),
        ),
        (
            "proxy.shutdownGrace",
            Renamed("proxy.shutdownGraceSeconds"),
            Box::new(|| {
                assert!(has(&ref_px(), "--shutdown-grace=75s"), "1m15s");
                assert_eq!(ref_px_pod()["terminationGracePeriodSeconds"], 5 + 75 + 5);
            }),
        ),
    ]
}

fn external_dns_keys() -> Vec<KeyCheck> {
    use Note::*;
    let renamed = |old: &'static str, arg: &'static str| -> KeyCheck {
        let new = old.strip_prefix("externalDns.").unwrap();
        let new: &'static str = Box::leak(format!("controller.externalDns.{new}").into_boxed_str());
        (old, Renamed(new), passes(ref_ctl, arg))
    };
    vec![
        (
            "externalDns.namespace",
            Renamed("controller.externalDns.namespace"),
            Box::new(|| {
                assert!(has(&ref_ctl(), "--external-dns-namespace=dns-records"));
                let role = obj(ref_on(), "Role", "controller-external-dns").unwrap();
                assert_eq!(role["metadata"]["namespace"], "dns-records");
            }),
        ),
        (
            "externalDns.recordTTL",
            Renamed("controller.externalDns.recordTtl"),
            passes(ref_ctl, "--external-dns-record-ttl=300"),
        ),
        (
            "externalDns.proxyIP",
            Renamed("controller.externalDns.proxyIps"),
            passes(ref_ctl, "--external-dns-proxy-ip=10.96.100.10"),
        ),
        renamed("externalDns.output", "--external-dns-output=service"),
        renamed(
            "externalDns.annotationPrefix",
            "--external-dns-annotation-prefix=internal-dns.example.com/",
        ),
        renamed(
            "externalDns.proxyService",
            "--external-dns-proxy-service=shared-hairpin-proxy",
        ),
        renamed(
            "externalDns.annotations",
            "--external-dns-annotation=external-dns.alpha.kubernetes.io/cloudflare-proxied=false",
        ),
        renamed(
            "externalDns.labels",
            "--external-dns-label=external-dns-instance=internal-dns",
        ),
        (
            "externalDns.cleanupOnUninstall",
            Renamed("controller.cleanupOnUninstall"),
            no_hook("reference values, controller and proxy on"),
        ),
    ]
}

fn etc_hosts_and_account_keys() -> Vec<KeyCheck> {
    use Note::*;
    vec![
        (
            "etcHosts.enabled",
            Same,
            Box::new(|| assert!(obj(ref_off(), "DaemonSet", "etc-hosts").is_some())),
        ),
        (
            "etcHosts.hostsPath",
            Renamed("etcHosts.hostPath"),
            Box::new(|| {
                assert_eq!(
                    ref_ds_pod()["volumes"][0]["hostPath"]["path"],
                    "/var/lib/hosts/hosts"
                );
            }),
        ),
        (
            "etcHosts.proxyIP",
            Renamed("etcHosts.proxyIps"),
            passes(ref_ds, "--proxy-ip=10.96.100.10"),
        ),
        (
            "etcHosts.resources",
            Same,
            same("etcHosts.resources", ref_ds_pod, "containers.0.resources"),
        ),
        (
            "etcHosts.tolerations",
            Same,
            same("etcHosts.tolerations", ref_ds_pod, "tolerations"),
        ),
        (
            "serviceAccount.annotations",
            Same,
            Box::new(|| {
                let sas: Vec<_> = ref_on()
                    .iter()
                    .filter(|o| kind(o) == "ServiceAccount")
                    .collect();
                assert!(sas.len() >= 3, "{sas:?}");
                let key = "iam.gke.io/gcp-service-account";
                for sa in sas {
                    assert_eq!(
                        sa["metadata"]["annotations"][key],
                        fixture_value("serviceAccount.annotations")[key],
                        "{}",
                        name(sa)
                    );
                }
            }),
        ),
        (
            "serviceAccount.name",
            Same,
            Box::new(|| {
                assert_eq!(ref_ctl_pod()["serviceAccountName"], "hairpin-controller");
                assert!(find(ref_on(), "ServiceAccount", "hairpin-controller").is_some());
            }),
        ),
        (
            "podSecurityContext",
            Same,
            Box::new(|| {
                for p in [ref_ctl_pod(), ref_px_pod()] {
                    assert_eq!(p["securityContext"]["runAsUser"], 10001);
                    assert_eq!(p["securityContext"]["runAsGroup"], 10001);
                }
            }),
        ),
        (
            "securityContext",
            Same,
            Box::new(|| {
                for p in [ref_ctl_pod(), ref_px_pod()] {
                    let sc = &p["containers"][0]["securityContext"];
                    assert_eq!(sc["runAsNonRoot"], true);
                    assert_eq!(sc["readOnlyRootFilesystem"], true);
                }
            }),
        ),
    ]
}

fn disruption_and_network_keys() -> Vec<KeyCheck> {
    use Note::*;
    vec![
        (
            "podDisruptionBudget.enabled",
            Renamed("proxy.podDisruptionBudget.enabled"),
            Box::new(|| {
                assert!(obj(ref_on(), "PodDisruptionBudget", "proxy").is_some());
                let off = reference("reference values, PodDisruptionBudget off");
                assert!(obj(off, "PodDisruptionBudget", "proxy").is_none());
            }),
        ),
        (
            "podDisruptionBudget.minAvailable",
            Renamed("proxy.podDisruptionBudget.minAvailable"),
            Box::new(|| {
                let spec = &obj(ref_on(), "PodDisruptionBudget", "proxy").unwrap()["spec"];
                assert_eq!(spec["minAvailable"], "50%");
                assert!(spec["maxUnavailable"].is_null());
            }),
        ),
        (
            "podDisruptionBudget.maxUnavailable",
            Renamed("proxy.podDisruptionBudget.maxUnavailable"),
            Box::new(|| {
                let r = reference("reference values, maxUnavailable");
                let spec = &obj(r, "PodDisruptionBudget", "proxy").unwrap()["spec"];
                assert_eq!(spec["maxUnavailable"], 2);
                assert!(spec["minAvailable"].is_null());
            }),
        ),
        (
            "networkPolicy.enabled",
            Same,
            Box::new(|| assert!(obj(ref_on(), "NetworkPolicy", "proxy").is_some())),
        ),
        (
            "networkPolicy.ingress.from",
            Renamed("networkPolicy.from"),
            Box::new(|| {
                let np = obj(ref_on(), "NetworkPolicy", "proxy").unwrap();
                let from = at(np, "spec.ingress.0.from").as_array().unwrap();
                let theirs = fixture_value("networkPolicy.ingress.from");
                let theirs = theirs.as_array().unwrap();
                assert_eq!(&from[..theirs.len()], &theirs[..], "their peers, verbatim");
                // Then the controller's pods, for its hairpin probe (on by default).
                let [probe] = &from[theirs.len()..] else {
                    panic!("{from:?}")
                };
                let component = &probe["podSelector"]["matchLabels"]["app.kubernetes.io/component"];
                assert_eq!(component, "controller");
            }),
        ),
    ]
}

/// The fixture's keys: every leaf lies under exactly one checked key, every checked key is in it.
fn fixture_keys(v: &Value, prefix: &str, checked: &BTreeSet<&str>, out: &mut Vec<String>) {
    if checked.contains(prefix) {
        out.push(prefix.to_string());
        return;
    }
    match v.as_object() {
        Some(m) if !m.is_empty() => {
            for (k, v) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                fixture_keys(v, &p, checked, out);
            }
        }
        _ => panic!("{FIXTURE}: {prefix} is checked by no entry of key_checks"),
    }
}

/// Names the key whose check failed: the checks' own messages name what they looked at.
struct KeyContext(&'static str);

impl Drop for KeyContext {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("(checking the reference chart's key {})", self.0);
        }
    }
}

/// A values file written for the reference chart installs: with Helm 4 and 3 alike (see
/// helm_3_renders_what_helm_4_renders), valid for Kubernetes (every_render_validates...), with
/// the RBAC the flags need (rbac_of_every_pod...); here, every key has its effect and NOTES
/// names each old key.
#[test]
fn reference_chart_values_install_and_every_key_has_its_effect() {
    let checks = key_checks();
    let keys: BTreeSet<&str> = checks.iter().map(|(k, _, _)| *k).collect();
    assert_eq!(keys.len(), checks.len(), "a key checked twice");
    let fixture: Value =
        yaml_serde::from_str(&std::fs::read_to_string(reference_values()).unwrap()).unwrap();
    let mut found = vec![];
    fixture_keys(&fixture, "", &keys, &mut found);
    let found: BTreeSet<&str> = found.iter().map(String::as_str).collect();
    assert_eq!(found, keys, "{FIXTURE} and key_checks cover the same keys");

    let notes_on = notes(&[&reference_values()], REFERENCE_ON);
    let notes_max = notes(
        &[&reference_values()],
        &[
            "podDisruptionBudget.minAvailable=null",
            "podDisruptionBudget.maxUnavailable=2",
        ],
    );
    let mut renamed = 0;
    for (key, note, check) in &checks {
        let _context = KeyContext(key);
        check();
        // null in the fixture: its line shows where it is set.
        let notes = if *key == "podDisruptionBudget.maxUnavailable" {
            &notes_max
        } else {
            &notes_on
        };
        match note {
            Note::Renamed(new) => {
                let line = format!("`{key}` is deprecated: use `{new}`");
                assert!(notes.contains(&line), "NOTES lacks {line:?}:\n{notes}");
                renamed += 1;
            }
            Note::Ignored => {
                let line = format!("`{key}` is ignored: ");
                assert!(notes.contains(&line), "NOTES lacks {line:?}:\n{notes}");
            }
            Note::Same => {
                assert!(
                    !notes.contains(&format!("`{key}`")),
                    "NOTES names {key}:\n{notes}"
                );
            }
        }
    }
    assert_eq!(
        notes_on.matches(" is deprecated: use ").count(),
        renamed - 1,
        "one line per old key in the values (maxUnavailable is null there):\n{notes_on}"
    );
    assert!(renamed >= 20, "{renamed}");
    // The default values print no such line.
    let plain = notes(&[], &[]);
    assert!(
        !plain.contains("deprecated") && !plain.contains("reference tool's chart"),
        "{plain}"
    );
}

/// The defaults in "ouroboros.aliases" (_helpers.tpl) are values.yaml's, and every old key is
/// in the schema: a new key at its default does not count as set against its old key.
#[test]
fn alias_table_agrees_with_values_and_schema() {
    let helpers = std::fs::read_to_string(chart_dir().join("templates/_helpers.tpl")).unwrap();
    let start = helpers
        .find("{{- define \"ouroboros.aliases\" -}}\n")
        .unwrap();
    let body = &helpers[start..];
    let body = &body[body.find('\n').unwrap() + 1..body.find("{{- end -}}").unwrap()];
    let aliases: Vec<Value> = yaml_serde::from_str(body).unwrap();
    assert!(aliases.len() >= 20, "{body}");
    let values: Value =
        yaml_serde::from_str(&std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap())
            .unwrap();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap(),
    )
    .unwrap();
    let at = |v: &Value, path: &str| path.split('.').fold(v.clone(), |v, k| v[k].clone());
    let in_schema = |path: &str| {
        path.split('.')
            .try_fold(&schema, |s, k| s["properties"].get(k))
            .is_some()
    };
    let mut defaults = vec![];
    for a in &aliases {
        let (old, new) = (a["old"].as_str().unwrap(), a["new"].as_str().unwrap());
        let default = at(&values, new);
        assert!(!default.is_null(), "{new} is not in values.yaml");
        assert_eq!(a["default"], default, "default of {new}");
        assert!(in_schema(old), "{old} is not in values.schema.json");
        assert!(
            at(&values, old).is_null(),
            "{old} must not be in values.yaml"
        );
        defaults.push(format!(
            "json:{new}={}",
            serde_json::to_string(&default).unwrap()
        ));
    }
    // Every new key set to its default does not count as set against the fixture's old keys.
    let sets: Vec<&str> = REFERENCE_ON
        .iter()
        .copied()
        .chain(defaults.iter().map(String::as_str))
        .collect();
    let out = template_files("helm", &[&reference_values()], &sets);
    let out = out.unwrap_or_else(|e| panic!("new keys at their defaults, old keys set: {e}"));
    assert!(docs(&out) == ref_on(), "and the old keys win");
    // The reference chart's target default, whose host counts as unset.
    let host = at(&values, "proxy.target.host");
    assert!(
        helpers.contains(&format!("(ne $t.host {host})")),
        "_helpers.tpl compares proxy.target.host with its default {host}"
    );
    // proxy.yaml compares maxUnavailable with its default.
    let proxy = std::fs::read_to_string(chart_dir().join("templates/proxy.yaml")).unwrap();
    let max = at(&values, "proxy.podDisruptionBudget.maxUnavailable");
    assert!(proxy.contains(&format!("(ne (toJson $pdb.maxUnavailable) \"{max}\")")));
}

/// Each template's copy of .Values gets the old keys mapped before anything reads it.
#[test]
fn every_template_maps_the_reference_keys_first() {
    let mut n = 0;
    for e in std::fs::read_dir(chart_dir().join("templates")).unwrap() {
        let path = e.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        if file.starts_with('_') {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut rest = text.trim_start();
        // Leading template comments.
        while let Some(r) = rest.strip_prefix("{{- /*") {
            rest = r[r.find("*/}}").unwrap() + 4..].trim_start();
        }
        assert!(
            rest.starts_with("{{- include \"ouroboros.compat\" . "),
            "templates/{file} must begin with {{{{- include \"ouroboros.compat\" . }}}}"
        );
        n += 1;
    }
    assert!(n >= 10, "{n}");
}

#[test]
fn etc_hosts_alone_replaces_the_controller_unless_a_mode_is_set() {
    let alone = rendered(&["etcHosts.enabled=true"]);
    assert!(find(alone, "DaemonSet", "ouroboros-etc-hosts").is_some());
    assert!(find(alone, "Deployment", "ouroboros-controller").is_none());
    assert!(find(alone, "Job", "ouroboros-cleanup").is_none());
    for o in alone {
        assert_ne!(
            o["metadata"]["namespace"],
            "kube-system",
            "{} {}",
            kind(o),
            name(o)
        );
    }
    let text = notes(&[], &["etcHosts.enabled=true"]);
    assert!(
        text.contains("instead of the controller Deployment"),
        "{text}"
    );

    for mode in ["coredns", "coredns-import", "external-dns"] {
        let both = rendered(&["etcHosts.enabled=true", &format!("controller.mode={mode}")]);
        assert!(
            find(both, "DaemonSet", "ouroboros-etc-hosts").is_some(),
            "{mode}"
        );
        let args = controller_args(both);
        assert!(args.contains(&format!("--mode={mode}")), "{mode}: {args:?}");
    }
    let text = notes(&[], &["etcHosts.enabled=true", "controller.mode=coredns"]);
    assert!(
        text.contains("runs alongside it because controller.mode is set"),
        "{text}"
    );
    // Without etcHosts, an empty mode is coredns.
    let defaults = defaults();
    let args = controller_args(defaults);
    assert!(args.contains(&"--mode=coredns".to_string()), "{args:?}");
}

/// Values that conflict or cannot work: each refused with a message of a template.
const CONFLICTS: &[(&[&str], Refusal)] = &[
    (
        &["controller.replicas=2", "controller.leaderElect=false"],
        Message(&["leaderElect"]),
    ),
    (
        &["proxy.target.serviceName=traefik"],
        Message(&["serviceNamespace"]),
    ),
    (
        &[
            "controller.mode=coredns-import",
            "controller.corednsAnswer=view",
        ],
        Message(&["controller.mode=coredns"]),
    ),
    // An old key of the reference chart and its new key set to different values.
    (
        &["controller.replicaCount=3", "controller.replicas=2"],
        Message(&["controller.replicaCount", "controller.replicas"]),
    ),
    (
        &[
            "etcHosts.enabled=true",
            "etcHosts.proxyIP=10.0.0.1",
            "etcHosts.proxyIps={10.0.0.2}",
        ],
        Message(&["etcHosts.proxyIP", "etcHosts.proxyIps"]),
    ),
    (
        &[
            "externalDns.output=crd",
            "controller.externalDns.output=service",
        ],
        Message(&["externalDns.output", "controller.externalDns.output"]),
    ),
    (
        &["proxy.shutdownGrace=45s", "proxy.shutdownGraceSeconds=20"],
        Message(&["proxy.shutdownGrace", "proxy.shutdownGraceSeconds"]),
    ),
    (
        &["controller.logLevel=debug", "logLevel=warn"],
        Message(&["controller.logLevel", "logLevel"]),
    ),
    (
        &[
            "proxy.podDisruptionBudget.minAvailable=1",
            "proxy.podDisruptionBudget.maxUnavailable=2",
        ],
        Message(&["minAvailable", "maxUnavailable"]),
    ),
    // No proxy, and no address for the names.
    (
        &["proxy.enabled=false"],
        Message(&["proxy.enabled=false", "controller.proxyIps"]),
    ),
    (
        &[
            "proxy.enabled=false",
            "controller.mode=external-dns",
            "etcHosts.enabled=true",
        ],
        Message(&["controller.externalDns.proxyIps", "etcHosts.proxyIps"]),
    ),
    (&["proxy.target.host="], Message(&["proxy.target.host"])),
    // Reported at the values check, which Helm renders first, not at some other template.
    (
        &["image.repository=ghcr.io/lexfrei/ouroboros"],
        Message(&[
            "templates/values-check.yaml",
            "image.repository",
            "reference",
        ]),
    ),
    // Each half of a target Service names the other half, not the host already set.
    (
        &["proxy.target.serviceName=traefik"],
        Message(&["proxy.target.serviceName needs proxy.target.serviceNamespace"]),
    ),
    (
        &["proxy.target.serviceNamespace=traefik"],
        Message(&["proxy.target.serviceNamespace needs proxy.target.serviceName"]),
    ),
    // Entries of proxies (with a target and the Gateway API on, unless said).
    (
        &[
            GATEWAY_API,
            ENTRY_HOST,
            "proxies[0].name=default",
            "proxies[0].ingressClasses={traefik}",
        ],
        Message(&["proxies[0].name is default", "the main proxy"]),
    ),
    (
        &[
            GATEWAY_API,
            ENTRY_HOST,
            "proxies[0].name=traefik",
            "proxies[0].ingressClasses={traefik}",
            "proxies[1].name=traefik",
            "proxies[1].target.host=traefik-internal.traefik",
            "proxies[1].ingressClasses={traefik-internal}",
        ],
        Message(&["proxies[1].name traefik", "proxies[0]", "a name of its own"]),
    ),
    (
        &[GATEWAY_API, ENTRY_HOST, "proxies[0].name=traefik"],
        Message(&["proxies[0] (traefik) takes no hostnames", "ingressClasses"]),
    ),
    (
        // 48 characters: a valid label, but ouroboros-proxy-<name> is 64.
        &[
            GATEWAY_API,
            ENTRY_HOST,
            "proxies[0].name=traefik-public-internet-facing-load-balancer-one",
            "proxies[0].ingressClasses={traefik}",
        ],
        Message(&["too long", "63", "at most 47 characters"]),
    ),
    (
        // Without the Gateway API.
        &[
            ENTRY_HOST,
            "proxies[0].name=traefik",
            "proxies[0].gatewayClasses={traefik}",
        ],
        Message(&["proxies[0] (traefik)", "controller.gatewayApi"]),
    ),
    (
        &[
            GATEWAY_API,
            ENTRY_HOST,
            "proxies[0].name=traefik",
            "proxies[0].ingressClasses={traefik}",
            "proxies[1].name=other",
            "proxies[1].target.host=other.example",
            "proxies[1].ingressClasses={traefik}",
        ],
        Message(&[
            "proxies[0] (traefik) and proxies[1] (other)",
            "ingress-class=traefik",
        ]),
    ),
    (
        &[
            "proxies[0].name=traefik",
            "proxies[0].target.serviceName=traefik",
            "proxies[0].ingressClasses={traefik}",
        ],
        Message(&["proxies[0].target.serviceNamespace"]),
    ),
];
const GATEWAY_API: &str = "controller.gatewayApi=true";
const ENTRY_HOST: &str = "proxies[0].target.host=traefik.traefik";

#[test]
fn conflicting_or_unusable_values_fail_with_a_message() {
    for (sets, refusal) in CONFLICTS {
        assert_refused(sets, refusal);
    }
    // The old key alone, or both set to the same value, render.
    for sets in [
        &["controller.replicaCount=3"][..],
        &["controller.replicaCount=3", "controller.replicas=3"],
        &[
            "externalDns.output=crd",
            "controller.externalDns.output=dnsendpoint",
        ],
        &[
            "controller.clusterDomain=cozy.local.",
            "clusterDomain=cozy.local",
        ],
    ] {
        rendered(sets);
    }
    let objs = rendered(&["controller.replicaCount=3"]);
    assert_eq!(
        find(objs, "Deployment", "ouroboros-controller").unwrap()["spec"]["replicas"],
        3
    );
}
