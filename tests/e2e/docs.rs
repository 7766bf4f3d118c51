//! The documentation: every relative Markdown link in README.md and docs/ points to a file that
//! exists, and every `#anchor` to a heading of that file; the README stays a newcomer's page.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file under docs/.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read docs/") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut pages = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut pages);
    pages.sort();
    pages
}

/// Markdown text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Every `[text](target)` link target.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            found.push(rest[..end].to_owned());
        }
    }
    found
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation dropped.
fn anchors(text: &str) -> Vec<String> {
    prose(text)
        .lines()
        .filter(|line| line.starts_with('#'))
        .map(|line| {
            line.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

#[test]
fn every_relative_link_in_the_readme_and_docs_points_to_an_existing_file_and_heading() {
    let pages = pages();
    assert!(pages.len() > 10, "docs/ has its pages: {pages:?}");
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("read page");
        for target in links(&prose(&text)) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("folder").join(file)
            };
            if !file.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
                continue;
            }
            if !anchor.is_empty() && file.extension().is_some_and(|e| e == "md") {
                let linked = std::fs::read_to_string(&file).expect("read linked page");
                if !anchors(&linked).iter().any(|a| a == anchor) {
                    broken.push(format!("{}: {target} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_docs_page_has_a_title_and_a_link_to_the_index_and_the_index_links_every_page() {
    let index_path = root().join("docs/README.md");
    let index = std::fs::read_to_string(&index_path).expect("docs/README.md");
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        assert!(text.starts_with("# "), "{} has a title", page.display());
        if page == root().join("README.md") || page == index_path {
            continue;
        }
        let relative = page
            .strip_prefix(root().join("docs"))
            .expect("under docs/")
            .to_string_lossy()
            .into_owned();
        let back = "../".repeat(relative.matches('/').count()) + "README.md";
        assert!(
            text.contains(&format!("]({back})")),
            "{relative} links back to the index"
        );
        assert!(
            index.contains(&format!("]({relative}")),
            "the index links {relative}"
        );
    }
    // The README is for a newcomer; the reference lives in docs/.
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    assert!(readme.lines().count() < 150, "README.md stays short");
    assert!(
        readme.contains("cargo run --release -- serve --config examples/switchyard.toml")
            && readme.contains("cargo test --workspace"),
        "the README's two commands"
    );
}
