//! Every `docs/NAME.md` that the sources, the README or the docs themselves mention exists:
//! a reference to a missing document (as `docs/model-workloads.md` once was) fails here.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if p.is_dir() {
            files(&p, out);
        } else if matches!(
            p.extension().and_then(|x| x.to_str()),
            Some("rs" | "md" | "toml" | "sh" | "py")
        ) {
            out.push(p);
        }
    }
}

/// The `docs/….md` paths mentioned in `text`.
fn mentions(text: &str) -> Vec<String> {
    let mut v = vec![];
    let mut rest = text;
    while let Some(i) = rest.find("docs/") {
        let tail = &rest[i + 5..];
        let name: String = tail
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
            .collect();
        if tail[name.len()..].starts_with(".md") && !name.is_empty() {
            v.push(format!("docs/{name}.md"));
        }
        rest = &rest[i + 5..];
    }
    v
}

#[test]
fn mentioned_documents_exist() {
    let root = root();
    let mut all = vec![];
    for d in ["crates", "docs", "tools", ".ci"] {
        files(&root.join(d), &mut all);
    }
    all.push(root.join("README.md"));
    let mut missing = vec![];
    let mut seen = 0;
    for f in &all {
        if f.ends_with("docs_links.rs") {
            continue; // this file names a missing document on purpose
        }
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for m in mentions(&text) {
            seen += 1;
            if !root.join(&m).is_file() {
                missing.push(format!("{} mentions {m}", f.display()));
            }
        }
    }
    // The README alone links a dozen documents; finding none means the scan is broken.
    assert!(seen > 10, "only {seen} mentions found");
    assert!(missing.is_empty(), "{missing:#?}");
}

#[test]
fn the_scan_sees_a_missing_document() {
    assert_eq!(
        mentions("see docs/model-workloads.md and docs/x"),
        ["docs/model-workloads.md"]
    );
}
