//! Ingress classes: an Ingress's own (`spec.ingressClassName`), else the legacy annotation, else
//! the cluster's single default IngressClass. Separate: the class rules are Kubernetes's, and
//! `--ingress-class` is only one of their users.

use std::collections::BTreeSet;

use k8s_openapi::api::networking::v1::{Ingress, IngressClass};

use super::{deleting, non_empty};

/// Legacy class annotation, still honoured by ingress controllers when `spec.ingressClassName`
/// is unset.
pub const INGRESS_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";
/// Marks the IngressClass that classless Ingresses belong to.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

/// The IngressClass that classless Ingresses belong to: the one annotated as default, if exactly
/// one (several defaults are ambiguous, so none is assumed).
pub fn default_ingress_class<'a>(classes: &[&'a IngressClass]) -> Option<&'a str> {
    let defaults: BTreeSet<&str> = classes
        .iter()
        .filter(|c| !deleting(&c.metadata))
        .filter(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .is_some_and(|v| v == "true")
        })
        .filter_map(|c| non_empty(c.metadata.name.as_deref()))
        .collect();
    match defaults.len() {
        1 => defaults.into_iter().next(),
        _ => None,
    }
}

/// The `spec.controller` of the IngressClass named `class` (`None`: no such IngressClass, or
/// no controller named): which ingress controller serves the class, whatever it is called.
pub fn class_controller<'a>(classes: &[&'a IngressClass], class: &str) -> Option<&'a str> {
    classes
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(class))
        .and_then(|c| non_empty(c.spec.as_ref()?.controller.as_deref()))
}

/// An Ingress's class: `spec.ingressClassName`, else the legacy annotation, else the default class.
pub fn ingress_class<'a>(ingress: &'a Ingress, default_class: Option<&'a str>) -> Option<&'a str> {
    non_empty(
        ingress
            .spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.as_deref()),
    )
    .or_else(|| {
        non_empty(
            ingress
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(INGRESS_CLASS_ANNOTATION))
                .map(String::as_str),
        )
    })
    .or(default_class)
}
