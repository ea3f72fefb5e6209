//! What a CoreDNS reload of our block may cost in memory, and whether that fits the CoreDNS
//! container's memory limit. During a reload CoreDNS holds the old and the new configuration at
//! once, so its peak RSS grows with the block: the template pair's patterns are compiled again
//! (about 0.19 MiB a KiB of Corefile), the view form's sets are cheap (about 0.03 MiB a KiB).
//! Past the limit, the kernel kills CoreDNS, and with it the cluster's DNS.
//!
//! The model is an envelope over bench/coredns/reload.sh (CoreDNS 1.15.0 and 1.11.3, 1,000 to
//! 30,000 varied names, two runs; the table is in bench/coredns/README.md): a base of
//! [`BASE_MIB`], the peak RSS of a CoreDNS under query load with kubeadm's Corefile and no
//! block (bench/coredns, 49-52 MiB), plus the block's slope per KiB of Corefile, which lies on or
//! above every measured reload; then [`MARGIN_PERCENT`] for what a live CoreDNS holds beyond the
//! bench (a warm cache of another size, traffic). The block is refused when that exceeds the
//! limit.

use std::fmt;

use super::answer_form::AnswerForm;

const MIB: u64 = 1 << 20;

/// The peak RSS of a loaded CoreDNS without our block (bench/coredns: 49-52 MiB).
pub const BASE_MIB: u64 = 52;

/// Headroom over the prediction, in percent of it.
pub const MARGIN_PERCENT: u64 = 20;

/// MiB of reload peak per KiB of Corefile, in thousandths: the template pair's (and rewrite's,
/// whose regex lines are compiled the same way) and the view form's.
const TEMPLATE_MILLI_MIB_PER_KIB: u64 = 190;
const VIEW_MILLI_MIB_PER_KIB: u64 = 32;

/// The predicted peak RSS of a CoreDNS reloading a Corefile of `bytes` holding our block in
/// `form` (`auto` not yet picked counts as the pair), margin not included.
pub fn predicted_peak(form: AnswerForm, bytes: usize) -> u64 {
    let slope = match form {
        AnswerForm::View => VIEW_MILLI_MIB_PER_KIB,
        AnswerForm::Auto | AnswerForm::Template | AnswerForm::Rewrite => TEMPLATE_MILLI_MIB_PER_KIB,
    };
    BASE_MIB * MIB + (bytes as u64 * slope * MIB) / (1024 * 1000)
}

/// The prediction with the margin: what must fit under the limit.
pub fn with_margin(peak: u64) -> u64 {
    peak + peak * MARGIN_PERCENT / 100
}

/// A block whose reload would not fit the memory limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TooLarge {
    pub form: AnswerForm,
    pub bytes: usize,
    /// The predicted peak, margin included.
    pub needs: u64,
    pub limit: u64,
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a reload of the {}-byte Corefile with our {} block is predicted to peak at {} MiB \
             (with a {MARGIN_PERCENT}% margin), over CoreDNS's memory limit of {} MiB",
            self.bytes,
            self.form.as_str(),
            self.needs.div_ceil(MIB),
            self.limit / MIB
        )
    }
}

/// Whether a reload of a Corefile of `bytes` with our block in `form` fits `limit` (bytes;
/// `None`: no limit, always fits).
pub fn fits(form: AnswerForm, bytes: usize, limit: Option<u64>) -> Result<(), TooLarge> {
    let Some(limit) = limit else { return Ok(()) };
    let needs = with_margin(predicted_peak(form, bytes));
    if needs <= limit {
        return Ok(());
    }
    Err(TooLarge {
        form,
        bytes,
        needs,
        limit,
    })
}

