//! The house keeps its layout (docs/architecture.md): no import circle among the files of `src/` (a parent file's
//! `child::` paths count, so a child that imports its parent back is a circle), every import runs with the layering
//! (`contract` imports nothing of the crate but itself; `ports` only `contract` and itself; the core never imports
//! `aws` or `local`; the adapters take `contract`, `ports` and `infra` only), the imports between the core's modules are
//! exactly the list docs/architecture.md gives, no file imports the face of a folder it sits in, and the map names
//! every file of `src/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::support::files_under;

/// One file of the library crate: its module path (`["router", "openai", "files"]`) and its text.
struct SourceFile {
    module: Vec<String>,
    text: String,
}

/// `src/` and every Rust file under it.
fn rust_files() -> (PathBuf, Vec<PathBuf>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = files_under(&src, &["rs"]);
    (src, files)
}

/// Every file of the library crate under `src/` (not `main.rs` or `bin/`, which are crates of their own), by path
/// relative to `src/`.
fn source_files_by_module() -> BTreeMap<String, SourceFile> {
    let (src, files) = rust_files();
    let mut sources = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        if relative == "main.rs" || relative.starts_with("bin/") {
            continue;
        }
        let mut module: Vec<String> = relative.trim_end_matches(".rs").split('/').map(str::to_owned).collect();
        if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
            module.pop();
        }
        sources.insert(relative, SourceFile { module, text: std::fs::read_to_string(&file).unwrap() });
    }
    sources
}

/// Where a unit-test module opens in `lines` (`#[cfg(test)]`, its attributes, a `mod` line), with that line's last
/// character: `{` for one inline, `;` for one in a file of its own.
fn unit_test_modules<'a>(lines: &'a [&str]) -> impl Iterator<Item = (usize, char)> + 'a {
    (0..lines.len()).filter(|&at| lines[at] == "#[cfg(test)]").filter_map(|at| {
        let declared = lines[at + 1..].iter().find(|l| !l.starts_with("#["))?;
        declared.starts_with("mod ").then(|| (at, declared.chars().last().unwrap_or(' ')))
    })
}

/// The lines of a file before its inline unit-test module.
fn before_unit_tests(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.lines().collect();
    let end = unit_test_modules(&lines).find(|&(_, last)| last == '{').map_or(lines.len(), |(at, _)| at);
    lines.truncate(end);
    lines
}

/// Whether a file keeps unit tests in a file of their own (`#[cfg(test)] mod unit;`) rather than at its end.
fn tests_elsewhere(text: &str) -> bool {
    let lines: Vec<&str> = text.lines().collect();
    unit_test_modules(&lines).any(|(_, last)| last == ';')
}

