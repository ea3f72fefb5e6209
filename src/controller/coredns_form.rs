//! The CoreDNS answer form the controller writes in: `--coredns-answer` as given, and for
//! `auto` the pick from CoreDNS's version (`dns::answer_form::pick`), read from
//! `--coredns-version` or from the image tag of the CoreDNS Deployment. The first pick is made
//! before the first write, so the block is written in its form from the start; the Deployment
//! is read again every [`REREAD`], and a changed form (CoreDNS upgraded or downgraded) makes
//! the engine write again: one write of the ConfigMap with the whole block in its new form.
//!
//! API call (coredns mode, `auto`, no `--coredns-version`): `get` on the Deployment
//! [`COREDNS_DEPLOYMENT`] in --coredns-namespace (RBAC by resourceName).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;
use crate::dns::answer_form::{known_from_images, pick, Known, Picked};
use crate::dns::answer_form::{AnswerForm, COREDNS_DEPLOYMENT};
use crate::dns::mode::coredns::reads_coredns_version;
use crate::dns::mode::DnsArgs;
use crate::dns::write::form::CurrentForm;
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

/// The CoreDNS version from the Deployment's image, or why it is unknown. `Err` when the
/// Deployment could not be read at all (the API failed), `Ok(Known::Unknown)` when it was read
/// and says no version.
async fn read(api: &Api<Deployment>, namespace: &str) -> Result<Known, String> {
    let object = format!("Deployment {namespace}/{COREDNS_DEPLOYMENT}");
    let d = match api.get_opt(COREDNS_DEPLOYMENT).await {
        Ok(Some(d)) => d,
        Ok(None) => {
            return Ok(Known::Unknown(format!(
                "there is no {object} (RKE2 names its CoreDNS Deployment \
                 rke2-coredns-rke2-coredns)"
            )))
        }
        Err(e) => {
            let hint = match Cause::of(&e) {
                Cause::Forbidden => " (the controller's Role lacks `get` on it)",
                _ => "",
            };
            return Err(format!("reading {object} failed{hint}: {}", describe(&e)));
        }
    };
    let images: Vec<String> = d
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers.into_iter().filter_map(|c| c.image).collect())
        .unwrap_or_default();
    let images: Vec<&str> = images.iter().map(String::as_str).collect();
    Ok(known_from_images(&object, &images))
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

/// Makes the first pick (reading the Deployment once when `auto` needs it) and, when it reads
/// the Deployment, starts the task that reads it again every [`REREAD`] and bumps `forced` when
/// the form changes. The form the writers read is `form`.
pub async fn start(
    client: &Client,
    dns: &DnsArgs,
    form: &CurrentForm,
    metrics: &Metrics,
    (forced, stop): (&watch::Sender<u64>, &CancellationToken),
) -> Option<JoinHandle<()>> {
    let edits = dns.shared.mode.spec().edits_coredns();
    if !edits {
        return None;
    }
    if !reads_coredns_version(dns) {
        let picked = from_flags(dns, "not read");
        form.set(picked.clone());
        report(&picked, metrics);
        return None;
    }
    let namespace = dns.coredns.coredns_namespace.clone();
    let api = Api::<Deployment>::namespaced(client.clone(), &namespace);
    let first = match read(&api, &namespace).await {
        Ok(known) => known,
        Err(why) => Known::Unknown(why),
    };
    let picked = pick(AnswerForm::Auto, &first, false);
    form.set(picked.clone());
    report(&picked, metrics);
    let (form, metrics, forced, stop) =
        (form.clone(), metrics.clone(), forced.clone(), stop.clone());
    Some(tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(REREAD) => {}
            }
            // Only a version read changes the pick: a failed read, a Deployment gone or an
            // image without a version tag keeps the form written, rather than write the pair
            // on a passing API error and the view form again a moment later.
            let known = match read(&api, &namespace).await {
                Ok(known @ Known::Image { .. }) => known,
                Ok(other) => {
                    tracing::debug!(?other, "CoreDNS's version unknown on a re-read; form kept");
                    continue;
                }
                Err(why) => {
                    tracing::debug!("{why}; CoreDNS answer form kept");
                    continue;
                }
            };
            let picked = pick(AnswerForm::Auto, &known, false);
            let basis_changed = form.get().basis != picked.basis;
            if form.set(picked.clone()) {
                report(&picked, &metrics);
                tracing::info!("the CoreDNS answer form changed; rewriting the block in one write");
                forced.send_modify(|n| *n = n.wrapping_add(1));
            } else if basis_changed {
                report(&picked, &metrics);
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
