//! What the controller reads of the CoreDNS Deployment (coredns mode): its version, from which
//! `--coredns-answer auto` picks the form (`dns::answer_form::pick`; `--coredns-version`
//! instead when given), and its container's memory limit, which no Corefile is written under
//! whose reload is predicted to exceed it (`dns::reload_memory`, checked by the writer). Both
//! are read before the first write, so the block is written in its form from the start, and
//! again every [`REREAD`]: a changed form (CoreDNS upgraded or downgraded) or limit makes the
//! engine write again, one write of the ConfigMap with the whole block in its new form.
//!
//! API call (coredns mode): `get` on the Deployment [`COREDNS_DEPLOYMENT`] in
//! --coredns-namespace (RBAC by resourceName).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;
use crate::dns::answer_form::{coredns_image, known_from_images, pick, Known, Picked};
use crate::dns::answer_form::{AnswerForm, COREDNS_DEPLOYMENT};
use crate::dns::mode::coredns::reads_coredns_version;
use crate::dns::mode::DnsArgs;
use crate::dns::reload_memory::parse_quantity;
use crate::dns::write::form::{CurrentForm, MemoryLimit};
use crate::dns::Mode;
use crate::kube_client::{describe, Cause};

/// How often the CoreDNS Deployment is read again. A `get` of one object: cheap. After a
/// downgrade below 1.10, CoreDNS pods that start before the next read reject the view form
/// and are not ready; the rolling update keeps the old pods serving until the pair is written.
pub const REREAD: Duration = Duration::from_secs(30);

/// What the flags give without reading anything: the pick from `--coredns-version`, or from
/// nothing (`auto` then answers as the pair until the Deployment is read).
pub fn from_flags(dns: &DnsArgs, unread: &str) -> Picked {
    let known = match dns.shared.coredns_version {
        Some(v) => Known::Flag(v),
        None => Known::Unknown(unread.to_string()),
    };
    pick(
        dns.shared.coredns_answer,
        &known,
        dns.shared.mode == Mode::CorednsImport,
    )
}

/// What one read of the Deployment gave: CoreDNS's version (or why it is unknown) and its
/// container's memory limit in bytes.
struct Read {
    known: Known,
    limit: Option<u64>,
}

/// Reads the Deployment. `Err` when it could not be read at all (the API failed); a Deployment
/// that is not there is an unknown version and no limit.
async fn read(api: &Api<Deployment>, namespace: &str) -> Result<Read, String> {
    let object = format!("Deployment {namespace}/{COREDNS_DEPLOYMENT}");
    let d = match api.get_opt(COREDNS_DEPLOYMENT).await {
        Ok(Some(d)) => d,
        Ok(None) => {
            return Ok(Read {
                known: Known::Unknown(format!(
                    "there is no {object} (RKE2 names its CoreDNS Deployment \
                     rke2-coredns-rke2-coredns)"
                )),
                limit: None,
            })
        }
        Err(e) => {
            let hint = match Cause::of(&e) {
                Cause::Forbidden => " (the controller's Role lacks `get` on it)",
                _ => "",
            };
            return Err(format!("reading {object} failed{hint}: {}", describe(&e)));
        }
    };
    let containers = d
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers)
        .unwrap_or_default();
    let images: Vec<&str> = containers
        .iter()
        .filter_map(|c| c.image.as_deref())
        .collect();
    let known = known_from_images(&object, &images);
    // The limit of the container running the CoreDNS image.
    let coredns = coredns_image(images.iter().copied());
    let limit = containers
        .iter()
        .find(|c| c.image.as_deref().is_some_and(|i| Some(i) == coredns))
        .and_then(|c| c.resources.as_ref()?.limits.as_ref()?.get("memory"))
        .and_then(|q| parse_quantity(&q.0));
    Ok(Read { known, limit })
}

/// Logs a pick and sets its metric. A pick on an unknown version is the one warning.
fn report(picked: &Picked, metrics: &Metrics) {
    metrics.coredns_answer(picked);
    let (form, basis) = (picked.form.as_str(), picked.basis.as_str());
    if picked.warns() {
        tracing::warn!(form, basis, "{}", picked.reason);
    } else {
        tracing::info!(form, basis, "CoreDNS answer form {form}: {}", picked.reason);
    }
}

