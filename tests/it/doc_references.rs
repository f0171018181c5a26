//! What the docs point a reader at exists: every repository path they name (`src/worker/lease.rs`, with its
//! `:line` when given) and every Rust item named by its path (`QueueError::Unavailable`, `InferenceRequest::parse`),
//! in README.md, BENCHMARKS.md and docs/. A rename that forgets a page fails here.

use std::collections::BTreeSet;
use std::path::Path;

use crate::support::files_under;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Every page the docs test counts, by name, with its text.
fn pages() -> Vec<(String, String)> {
    let mut names = vec!["README.md".to_owned(), "BENCHMARKS.md".to_owned()];
    let docs = std::fs::read_dir(Path::new(ROOT).join("docs")).unwrap();
    names.extend(docs.filter_map(|entry| {
        let name = entry.ok()?.file_name().into_string().ok()?;
        name.ends_with(".md").then(|| format!("docs/{name}"))
    }));
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(Path::new(ROOT).join(&name)).unwrap();
            (name, text)
        })
        .collect()
}

/// The repository paths `text` names: a known top folder, then a file with an extension; a `:line` kept.
fn paths(text: &str) -> BTreeSet<String> {
    let part = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let mut found = BTreeSet::new();
    for top in ["src/", "tests/", "scripts/", "benches/", "demos/"] {
        for (at, _) in text.match_indices(top) {
            if text[..at].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '/' || c == '.') {
                continue;
            }
            let path: String = text[at..].chars().take_while(|c| part(*c)).collect();
            let path = path.trim_end_matches(['.', '/']);
            let extension = path.rsplit_once('.').map(|(_, e)| e).unwrap_or_default();
            if !["rs", "py", "sh", "md", "yml", "yaml", "toml"].contains(&extension) {
                continue;
            }
            let rest = &text[at + path.len()..];
            let line: String = rest
                .strip_prefix(':')
                .map(|r| r.chars().take_while(char::is_ascii_digit).collect())
                .unwrap_or_default();
            found.insert(if line.is_empty() { path.to_owned() } else { format!("{path}:{line}") });
        }
    }
    found
}

/// The Rust items `text` names by path in code spans: `Type::item`.
fn items(text: &str) -> BTreeSet<(String, String)> {
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|span| span.split_once("::"))
        .filter(|(owner, item)| {
            owner.starts_with(|c: char| c.is_ascii_uppercase()) && ident(owner) && ident(item) && !item.contains("::")
        })
        .map(|(owner, item)| (owner.to_owned(), item.to_owned()))
        .collect()
}

/// Every Rust source of the crate, as one text.
fn sources() -> String {
    files_under(&Path::new(ROOT).join("src"), &["rs"])
        .iter()
        .map(|file| std::fs::read_to_string(file).unwrap())
        .collect()
}

#[test]
fn every_path_and_rust_item_the_docs_name_exists() {
    let source = sources();
    let mut missing = Vec::new();
    let (mut named_paths, mut named_items) = (0, 0);
    for (page, text) in pages() {
        for named in paths(&text) {
            named_paths += 1;
            let (file, line) =
                named.split_once(':').map_or((named.as_str(), None), |(f, l)| (f, l.parse::<usize>().ok()));
            match std::fs::read_to_string(Path::new(ROOT).join(file)) {
                Err(_) if !Path::new(ROOT).join(file).is_dir() => {
                    missing.push(format!("{page}: {named} does not exist"))
                }
                Ok(content) if line.is_some_and(|line| line == 0 || line > content.lines().count()) => {
                    missing.push(format!("{page}: {named} is past the file's end"));
                }
                _ => {}
            }
        }
        for (owner, item) in items(&text) {
            named_items += 1;
            let defined = [format!("enum {owner}"), format!("struct {owner}"), format!("trait {owner}")].iter().any(
                |definition| source.contains(&format!("{definition} ")) || source.contains(&format!("{definition}<")),
            );
            let member = [
                format!("fn {item}("),
                format!("fn {item}<"),
                format!("    {item}("),
                format!("    {item} {{"),
                format!("    {item},"),
            ]
            .iter()
            .any(|form| source.contains(form.as_str()));
            if !defined || !member {
                missing.push(format!("{page}: `{owner}::{item}` is not an item of src/"));
            }
        }
    }
    assert!(named_paths > 50 && named_items >= 5, "the docs were read: {named_paths} paths, {named_items} items");
    assert!(missing.is_empty(), "the docs name what does not exist:\n{}", missing.join("\n"));
}

/// The check finds a path and an item that do not exist, and a line past a file's end.
#[test]
fn the_reference_check_finds_what_does_not_exist() {
    let text = "See `src/worker/lease.rs:999999`, `src/worker/no_such_file.rs` and `EngineError::Malformed`.";
    assert_eq!(
        paths(text),
        BTreeSet::from(["src/worker/lease.rs:999999".to_owned(), "src/worker/no_such_file.rs".to_owned()])
    );
    assert_eq!(items(text), BTreeSet::from([("EngineError".to_owned(), "Malformed".to_owned())]));
    let source = sources();
    assert!(source.contains("enum EngineError ") && !source.contains("    Malformed("), "EngineError has no Malformed");
}
