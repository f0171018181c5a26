//! The house keeps its layout (docs/architecture.md): no import circle among the files of `src/`, and no import that
//! runs against the layering: `contract` imports nothing of the crate but itself, `ports` only `contract` and itself
//! (and the one-line error description of `infra/error_chain.rs`), `router`, `worker` and `scaler` never import `aws`
//! or `local`, and the adapters (`aws`, `local`, `engine`, `classifier`) never import `router`, `worker` or `scaler`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One file of the library crate: its module path (`["router", "openai", "files"]`) and its text.
struct Room {
    module: Vec<String>,
    text: String,
}

/// Every file of the library crate under `src/` (not `main.rs` or `bin/`, which are crates of their own), by path
/// relative to `src/`. Unit-test files (`x/tests.rs`) are test code, not rooms.
fn rooms() -> BTreeMap<String, Room> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut rooms = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        if relative == "main.rs" || relative.starts_with("bin/") || relative.ends_with("/tests.rs") {
            continue;
        }
        let mut module: Vec<String> = relative.trim_end_matches(".rs").split('/').map(str::to_owned).collect();
        if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
            module.pop();
        }
        rooms.insert(relative, Room { module, text: std::fs::read_to_string(&file).unwrap() });
    }
    rooms
}

/// The code of a file without its comments, string literals (a doc comment may name any path) and inline unit-test
/// module (test code, whose `super::` is the file itself).
fn code(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let test_module = |at: usize| {
        let mut next = lines[at + 1..].iter().skip_while(|l| l.starts_with("#["));
        lines[at] == "#[cfg(test)]" && next.next().is_some_and(|l| l.starts_with("mod ") && l.ends_with('{'))
    };
    let end = (0..lines.len()).find(|&at| test_module(at)).unwrap_or(lines.len());
    let mut out = String::new();
    for line in &lines[..end] {
        let line = line.split("//").next().unwrap_or_default();
        let mut in_string = false;
        let mut previous = ' ';
        for c in line.chars() {
            if c == '"' && previous != '\\' {
                in_string = !in_string;
            } else if !in_string {
                out.push(c);
            }
            previous = c;
        }
        out.push('\n');
    }
    out
}

/// Every path the code names from `crate::` or `super::`, as absolute module paths; a `{…}` group after a path
/// gives one path per item in it.
fn named_paths(room: &Room) -> Vec<Vec<String>> {
    let code = code(&room.text);
    let bytes = code.as_bytes();
    let mut paths = Vec::new();
    let word = |i: usize| bytes.get(i).is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
    let mut i = 0;
    while i < bytes.len() {
        // A byte inside a character (a non-ASCII one left by a raw string) starts no path.
        let starts = ["crate::", "super::"].into_iter().find(|p| code.get(i..).is_some_and(|rest| rest.starts_with(p)));
        let Some(start) = starts.filter(|_| i == 0 || !word(i - 1)) else {
            i += 1;
            continue;
        };
        let mut base: Vec<String> =
            if start == "crate::" { Vec::new() } else { room.module[..room.module.len().saturating_sub(1)].to_vec() };
        i += start.len();
        loop {
            if code[i..].starts_with("super::") {
                base.pop();
                i += "super::".len();
                continue;
            }
            let end = (i..bytes.len()).find(|&j| !word(j)).unwrap_or(bytes.len());
            if end == i {
                break;
            }
            base.push(code[i..end].to_owned());
            i = end;
            if !code[i..].starts_with("::") {
                break;
            }
            i += 2;
        }
        if code[i..].starts_with('{') {
            let close = code[i..].find('}').map_or(bytes.len(), |c| i + c);
            for item in code[i + 1..close].split(',') {
                let first = item.trim().split("::").next().unwrap_or_default().trim();
                if !first.is_empty() && first != "self" && first.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    paths.push([base.clone(), vec![first.to_owned()]].concat());
                }
            }
            i = close;
        }
        paths.push(base);
    }
    paths
}

/// The file a module path points into: the longest prefix of it that is a room.
fn target<'a>(path: &[String], by_module: &'a BTreeMap<Vec<String>, String>) -> Option<&'a String> {
    (1..=path.len()).rev().find_map(|n| by_module.get(&path[..n]))
}