/// The code of a file without its comments, string literals (a doc comment may name any path) and inline unit-test
/// module (test code, whose `super::` is the file itself).
fn code(text: &str) -> String {
    let mut out = String::new();
    for line in before_unit_tests(text) {
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

/// Every path the code names from `crate::`, `super::`, `self::` or one of the file's own child modules (`child::`),
/// as absolute module paths; a `{…}` group after a path gives one path per item in it.
fn named_paths(source: &SourceFile) -> Vec<Vec<String>> {
    let code = code(&source.text);
    let bytes = code.as_bytes();
    let mut paths = Vec::new();
    let word = |i: usize| bytes.get(i).is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
    let children: Vec<String> = child_modules(&code).into_iter().map(|child| format!("{child}::")).collect();
    let starts: Vec<&str> =
        ["crate::", "super::", "self::"].into_iter().chain(children.iter().map(String::as_str)).collect();
    let mut i = 0;
    while i < bytes.len() {
        // A byte inside a character (a non-ASCII one left by a raw string) starts no path, nor does the middle of one.
        let starts_here = starts.iter().find(|p| code.get(i..).is_some_and(|rest| rest.starts_with(*p)));
        let Some(&start) = starts_here.filter(|_| i == 0 || !(word(i - 1) || code[..i].ends_with("::"))) else {
            i += 1;
            continue;
        };
        let mut base: Vec<String> = match start {
            "crate::" => Vec::new(),
            "super::" => source.module[..source.module.len().saturating_sub(1)].to_vec(),
            "self::" => source.module.clone(),
            child => [source.module.clone(), vec![child.trim_end_matches("::").to_owned()]].concat(),
        };
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

/// The modules a file declares (`mod x;`, `pub(crate) mod x;`), its unit tests left out.
fn child_modules(code: &str) -> Vec<&str> {
    code.lines()
        .filter_map(|line| {
            line.trim().strip_suffix(';')?.split_once("mod ").map(|(before, name)| (before.trim(), name))
        })
        .filter(|(before, name)| (before.is_empty() || before.starts_with("pub")) && *name != "tests")
        .map(|(_, name)| name)
        .collect()
}

/// The file a module path points into: the longest prefix of it that is a module file.
fn target<'a>(path: &[String], by_module: &'a BTreeMap<Vec<String>, String>) -> Option<&'a String> {
    (1..=path.len()).rev().find_map(|n| by_module.get(&path[..n]))
}

/// file → the files it imports (itself left out).
fn arrows(sources: &BTreeMap<String, SourceFile>) -> BTreeMap<String, BTreeSet<String>> {
    let by_module: BTreeMap<Vec<String>, String> = sources.iter().map(|(f, r)| (r.module.clone(), f.clone())).collect();
    sources
        .iter()
        .map(|(file, source)| {
            let paths = named_paths(source);
            let to = paths.iter().filter_map(|p| target(p, &by_module)).filter(|t| *t != file).cloned();
            (file.clone(), to.collect())
        })
        .collect()
}

/// The top-level module of a file: `router` for `router/openai/files.rs`, `ports` for `ports.rs`.
fn top_module(file: &str) -> &str {
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
    let found = circles(&arrows(&source_files_by_module()));
    assert!(found.is_empty(), "import circles: {found:#?}");
}

/// The modules of the core: they speak to the ports, and to each other only as docs/architecture.md lists.
const CORE: [&str; 4] = ["router", "worker", "scaler", "callbacks"];
/// The adapters: they implement ports, and take `contract`, `ports` and `infra` only.
const ADAPTERS: [&str; 4] = ["aws", "local", "engine", "classifier"];

/// Why an import from `file` into `to` runs against the layering, if it does.
fn layering_break(file: &str, to: &str) -> Option<&'static str> {
    let (from, into) = (top_module(file), top_module(to));
    if from == into {
        return None;
    }
    match from {
        "contract" => Some("contract imports nothing of the crate"),
        // infra/error_chain.rs: an error and its causes on one line, a function of std's Error alone.
        "ports" if into != "contract" && to != "infra/error_chain.rs" => Some("ports import only contract"),
        f if CORE.contains(&f) && (into == "aws" || into == "local") => Some("the core never imports aws or local"),
        f if ADAPTERS.contains(&f) && !["contract", "ports", "infra"].contains(&into) => {
            Some("adapters take contract, ports and infra only")
        }
        _ => None,
    }
}

fn layering_breaks(arrows: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let imports = arrows.iter().flat_map(|(file, to)| to.iter().map(move |to| (file, to)));
    imports
        .filter_map(|(file, to)| layering_break(file, to).map(|why| format!("{file} imports {to} ({why})")))
        .collect()
}

/// The imports between two modules of the core, as `from → into` pairs.
fn core_to_core(arrows: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<(String, String)> {
    let imports = arrows.iter().flat_map(|(file, to)| to.iter().map(move |to| (top_module(file), top_module(to))));
    imports
        .filter(|(from, into)| from != into && CORE.contains(from) && CORE.contains(into))
        .map(|(from, into)| (from.to_owned(), into.to_owned()))
        .collect()
}

fn architecture() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/architecture.md")).unwrap()
}

/// The list of docs/architecture.md's imports between the core's modules: its lines "- `from` → `into`: why".
fn documented_core_to_core(map: &str) -> BTreeSet<(String, String)> {
    map.lines()
        .filter_map(|line| line.strip_prefix("- `")?.split_once("` → `"))
        .filter_map(|(from, rest)| Some((from.to_owned(), rest.split_once('`')?.0.to_owned())))
        .collect()
}

/// The files of `src/` the map's module map does not name: a file's folders and its name (`mod` aside) must each
/// be a word of its top module's entry (`  router/ …` up to the next entry), a top-level file a word of the block.
fn unnamed_files(map: &str, files: impl Iterator<Item = String>) -> Vec<String> {
    let block = map.split("## The modules of `src/`").nth(1).and_then(|rest| rest.split("```").nth(1)).unwrap_or("");
    let words = |text: &str| -> BTreeSet<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map(str::to_lowercase).collect()
    };
    let mut entries: BTreeMap<String, String> = BTreeMap::new();
    let mut current = String::new();
    for line in block.lines() {
        let head = line.strip_prefix("  ").and_then(|rest| rest.split_once('/')).map(|(top, _)| top);
        if let Some(top) = head.filter(|top| !top.contains(' ') && !top.is_empty()) {
            current = top.to_owned();
        }
        entries.entry(current.clone()).or_default().push_str(&format!("{line}\n"));
    }
    let everything = words(block);
    files
        .filter(|file| {
            let parts: Vec<&str> = file.trim_end_matches(".rs").split('/').filter(|p| *p != "mod").collect();
            let named = match parts.as_slice() {
                [top] => everything.contains(*top),
                [top, rest @ ..] => entries
                    .get(*top)
                    .map(|entry| words(entry))
                    .is_some_and(|entry| rest.iter().all(|part| entry.contains(*part))),
                [] => true,
            };
            !named
        })
        .collect()
}

