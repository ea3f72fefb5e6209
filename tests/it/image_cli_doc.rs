//! The commands that run `doctor` and `render` from the image (docs/install.md, "The CLI from
//! the image", and docs/migration.md): each fenced block after an `<!-- image-cli: SUBCOMMAND -->`
//! marker (tests/it/doc_markers.rs) is read, the ouroboros part of its command (what follows
//! the image or the binary's path) is run against the binary, and the image is the one the
//! chart deploys. So a renamed flag or a new release's tag cannot leave these commands behind.
use std::path::Path;

use crate::common::{command, run};
use crate::doc_markers::{fenced_block, markers};
use crate::support::temp_dir;

const IMAGE: &str = "ghcr.io/ouroboros-hairpin/ouroboros";
const BINARY: &str = "/usr/local/bin/ouroboros";

/// One documented command: the file it is in, the subcommand, and its arguments from the
/// subcommand on (shell variables filled in, quotes dropped).
struct Documented {
    file: String,
    args: Vec<String>,
    image_tags: Vec<String>,
}

/// The command of the fenced block after each marker, continuation lines joined.
fn documented(root: &Path) -> Vec<Documented> {
    let mut out = Vec::new();
    for file in ["docs/install.md", "docs/migration.md"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        for marker in markers(&text, "image-cli") {
            let sub = marker.args.to_string();
            let line = format!("the image-cli marker on line {}", marker.line);
            let block = fenced_block(marker.after)
                .unwrap_or_else(|| panic!("{file}: no fenced block after {line}"));
            let joined = block.replace("\\\n", " ");
            let filled = joined
                .replace("\"$NS/$NEW\"", "ouroboros/ouroboros")
                .replace("$NS", "ouroboros")
                .replace("$NEW", "ouroboros")
                .replace('"', "");
            let line = filled
                .lines()
                .find(|l| l.contains(IMAGE) || l.contains(BINARY))
                .unwrap_or_else(|| panic!("{file}: no image or binary in the block after {line}"));
            let words: Vec<&str> = line.split_whitespace().collect();
            let image_tags = words
                .iter()
                .filter_map(|w| {
                    w.split_once(&format!("{IMAGE}:"))
                        .map(|(_, t)| t.to_string())
                })
                .collect();
            let start = words
                .iter()
                .position(|w| *w == sub)
                .unwrap_or_else(|| panic!("{file}: no `{sub}` in {line}"));
            out.push(Documented {
                file: file.to_string(),
                args: words[start..].iter().map(|w| w.to_string()).collect(),
                image_tags,
            });
        }
    }
    out
}

#[test]
fn the_documented_image_commands_run_with_this_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let commands = documented(root);
    let count = |sub: &str| commands.iter().filter(|c| c.args[0] == sub).count();
    assert!(count("doctor") >= 4 && count("render") >= 1, "markers lost");
    let chart = std::fs::read_to_string(root.join("charts/ouroboros/Chart.yaml")).unwrap();
    let app_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion: "))
        .unwrap()
        .trim_matches('"');
    let tmp = temp_dir("image-cli");
    let corefile =
        std::fs::read_to_string(root.join("tests/fixtures/corefiles/kubeadm.Corefile")).unwrap();
    std::fs::write(tmp.path().join("Corefile"), corefile).unwrap();
    std::fs::copy(
        root.join("tests/fixtures/manifests/list.yaml"),
        tmp.path().join("ingresses.yaml"),
    )
    .unwrap();
    for c in &commands {
        let what = format!("{}: ouroboros {}", c.file, c.args.join(" "));
        for tag in &c.image_tags {
            assert_eq!(tag, app_version, "{what}: the image the chart deploys");
        }
        let mut args = c.args.clone();
        let mut cmd = command(&args.remove(0));
        cmd.current_dir(tmp.path());
        if c.args[0] == "doctor" {
            // Parsed in full, then stopped at the first cluster access.
            if let Some(i) = args.iter().position(|a| a == "--kubeconfig") {
                args.drain(i..=i + 1);
            }
            args.extend(["--kubeconfig".into(), "/nonexistent/kubeconfig".into()]);
        }
        let out = run(cmd.args(&args), None);
        if c.args[0] == "doctor" {
            assert_eq!(out.code, 1, "{what}: {}", out.stderr);
            assert!(
                out.stderr
                    .contains("reading --kubeconfig /nonexistent/kubeconfig"),
                "{what}: {}",
                out.stderr
            );
        } else {
            assert_eq!(out.code, 0, "{what}: {}", out.stderr);
            assert!(
                out.stdout.contains("BEGIN ouroboros"),
                "{what}: {}",
                out.stdout
            );
        }
    }
}
