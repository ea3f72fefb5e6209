//! PURE: the objects `doctor client-ip` creates, as the JSON the API server is sent. Every one is
//! labelled with [`MANAGED_BY`] and its run's [`RUN_LABEL`], so what a run left (an API server
//! gone mid-cleanup) is found with one selector; names are DNS-1035 labels (what a Service name
//! must be), which every kind accepts.

use serde_json::{json, Value};

/// `app.kubernetes.io/managed-by` of every object created.
pub const MANAGED_BY: &str = "ouroboros-doctor";
/// The label holding the run id.
pub const RUN_LABEL: &str = "ouroboros.io/client-ip-run";
/// The whoami container's port.
const WHOAMI_PORT: u16 = 8080;

/// One run's identity: its id (8 lowercase hex digits) and where its objects live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub id: String,
    pub namespace: String,
    pub image: String,
}

impl Run {
    /// The backend Pod's, Service's and Ingress's name.
    pub fn name(&self) -> String {
        format!("ouroboros-client-ip-{}", self.id)
    }

    /// The caller Pod's name.
    pub fn caller(&self) -> String {
        format!("{}-caller", self.name())
    }

    /// The label selector of every object of this run.
    pub fn selector(&self) -> String {
        format!(
            "app.kubernetes.io/managed-by={MANAGED_BY},{RUN_LABEL}={}",
            self.id
        )
    }

    fn labels(&self, component: &str) -> Value {
        json!({
            "app.kubernetes.io/name": "ouroboros-client-ip",
            "app.kubernetes.io/component": component,
            "app.kubernetes.io/managed-by": MANAGED_BY,
            RUN_LABEL: self.id,
        })
    }

    fn metadata(&self, name: &str, component: &str) -> Value {
        json!({"name": name, "namespace": self.namespace, "labels": self.labels(component)})
    }

    /// A container of our image running `args`, hardened as Pod Security's `restricted`
    /// profile asks (a namespace enforcing it refuses anything less).
    fn container(&self, name: &str, args: &[&str]) -> Value {
        json!({
            "name": name,
            "image": self.image,
            "args": args,
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"]},
            },
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        })
    }

    fn pod(&self, name: &str, component: &str, container: Value, extra: Value) -> Value {
        let mut spec = json!({
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container],
        });
        if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
            spec.extend(extra);
        }
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": self.metadata(name, component),
            "spec": spec,
        })
    }

    /// The backend: our `whoami`, ready once it answers HTTP.
    pub fn backend_pod(&self) -> Value {
        let mut c = self.container("whoami", &["whoami"]);
        c["ports"] = json!([{"name": "http", "containerPort": WHOAMI_PORT, "protocol": "TCP"}]);
        c["readinessProbe"] = json!({"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 2});
        self.pod(&self.name(), "backend", c, json!({}))
    }

    /// The backend's ClusterIP Service, port 80.
    pub fn service(&self) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.metadata(&self.name(), "backend"),
            "spec": {
                "type": "ClusterIP",
                "selector": {RUN_LABEL: self.id, "app.kubernetes.io/component": "backend"},
                "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
            },
        })
    }

    /// The Ingress routing `host` to the backend, of `class` (the cluster's default
    /// IngressClass when `None`).
    pub fn ingress(&self, host: &str, class: Option<&str>) -> Value {
        let mut spec = json!({
            "rules": [{
                "host": host,
                "http": {"paths": [{
                    "path": "/",
                    "pathType": "Prefix",
                    "backend": {"service": {"name": self.name(), "port": {"number": 80}}},
                }]},
            }],
        });
        if let Some(class) = class {
            spec["ingressClassName"] = json!(class);
        }
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": self.metadata(&self.name(), "backend"),
            "spec": spec,
        })
    }

    /// The caller: asks `host` over HTTP once, through the cluster's DNS, and prints what the
    /// backend reported. It never restarts, and the kubelet stops it after `deadline_secs`
    /// even if this run could not delete it.
    pub fn caller_pod(&self, host: &str, deadline_secs: u64) -> Value {
        let timeout = format!("{deadline_secs}s");
        let args = [
            "doctor",
            "client-ip",
            "--call",
            host,
            "--timeout",
            timeout.as_str(),
        ];
        let c = self.container("caller", &args);
        let extra = json!({
            "restartPolicy": "Never",
            // The kubelet's own bound, past the call's (which ends the container first).
            "activeDeadlineSeconds": deadline_secs + 30,
        });
        self.pod(&self.caller(), "caller", c, extra)
    }
}