/// Imports of a file into the face of a folder it sits in (`cmd/router.rs` → `cmd/mod.rs`): a parent file declares
/// and re-exports its children, and what they share lives in a child of its own.
fn parent_imports(sources: &BTreeMap<String, SourceFile>, arrows: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let imports = arrows.iter().flat_map(|(file, to)| to.iter().map(move |to| (file, to)));
    imports
        .filter(|(file, to)| {
            let (inner, outer) = (&sources[*file].module, &sources[*to].module);
            outer.len() < inner.len() && inner.starts_with(outer)
        })
        .map(|(file, to)| format!("{file} imports its parent {to}"))
        .collect()
}

#[test]
fn no_child_imports_its_parent() {
    let sources = source_files_by_module();
    let found = parent_imports(&sources, &arrows(&sources));
    assert!(found.is_empty(), "a parent file is a face (docs/architecture.md):\n{}", found.join("\n"));
}

#[test]
fn every_import_runs_with_the_layering() {
    let breaks = layering_breaks(&arrows(&source_files_by_module()));
    assert!(breaks.is_empty(), "imports against the layering (docs/architecture.md):\n{}", breaks.join("\n"));
}

#[test]
fn the_core_modules_import_each_other_exactly_as_the_map_lists() {
    let (found, listed) = (core_to_core(&arrows(&source_files_by_module())), documented_core_to_core(&architecture()));
    assert!(!listed.is_empty(), "docs/architecture.md lists no import between the core's modules: is it parsed right?");
    assert_eq!(found, listed, "imports between the core's modules (left) against docs/architecture.md's list (right)");
}

#[test]
fn the_map_names_every_file_of_src() {
    let unnamed = unnamed_files(&architecture(), source_files_by_module().into_keys());
    assert!(unnamed.is_empty(), "docs/architecture.md's module map does not name {unnamed:?}");
}