/// file → the files it imports (itself left out).
fn arrows(rooms: &BTreeMap<String, Room>) -> BTreeMap<String, BTreeSet<String>> {
    let by_module: BTreeMap<Vec<String>, String> = rooms.iter().map(|(f, r)| (r.module.clone(), f.clone())).collect();
    rooms
        .iter()
        .map(|(file, room)| {
            let paths = named_paths(room);
            let to = paths.iter().filter_map(|p| target(p, &by_module)).filter(|t| *t != file).cloned();
            (file.clone(), to.collect())
        })
        .collect()
}

/// The top-level room of a file: `router` for `router/openai/files.rs`, `ports` for `ports.rs`.
fn wing(file: &str) -> &str {
    file.split('/').next().unwrap().trim_end_matches(".rs")
}

/// Files that import each other in a loop (strongly connected components of more than one file, Tarjan's).
fn circles(arrows: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        arrows: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        circles: Vec<Vec<String>>,
    }
    fn visit<'a>(walk: &mut Walk<'a>, file: &'a str) {
        let n = walk.index.len();
        walk.index.insert(file, n);
        walk.low.insert(file, n);
        walk.stack.push(file);
        for next in walk.arrows.get(file).into_iter().flatten() {
            if !walk.index.contains_key(next.as_str()) {
                visit(walk, next);
                let low = walk.low[file].min(walk.low[next.as_str()]);
                walk.low.insert(file, low);
            } else if walk.stack.contains(&next.as_str()) {
                let low = walk.low[file].min(walk.index[next.as_str()]);
                walk.low.insert(file, low);
            }
        }
        if walk.low[file] == walk.index[file] {
            let at = walk.stack.iter().position(|f| *f == file).unwrap();
            let circle: Vec<String> = walk.stack.drain(at..).map(str::to_owned).collect();
            if circle.len() > 1 {
                walk.circles.push(circle);
            }
        }
    }
    let mut walk = Walk { arrows, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), circles: vec![] };
    for file in arrows.keys() {
        if !walk.index.contains_key(file.as_str()) {
            visit(&mut walk, file);
        }
    }
    walk.circles
}

#[test]
fn no_file_of_src_imports_itself_back_through_others() {
    let found = circles(&arrows(&rooms()));
    assert!(found.is_empty(), "import circles: {found:#?}");
}

#[test]
fn every_import_runs_with_the_layering() {
    let adapters = ["aws", "local", "engine", "classifier"];
    let core = ["router", "worker", "scaler"];
    let mut breaks = Vec::new();
    for (file, imports) in arrows(&rooms()) {
        for to in imports {
            let (from, into) = (wing(&file), wing(&to));
            let broken = match from {
                "contract" => into != "contract",
                // infra/error_chain.rs: an error and its causes on one line, a function of std's Error alone.
                "ports" => !["contract", "ports"].contains(&into) && to != "infra/error_chain.rs",
                f if core.contains(&f) => into == "aws" || into == "local",
                f if adapters.contains(&f) => core.contains(&into),
                _ => false,
            };
            if broken {
                breaks.push(format!("{file} imports {to}"));
            }
        }
    }
    assert!(breaks.is_empty(), "imports against the layering (docs/architecture.md):\n{}", breaks.join("\n"));
}

/// The checks above see what they check: a circle and a layering break are found in a made-up house.
#[test]
fn the_checks_find_a_circle_and_a_layering_break_when_there_is_one() {
    let room = |module: &str, text: &str| Room {
        module: module.split('/').map(str::to_owned).collect(),
        text: text.to_owned(),
    };
    let house = BTreeMap::from([
        ("contract/tier.rs".to_owned(), room("contract/tier", "use crate::ports::Queue; // crate::aws")),
        ("ports.rs".to_owned(), room("ports", "use crate::contract::{tier::Tier, request};")),
        ("contract/request.rs".to_owned(), room("contract/request", "fn f() { \"crate::router\"; }")),
    ]);
    let arrows = arrows(&house);
    assert_eq!(arrows["contract/tier.rs"], BTreeSet::from(["ports.rs".to_owned()]), "comments name nothing");
    assert_eq!(
        arrows["ports.rs"],
        BTreeSet::from(["contract/tier.rs".to_owned(), "contract/request.rs".to_owned()]),
        "a group names each of its items"
    );
    assert!(arrows["contract/request.rs"].is_empty(), "strings name nothing");
    assert_eq!(circles(&arrows), [vec!["contract/tier.rs".to_owned(), "ports.rs".to_owned()]]);
}