/// A Kubernetes memory quantity in bytes (`170Mi`, `1Gi`, `200M`, `512k`, `1e9`, `1000`); None
/// for what is not one (or a fraction of a byte).
pub fn parse_quantity(q: &str) -> Option<u64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor: f64 = match suffix {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    let bytes = number * factor;
    (bytes.is_finite() && bytes >= 0.0 && bytes.fract() == 0.0 && bytes < u64::MAX as f64)
        .then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reload peaks bench/coredns/reload.sh measured (MiB, the higher of its two runs), with
    /// the Corefile's bytes: the model lies above each, with the peak of a CoreDNS under load
    /// in its base, and the margin covers the peaks bench/coredns/run.sh measured under query
    /// load with a warm cache (1.15.0: 63 and 286 MiB for the pair, 57 and 83 for the view form,
    /// at 1,000 and 30,000 names).
    #[test]
    fn the_model_lies_above_every_measured_reload() {
        use AnswerForm::{Template, View};
        let measured: &[(&str, AnswerForm, usize, u64)] = &[
            ("1.15.0", Template, 45_038, 48),
            ("1.11.3", Template, 45_038, 45),
            ("1.15.0", Template, 203_968, 78),
            ("1.11.3", Template, 203_968, 68),
            ("1.15.0", Template, 382_362, 97),
            ("1.11.3", Template, 382_362, 100),
            ("1.15.0", Template, 750_544, 173),
            ("1.11.3", Template, 750_544, 163),
            ("1.15.0", Template, 1_084_808, 235),
            ("1.11.3", Template, 1_084_808, 241),
            ("1.15.0", View, 26_380, 40),
            ("1.11.3", View, 26_380, 37),
            ("1.15.0", View, 124_705, 42),
            ("1.11.3", View, 124_705, 41),
            ("1.15.0", View, 249_280, 46),
            ("1.11.3", View, 249_280, 46),
            ("1.15.0", View, 496_830, 51),
            ("1.11.3", View, 496_830, 54),
            ("1.15.0", View, 741_109, 61),
            ("1.11.3", View, 741_109, 62),
        ];
        for &(version, form, bytes, mib) in measured {
            let p = predicted_peak(form, bytes);
            assert!(
                p >= mib * MIB,
                "{version} {form:?} {bytes}: {} < {mib} MiB",
                p / MIB
            );
            // Not so far above that the guard refuses what fits: within 30 MiB of a measurement.
            assert!(
                p <= (mib + 30) * MIB,
                "{version} {form:?} {bytes}: {} MiB",
                p / MIB
            );
        }
        for (form, bytes, loaded) in [
            (Template, 45_038, 63),
            (Template, 1_084_808, 286),
            (View, 26_380, 57),
            (View, 741_109, 83),
        ] {
            let m = with_margin(predicted_peak(form, bytes));
            assert!(
                m >= loaded * MIB,
                "{form:?} {bytes}: {} < {loaded} MiB",
                m / MIB
            );
        }
    }

    /// Against kubeadm's limit of 170 MiB: the pair fits up to about 470 KiB of Corefile (some
    /// 12,000 varied names), the view form up to the ConfigMap's 1 MiB and beyond.
    #[test]
    fn what_fits_kubeadms_170_mib() {
        let kubeadm = Some(170 * MIB);
        for (form, bytes, ok) in [
            (AnswerForm::Template, 45_038, true),
            (AnswerForm::Template, 382_362, true),
            (AnswerForm::Template, 470_000, true),
            (AnswerForm::Template, 520_000, false),
            (AnswerForm::Template, 1_084_808, false),
            (AnswerForm::Rewrite, 1_084_808, false),
            (AnswerForm::Auto, 1_084_808, false),
            (AnswerForm::View, 741_109, true),
            (AnswerForm::View, 1 << 20, true),
        ] {
            assert_eq!(fits(form, bytes, kubeadm).is_ok(), ok, "{form:?} {bytes}");
            assert!(fits(form, bytes, None).is_ok(), "no limit");
        }
        let e = fits(AnswerForm::Template, 1_084_808, kubeadm).unwrap_err();
        assert_eq!(
            e.to_string(),
            "a reload of the 1084808-byte Corefile with our template block is predicted to \
             peak at 304 MiB (with a 20% margin), over CoreDNS's memory limit of 170 MiB"
        );
        // A larger limit takes it.
        assert!(fits(AnswerForm::Template, 1_084_808, Some(512 * MIB)).is_ok());
    }

    #[test]
    fn memory_quantities() {
        for (q, want) in [
            ("170Mi", Some(170 * MIB)),
            ("1Gi", Some(1 << 30)),
            ("200M", Some(200_000_000)),
            ("512k", Some(512_000)),
            ("128974848", Some(128_974_848)),
            ("1e9", Some(1_000_000_000)),
            ("0.5Gi", Some(1 << 29)),
            (" 64Mi ", Some(64 * MIB)),
            ("170MiB", None),
            ("m", None),
            ("", None),
            ("1.5", None),
            ("100m", None),
        ] {
            assert_eq!(parse_quantity(q), want, "{q:?}");
        }
    }
}