/// Logs a memory limit read (and changed).
fn report_limit(limit: Option<u64>) {
    match limit {
        Some(l) => tracing::info!(
            limit_mib = l >> 20,
            "CoreDNS's memory limit: no Corefile whose reload is predicted to exceed it is written"
        ),
        None => tracing::info!("CoreDNS has no memory limit (or none was read): no reload guard"),
    }
}

/// Makes the first pick and reads the memory limit (reading the Deployment once, in coredns
/// mode) and starts the task that reads it again every [`REREAD`] and bumps `forced` when the
/// form or the limit changes. The writers read `form` and `limit`.
pub async fn start(
    client: &Client,
    dns: &DnsArgs,
    (form, limit): (&CurrentForm, &MemoryLimit),
    metrics: &Metrics,
    (forced, stop): (&watch::Sender<u64>, &CancellationToken),
) -> Option<JoinHandle<()>> {
    if !dns.shared.mode.spec().edits_coredns() {
        return None;
    }
    if dns.shared.mode != Mode::Coredns {
        let picked = from_flags(dns, "not read");
        form.set(picked.clone());
        report(&picked, metrics);
        return None;
    }
    let namespace = dns.coredns.coredns_namespace.clone();
    let api = Api::<Deployment>::namespaced(client.clone(), &namespace);
    let first = read(&api, &namespace).await;
    let picked = match (&first, reads_coredns_version(dns)) {
        (Ok(r), true) => pick(AnswerForm::Auto, &r.known, false),
        (Err(why), true) => pick(AnswerForm::Auto, &Known::Unknown(why.clone()), false),
        (_, false) => from_flags(dns, "not read"),
    };
    form.set(picked.clone());
    report(&picked, metrics);
    match &first {
        Ok(r) => {
            limit.set(r.limit);
            report_limit(r.limit);
        }
        Err(why) => tracing::warn!("{why}: CoreDNS's memory limit is unknown, no reload guard"),
    }
    let (form, limit) = (form.clone(), limit.clone());
    let (metrics, forced, stop) = (metrics.clone(), forced.clone(), stop.clone());
    let auto = reads_coredns_version(dns);
    Some(tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(REREAD) => {}
            }
            let read = match read(&api, &namespace).await {
                Ok(read) => read,
                Err(why) => {
                    tracing::debug!("{why}; CoreDNS answer form and memory limit kept");
                    continue;
                }
            };
            let mut changed = false;
            if limit.set(read.limit) {
                report_limit(read.limit);
                changed = true;
            }
            // Only a version read changes the pick: a Deployment gone or an image without a
            // version tag keeps the form written, rather than write the pair on a passing
            // change and the view form again a moment later.
            if auto && matches!(read.known, Known::Image { .. }) {
                let picked = pick(AnswerForm::Auto, &read.known, false);
                let basis_changed = form.get().basis != picked.basis;
                if form.set(picked.clone()) {
                    report(&picked, &metrics);
                    tracing::info!(
                        "the CoreDNS answer form changed; rewriting the block in one write"
                    );
                    changed = true;
                } else if basis_changed {
                    report(&picked, &metrics);
                }
            }
            if changed {
                forced.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_alone_pick_where_they_can() {
        let dns = |argv: &[&str]| -> DnsArgs { crate::flags::parse_args(argv).unwrap() };
        let p = from_flags(&dns(&["--coredns-version", "1.11.3"]), "x");
        assert_eq!(p.form, AnswerForm::View, "{p}");
        let p = from_flags(&dns(&["--coredns-version", "1.9.3"]), "x");
        assert_eq!(p.form, AnswerForm::Template, "{p}");
        let p = from_flags(
            &dns(&["--mode", "coredns-import", "--coredns-version", "1.12.0"]),
            "x",
        );
        assert_eq!(p.form, AnswerForm::Template, "the snippet: {p}");
        let p = from_flags(&dns(&[]), "not read");
        assert!(p.warns() && p.reason.contains("(not read)"), "{p}");
        let p = from_flags(&dns(&["--coredns-answer", "view"]), "x");
        assert_eq!(p.form, AnswerForm::View, "{p}");
        assert!(reads_coredns_version(&dns(&[])));
        assert!(!reads_coredns_version(&dns(&[
            "--coredns-version",
            "1.11.3"
        ])));
        assert!(!reads_coredns_version(&dns(&[
            "--coredns-answer",
            "template"
        ])));
        assert!(!reads_coredns_version(&dns(&["--mode", "coredns-import"])));
    }
}
