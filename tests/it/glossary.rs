//! One word per thing: the glossary of docs/architecture.md names the words never said for its things ("Never
//! said, …: *hand back*, …"), and none of them appears in `src/`, the docs or the template, in prose or in an
//! identifier (`hand_back` and `HandBack` say "hand back" too). A word counts with its endings: *hand back* is also
//! "handed back".

use std::path::{Path, PathBuf};

use crate::support::files_under;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The phrases the glossary's "Never said" paragraph lists, each `*between stars*`.
fn never_said(architecture: &str) -> Vec<String> {
    let glossary = architecture.split("## Glossary").nth(1).expect("docs/architecture.md has a Glossary");
    let paragraph: String = glossary
        .split("\n\n")
        .find(|p| p.starts_with("Never said"))
        .expect("the glossary has a \"Never said\" paragraph")
        .replace('\n', " ");
    paragraph.split('*').skip(1).step_by(2).map(str::to_lowercase).collect()
}

/// `text` as words: identifiers split at `_`, `-` and lower-to-upper case steps, lower case; other punctuation
/// becomes a `|` no phrase crosses (`SendMessageBatch / DeleteMessageBatch` does not say "batch delete"); a
/// comment's `///` at a line's start does not, so a phrase wrapped onto the next comment line is still read.
fn words(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut previous = ' ';
    let prose = text.lines().map(|line| line.trim_start().trim_start_matches(['/', '!']));
    for c in prose.flat_map(|line| line.chars().chain([' '])) {
        if c.is_alphanumeric() {
            if c.is_uppercase() && previous.is_lowercase() {
                out.push(' ');
            }
            out.extend(c.to_lowercase());
        } else if c.is_whitespace() || c == '_' || c == '-' {
            out.push(' ');
        } else {
            out.push_str(" | ");
        }
        previous = c;
    }
    out
}

/// Whether `phrase` appears in `words` (both as [`words`] makes them), each of its words whole or with an ending; a
/// closing "back" may follow up to three words later ("handed their messages back").
fn says(words: &str, phrase: &str) -> bool {
    let phrase: Vec<&str> = phrase.split_whitespace().collect();
    let text: Vec<&str> = words.split_whitespace().collect();
    let inflected =
        |word: &str, stem: &str| word.strip_prefix(stem).is_some_and(|end| ["", "s", "es", "ed", "ing"].contains(&end));
    let from = |start: usize| {
        let mut at = start;
        for (index, stem) in phrase.iter().enumerate() {
            let reach = if index > 0 && *stem == "back" { 4 } else { 1 };
            let end = (at + reach).min(text.len());
            let Some(found) = (at..end).find(|&i| inflected(text[i], stem)) else { return false };
            if text[at..found].contains(&"|") {
                return false;
            }
            at = found + 1;
        }
        true
    };
    (0..text.len()).any(from)
}

/// Every file the rule covers: `src/**/*.rs`, README.md, BENCHMARKS.md, template.yaml, docs/*.md and the demos'
/// pages, by path, with its text; the glossary's own list left out of docs/architecture.md.
fn covered() -> Vec<(String, String)> {
    let mut paths: Vec<PathBuf> = ["src", "docs", "demos"]
        .iter()
        .flat_map(|dir| files_under(&Path::new(ROOT).join(dir), &["rs", "md"]))
        .collect();
    paths.extend(["README.md", "BENCHMARKS.md", "template.yaml"].map(|page| Path::new(ROOT).join(page)));
    let read = |path: PathBuf| {
        let name = path.strip_prefix(ROOT).unwrap().to_string_lossy().into_owned();
        (name, std::fs::read_to_string(&path).unwrap())
    };
    let mut files: Vec<(String, String)> = paths.into_iter().map(read).collect();
    for (name, text) in &mut files {
        if name == "docs/architecture.md" {
            let list = text.split("\n\n").find(|p| p.starts_with("Never said")).unwrap_or_default().to_owned();
            *text = text.replace(&list, "");
        }
    }
    files
}

#[test]
fn no_word_the_glossary_never_says_appears_in_the_code_or_the_docs() {
    let architecture = std::fs::read_to_string(Path::new(ROOT).join("docs/architecture.md")).unwrap();
    let phrases = never_said(&architecture);
    assert!(phrases.len() >= 5, "the glossary's \"Never said\" list reads as {phrases:?}: is it parsed right?");
    let mut found = Vec::new();
    for (file, text) in covered() {
        let text = words(&text);
        found.extend(phrases.iter().filter(|p| says(&text, p)).map(|p| format!("{file}: {p}")));
    }
    assert!(found.is_empty(), "say these as docs/architecture.md's glossary does: {found:#?}");
}

/// The matching itself: identifiers split into words, endings allowed, other words not matched.
#[test]
fn the_glossary_check_reads_identifiers_and_endings() {
    let hits = |text: &str, phrase: &str| says(&words(text), phrase);
    assert!(hits("self.hand_back_reason()", "hand back"));
    assert!(hits("Inference::HandBack =>", "hand back"));
    assert!(hits("they are handed\n/// back at once", "hand back"));
    assert!(hits("requests hand their messages back", "hand back"));
    assert!(!hits("hand it to the one who comes back", "hand back"));
    assert!(hits("a DeleteBatcher of its own", "batcher"));
    assert!(!hits("the handler gives it back", "hand back"));
    assert!(!hits("cargo build --release", "released"));
    assert!(!hits("a back hand", "hand back"));
    assert!(!hits("SendMessageBatch, DeleteMessageBatch", "batch delete"));
}
