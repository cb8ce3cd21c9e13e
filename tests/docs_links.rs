//! The docs a user reads hold together: every relative link of README.md and docs/*.md names
//! a file of the repository (and a heading of it, for `#anchor` links), and no page points
//! outside the repository.

use std::path::{Path, PathBuf};

/// README.md and every page under docs/.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("a docs directory")
        .map(|e| e.expect("a docs entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// The targets of the markdown links `[text](target)` of `text`, outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let tail = &rest[i + 2..];
            let Some(j) = tail.find(')') else { break };
            out.push(tail[..j].to_string());
            rest = &tail[j..];
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        let dir = page.parent().expect("a directory");
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            checked += 1;
            let (file, frag) = target.split_once('#').unwrap_or((&target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            let shown = format!("{}: ({target})", page.display());
            if file.contains("..") && !path.starts_with(env!("CARGO_MANIFEST_DIR")) {
                broken.push(format!("{shown} points outside the repository"));
                continue;
            }
            if !path.exists() {
                broken.push(format!("{shown}: no such file"));
                continue;
            }
            if !frag.is_empty() && path.extension().is_some_and(|e| e == "md") {
                let body = std::fs::read_to_string(&path).expect("a linked page");
                if !anchors(&body).iter().any(|a| a == frag) {
                    broken.push(format!("{shown}: no heading #{frag}"));
                }
            }
        }
    }
    println!("{checked} relative links checked");
    assert!(
        checked > 10,
        "only {checked} links found: is the parser right?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_parser_and_anchors_follow_markdown() {
    assert_eq!(
        links("see [a](docs/a.md) and [b](#two-words)\n```\n[c](x)\n```"),
        ["docs/a.md", "#two-words"]
    );
    assert_eq!(
        anchor(" Data parallelism: buckets (dp)"),
        "data-parallelism-buckets-dp"
    );
}