/// The checks above see what they check: a circle and a layering break are found in a made-up house.
#[test]
fn the_checks_find_a_circle_and_a_layering_break_when_there_is_one() {
    let source = |module: &str, text: &str| SourceFile {
        module: module.split('/').map(str::to_owned).collect(),
        text: text.to_owned(),
    };
    let house = BTreeMap::from([
        ("contract/tier.rs".to_owned(), source("contract/tier", "use crate::ports::Queue; // crate::aws")),
        ("ports.rs".to_owned(), source("ports", "use crate::contract::{tier::Tier, request};")),
        ("contract/request.rs".to_owned(), source("contract/request", "fn f() { \"crate::router\"; }")),
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

/// The stricter checks see what they check, on the imports that once broke the map: core to core outside the list
/// (router/state.rs → scaler::wake), adapter to adapter (aws/bedrock.rs → classifier, classifier/openai.rs →
/// engine::client), a child that imports its parent back through the parent's `child::` path, and a file the map
/// does not name.
#[test]
fn the_checks_find_core_and_adapter_imports_a_parent_child_loop_and_an_unnamed_file() {
    let source = |file: &str, text: &str| {
        let module = file.trim_end_matches(".rs").trim_end_matches("/mod").split('/').map(str::to_owned).collect();
        (file.to_owned(), SourceFile { module, text: text.to_owned() })
    };
    let house = BTreeMap::from([
        source("router/state.rs", "use crate::scaler::wake::Wake;\nuse crate::callbacks::outbound::Policy;"),
        source("scaler/wake.rs", "use crate::ports::Queue;"),
        source("callbacks/outbound.rs", ""),
        source("ports.rs", ""),
        source("aws/bedrock.rs", "use crate::classifier::{Instruction, parse_answer};"),
        source("classifier/mod.rs", "pub mod openai;"),
        source("classifier/openai.rs", "use crate::engine::client::chat;\nuse std::time::Duration;"),
        source("engine/client.rs", ""),
        source("router/openai/mod.rs", "mod batches;\npub use batches::create;\npub struct OpenAiError;"),
        source("router/openai/batches.rs", "use super::OpenAiError;\nuse std::batches::Other;"),
    ]);
    let arrows = arrows(&house);
    assert_eq!(
        layering_breaks(&arrows),
        [
            "aws/bedrock.rs imports classifier/mod.rs (adapters take contract, ports and infra only)",
            "classifier/openai.rs imports engine/client.rs (adapters take contract, ports and infra only)",
        ]
    );
    assert_eq!(
        core_to_core(&arrows),
        BTreeSet::from([("router".into(), "callbacks".into()), ("router".into(), "scaler".into())])
    );
    let map = "- `router` → `callbacks`: a callback URL is checked at POST.\n";
    assert_eq!(documented_core_to_core(map), BTreeSet::from([("router".into(), "callbacks".into())]));
    assert_eq!(
        circles(&arrows),
        [vec!["router/openai/batches.rs".to_owned(), "router/openai/mod.rs".to_owned()]],
        "the parent's child:: path and the child's super:: make a loop; std::batches is not the child"
    );
    let map =
        "## The modules of `src/`\n\n```\nsrc/ ports.rs\n  router/  state, openai/ (batches)\n  scaler/ wake\n```\n";
    let files = || house.keys().filter(|f| ["router/", "scaler/", "ports"].iter().any(|p| f.starts_with(p))).cloned();
    assert!(unnamed_files(map, files()).is_empty(), "{:?}", unnamed_files(map, files()));
    assert_eq!(unnamed_files(&map.replace(" wake", ""), files()), ["scaler/wake.rs"]);
}

/// The parent check sees what it checks, on the imports that once reached into a parent file: `cmd`'s
/// `running_on_lambda` (cmd/mod.rs) from cmd/router.rs and cmd/args/mod.rs, `aws`'s `endpoint_overridden` from
/// aws/s3.rs; a sibling's item reached through the parent's path is no parent import.
#[test]
fn the_parent_check_finds_a_child_that_imports_its_parent() {
    let source = |file: &str, text: &str| {
        let module = file.trim_end_matches(".rs").trim_end_matches("/mod").split('/').map(str::to_owned).collect();
        (file.to_owned(), SourceFile { module, text: text.to_owned() })
    };
    let house = BTreeMap::from([
        source("cmd/mod.rs", "pub mod args;\npub mod router;\npub(crate) fn running_on_lambda() -> bool { true }"),
        source("cmd/router.rs", "use crate::cmd::running_on_lambda;\nuse crate::cmd::args::Flags;"),
        source("cmd/args/mod.rs", "fn f() -> bool { crate::cmd::running_on_lambda() }"),
        source("aws/mod.rs", "pub mod s3;\npub(crate) fn endpoint_overridden() -> bool { false }"),
        source("aws/s3.rs", "use super::endpoint_overridden;"),
    ]);
    assert_eq!(
        parent_imports(&house, &arrows(&house)),
        [
            "aws/s3.rs imports its parent aws/mod.rs",
            "cmd/args/mod.rs imports its parent cmd/mod.rs",
            "cmd/router.rs imports its parent cmd/mod.rs",
        ]
    );
}

/// Every file of `src/` (binaries included): its path and text.
fn source_files() -> Vec<(String, String)> {
    let (src, files) = rust_files();
    let relative = |file: &Path| file.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
    files.iter().map(|file| (relative(file), std::fs::read_to_string(file).unwrap())).collect()
}

/// The named fields of each struct the code declares (`struct X { a: A, pub b: B }`), as `file: X has N fields`.
fn struct_sizes(file: &str, text: &str) -> Vec<(String, usize)> {
    let code = code(text);
    let mut sizes = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("struct ") {
        let after = &rest[at + "struct ".len()..];
        let starts_word = at == 0 || !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let open = after.find(['{', ';', '(']);
        rest = after;
        let (Some(open), true) = (open, starts_word && !name.is_empty()) else { continue };
        if !after[open..].starts_with('{') {
            continue;
        }
        let (mut depth, mut fields, mut at_field_start, mut previous) = (0usize, 0, true, ' ');
        for c in after[open..].chars() {
            match c {
                '>' if previous == '-' => {}
                '{' | '(' | '[' | '<' => depth += 1,
                '}' | ')' | ']' | '>' => depth = depth.saturating_sub(1),
                ':' if depth == 1 && at_field_start => {
                    fields += 1;
                    at_field_start = false;
                }
                ',' if depth == 1 => at_field_start = true,
                _ => {}
            }
            previous = c;
            if depth == 0 {
                break;
            }
        }
        sizes.push((format!("{file}: {name}"), fields));
    }
    sizes
}

/// Files stay small and types hold a few things each: no file of `src/` over 450 lines of code before its unit tests
/// (which end the file they test: no `tests.rs` of their own), no struct over 10 fields.
#[test]
fn no_source_file_is_over_450_lines_of_code_nor_any_struct_over_10_fields() {
    let files = source_files();
    let long: Vec<String> = files
        .iter()
        .map(|(file, text)| (file, before_unit_tests(text).len(), tests_elsewhere(text)))
        .filter(|(file, lines, elsewhere)| *lines > 450 || *elsewhere || file.ends_with("tests.rs"))
        .map(|(file, lines, _)| format!("{file}: {lines} lines of code"))
        .collect();
    assert!(long.is_empty(), "split these files, or fold their tests into the file they test: {long:?}");
    let sizes: Vec<(String, usize)> = files.iter().flat_map(|(file, text)| struct_sizes(file, text)).collect();
    assert!(sizes.len() > 100, "only {} structs found: is the code read right?", sizes.len());
    let big: Vec<String> = sizes.iter().filter(|(_, n)| *n > 10).map(|(s, n)| format!("{s} has {n} fields")).collect();
    assert!(big.is_empty(), "group these fields into parts of their own: {big:?}");
}

/// The size check counts what it should: attributes, generics and a field's own type do not add fields.
#[test]
fn the_struct_check_counts_named_fields_only() {
    let text = "#[derive(Debug)]\npub struct A<T: Clone> {\n    #[serde(default)]\n    pub a: Option<Vec<(u8, T)>>,\n    \
                b: std::collections::HashMap<String, u32>,\n    c: Box<dyn Fn(u8) -> u8>,\n    d: u8,\n}\nstruct Unit;\nstruct Pair(u8, u8);\nfn f() { let _ = \"struct Q { x: 1 }\"; }\n";
    assert_eq!(struct_sizes("x.rs", text), [("x.rs: A".to_owned(), 4)]);
}

/// The size check counts what it should: the code above the unit tests; tests kept in a file apart are refused.
#[test]
fn the_size_check_counts_the_code_above_the_unit_tests_and_refuses_tests_kept_apart() {
    let text = "fn a() {}\nfn b() {}\n\n#[cfg(test)]\n#[allow(clippy::unwrap_used)]\nmod tests {\n    fn t() {}\n}\n";
    assert_eq!(before_unit_tests(text).len(), 3);
    assert!(!tests_elsewhere(text));
    assert!(tests_elsewhere("fn a() {}\n#[cfg(test)]\nmod tests;\n"));
}