/// A run id: 8 lowercase hex digits from `seed` (time and process id), so two runs at once
/// do not share names.
pub fn run_id(seed: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(seed.as_bytes());
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns_name::{is_dns1035_label, is_subdomain};

    fn run() -> Run {
        Run {
            id: "0a1b2c3d".into(),
            namespace: "default".into(),
            image: "ghcr.io/ouroboros-hairpin/ouroboros:0.1.0".into(),
        }
    }

    #[test]
    fn names_are_what_every_kind_accepts() {
        let r = run();
        for name in [r.name(), r.caller()] {
            assert!(is_dns1035_label(&name), "{name}");
        }
        assert_eq!(r.caller(), "ouroboros-client-ip-0a1b2c3d-caller");
        let id = run_id("1700000000.123 4242");
        assert_eq!(id.len(), 8);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(id, run_id("1700000000.124 4242"));
    }

    #[test]
    fn every_object_carries_the_run_labels() {
        let r = run();
        for (o, component) in [
            (r.backend_pod(), "backend"),
            (r.service(), "backend"),
            (r.ingress("check.example.com", Some("nginx")), "backend"),
            (r.caller_pod("check.example.com", 60), "caller"),
        ] {
            let l = &o["metadata"]["labels"];
            assert_eq!(l["app.kubernetes.io/managed-by"], MANAGED_BY, "{o}");
            assert_eq!(l[RUN_LABEL], "0a1b2c3d", "{o}");
            assert_eq!(l["app.kubernetes.io/component"], component, "{o}");
            assert_eq!(o["metadata"]["namespace"], "default");
            // Label values are at most 63 characters of the label alphabet.
            for v in l.as_object().unwrap().values() {
                assert!(crate::dns_name::is_label(v.as_str().unwrap()), "{v}");
            }
            for k in l.as_object().unwrap().keys() {
                let (prefix, name) = k.split_once('/').unwrap();
                assert!(
                    is_subdomain(prefix) && crate::dns_name::is_label(name),
                    "{k}"
                );
            }
        }
        assert_eq!(
            r.selector(),
            "app.kubernetes.io/managed-by=ouroboros-doctor,ouroboros.io/client-ip-run=0a1b2c3d"
        );
    }

    #[test]
    fn the_service_selects_the_backend_only() {
        let r = run();
        let sel = r.service()["spec"]["selector"].clone();
        let backend = r.backend_pod()["metadata"]["labels"].clone();
        let caller = r.caller_pod("h", 1)["metadata"]["labels"].clone();
        let selects = |labels: &Value| {
            sel.as_object()
                .unwrap()
                .iter()
                .all(|(k, v)| &labels[k] == v)
        };
        assert!(selects(&backend));
        assert!(!selects(&caller));
        // The Service's named target port is the backend container's.
        assert_eq!(
            r.backend_pod()["spec"]["containers"][0]["ports"][0]["name"],
            r.service()["spec"]["ports"][0]["targetPort"]
        );
    }

    #[test]
    fn ingress_class_is_set_only_when_given() {
        let r = run();
        for (class, want) in [(Some("nginx"), json!("nginx")), (None, Value::Null)] {
            let i = r.ingress("check.example.com", class);
            assert_eq!(i["spec"]["ingressClassName"], want);
            let rule = &i["spec"]["rules"][0];
            assert_eq!(rule["host"], "check.example.com");
            assert_eq!(
                rule["http"]["paths"][0]["backend"]["service"]["name"],
                r.name()
            );
        }
    }

    #[test]
    fn the_caller_runs_once_and_calls_the_host() {
        let p = run().caller_pod("check.example.com", 90);
        assert_eq!(p["spec"]["restartPolicy"], "Never");
        assert_eq!(p["spec"]["activeDeadlineSeconds"], 120);
        assert_eq!(
            p["spec"]["containers"][0]["args"],
            json!([
                "doctor",
                "client-ip",
                "--call",
                "check.example.com",
                "--timeout",
                "90s"
            ])
        );
        // Pod Security `restricted`.
        let c = &p["spec"]["containers"][0]["securityContext"];
        assert_eq!(c["allowPrivilegeEscalation"], false);
        assert_eq!(c["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(p["spec"]["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            p["spec"]["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
    }
}
