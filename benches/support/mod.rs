//! What the benchmarks share: child processes killed when dropped, free ports, the engine's load read during a run,
//! and BENCHMARKS.md's layout: one table of short rows at the top, each row's details in a list under "## Details",
//! each bench's section opening with a paragraph it writes (the paragraphs after it written by hand and kept).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gpuinfer::{EngineLoad, parse_engine_load};

use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// Completion tokens each benchmark request asks for.
pub(crate) const TOKENS: u32 = 48;

/// One row of the table: ours against its reference, measured in the same run. The table's cells are short (a
/// number and its unit); the rest of what the run measured goes to the row's item under "## Details".
pub(crate) struct Row {
    pub id: &'static str,
    /// A few words, one of a kind among the rows of its id (with the id it finds the row's line and item again), with
    /// no " | " or ": " in it. Rows of one kind share the text up to its first comma.
    pub what: String,
    /// A number and its unit.
    pub ours: String,
    /// A number and its unit.
    pub reference: String,
    pub ratio: f64,
    pub target: &'static str,
    /// None where the issue sets no target and the row is there to be read.
    pub met: Option<bool>,
    /// What caps the row on this machine where it misses its target, said beside the "no": the worker's rows on
    /// SQS + S3 run against moto, an emulator on the engine's own cores (the page's "Notes").
    pub capped_by: Option<&'static str>,
    /// What the table does not show, tersely: each side's runs where it had several, the engine's load, figures
    /// beside the two compared; ending with a full stop, or empty. The method belongs to the bench's section.
    pub details: String,
}

/// A child process killed when dropped.
pub(crate) struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Process {
    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Adds a row and shows it at once, so a long run reports as it goes.
pub(crate) fn report(rows: &mut Vec<Row>, row: Row) {
    eprintln!(
        "  {} {}: {} vs {} → {:.2} (target {}); {}",
        row.id, row.what, row.ours, row.reference, row.ratio, row.target, row.details
    );
    rows.push(row);
}

/// The table's header and the line under it.
const TABLE_HEAD: &str = "| | what | ours | reference | ratio | target |\n|---|---|---|---|---:|---|\n";
/// The heading of the rows' details, the section after the table.
const DETAILS_HEADING: &str = "## Details";
/// What the details section says before its list, written when a run makes the section.
const DETAILS_INTRO: &str = "Per row, what the table lacks. runs: each run where a side had several (the reference's \
                             before, between and after ours); busy: mean slots running (the engine's `/metrics`, \
                             every 50 ms); cores: the engine's CPU-s per s; `+`: uncommitted changes. Default \
                             settings; llama.cpp runs gemma-3-270m.";
/// The width the details' items are wrapped to.
const WIDTH: usize = 120;

/// The table of `rows` (printed by the benches).
pub(crate) fn table(rows: &[Row]) -> String {
    let mut out = String::from(TABLE_HEAD);
    for r in rows {
        out += &line(r);
    }
    out
}

/// The items of `rows` under "## Details" (printed by the benches), `run` being the run that measured them.
pub(crate) fn details(rows: &[Row], run: &str) -> String {
    rows.iter().map(|row| item(row, run)).collect()
}

/// A row's line of the table, its line break included: a target missed says so after it (`≥ 3.4, **no**`), with
/// what caps the row where known.
fn line(r: &Row) -> String {
    let missed = match (r.met, r.capped_by) {
        (Some(false), None) => ", **no**".to_owned(),
        (Some(false), Some(cap)) => format!(", **no** ({cap})"),
        _ => String::new(),
    };
    format!("| {} | {} | {} | {} | {:.2} | {}{missed} |\n", r.id, r.what, r.ours, r.reference, r.ratio, r.target)
}

/// A row's item under "## Details": `- **id** what: details Run run.` (`- **id** what: run run.` with no
/// details), wrapped (`wrapped`), the lines after the first indented by two spaces.
fn item(r: &Row, run: &str) -> String {
    let details = r.details.trim();
    let text = if details.is_empty() {
        format!("- **{}** {}: run {run}.", r.id, r.what)
    } else {
        format!("- **{}** {}: {details} Run {run}.", r.id, r.what)
    };
    wrapped(&text, "  ")
}

/// A side's runs, as the details say them: nothing for one run (the table has it), else "runs a, b, c; ".
pub(crate) fn runs_of(values: &[f64]) -> String {
    if values.len() < 2 {
        return String::new();
    }
    let listed: Vec<String> = values.iter().map(|v| format!("{v:.1}")).collect();
    format!("runs {}; ", listed.join(", "))
}

/// `text` in lines of at most `WIDTH` characters (a longer word stands on its own line), those after the first
/// starting with `indent`; the last line break included. A line never starts with a word that would start a markdown
/// block there (`opens_block`): the line before it runs longer instead.
pub(crate) fn wrapped(text: &str, indent: &str) -> String {
    let (mut out, mut line) = (String::new(), String::new());
    for word in text.split_whitespace() {
        let full = line.chars().count() + 1 + word.chars().count() > WIDTH;
        if !line.trim().is_empty() && full && !opens_block(word) {
            out += &line;
            out.push('\n');
            line = indent.to_owned();
        }
        if !line.trim().is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out + &line + "\n"
}

/// Whether `word` at the start of a line would start a markdown block: a list item (`+`, `-`, `*`, `1.`, `1)`), a
/// heading, a quote or a setext underline.
fn opens_block(word: &str) -> bool {
    let numbered =
        word.strip_suffix(['.', ')']).is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
    matches!(word, "+" | "-" | "*") || word.starts_with(['#', '>', '=']) || numbered
}

/// The id and what of a table line (`| id | what | …`).
fn line_name(line: &str) -> Option<(String, String)> {
    let (id, rest) = line.strip_prefix("| ")?.split_once(" | ")?;
    Some((id.to_owned(), rest.split_once(" | ")?.0.to_owned()))
}

/// The id and what of a details item (`- **id** what: …`, its lines joined).
fn item_name(item: &str) -> Option<(String, String)> {
    let text = item.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    let (id, rest) = text.strip_prefix("- **")?.split_once("** ")?;
    Some((id.to_owned(), rest.split_once(": ")?.0.to_owned()))
}

/// The part of what a row measures that rows of one kind share: its text up to the first comma ("SQS + S3 worker").
fn kind_of(what: &str) -> &str {
    what.split_once(',').map_or(what, |(kind, _)| kind)
}

/// `entries` (a table's lines or a list's items) with `rows` written in: a row whose id and what an entry has
/// replaces it; a new one goes before the first entry of its kind (same id, same text up to the first comma of what
/// it measures), after the new rows of that kind written before it, or at the end. Entries of the ids in `owned`
/// that no row has are dropped first (a bench that measured all its rows owns their ids).
fn placed(
    mut entries: Vec<String>,
    rows: &[Row],
    owned: &[&str],
    name: impl Fn(&str) -> Option<(String, String)>,
    render: impl Fn(&Row) -> String,
) -> Vec<String> {
    entries.retain(|entry| {
        name(entry).is_none_or(|(id, what)| {
            !owned.contains(&id.as_str()) || rows.iter().any(|row| row.id == id && row.what == what)
        })
    });
    let mut last_new: std::collections::HashMap<(&str, &str), &str> = std::collections::HashMap::new();
    for row in rows {
        let find = |entries: &[String], what: &str| {
            entries.iter().position(|entry| name(entry).is_some_and(|(i, w)| i == row.id && w == what))
        };
        if let Some(at) = find(&entries, &row.what) {
            entries[at] = render(row);
            continue;
        }
        let kind = (row.id, kind_of(&row.what));
        let at = if let Some(at) = last_new.get(&kind).and_then(|what| find(&entries, what)) {
            at + 1
        } else {
            let same_kind =
                entries.iter().position(|entry| name(entry).is_some_and(|(i, w)| i == row.id && kind_of(&w) == kind.1));
            same_kind.unwrap_or(entries.len())
        };
        entries.insert(at, render(row));
        last_new.insert(kind, &row.what);
    }
    entries
}

/// `document` with `rows` written into its first table and their items into the list under "## Details", every other
/// line kept (see `placed`; `owned`: the ids whose rows that `rows` lack are dropped). Makes the table (at the end)
/// and the details section (after the table) where the document has none. `run`: the run that measured the rows.
pub(crate) fn with_rows(document: &str, rows: &[Row], owned: &[&str], run: &str) -> String {
    let document = if document.starts_with('|') || document.contains("\n|") {
        document.to_owned()
    } else if document.trim().is_empty() {
        TABLE_HEAD.to_owned()
    } else {
        format!("{}\n\n{TABLE_HEAD}", document.trim_end())
    };
    let start = if document.starts_with('|') { 0 } else { document.find("\n|").unwrap() + 1 };
    let end = after_first_table(&document, start);
    let lines = document[start..end].split_inclusive('\n').map(str::to_owned).collect();
    let lines = placed(lines, rows, owned, line_name, line);
    let document = format!("{}{}{}", &document[..start], lines.concat(), &document[end..]);
    with_items(&document, rows, owned, run)
}

/// The list under "## Details" with `rows`' items written in (`with_rows`).
fn with_items(document: &str, rows: &[Row], owned: &[&str], run: &str) -> String {
    let heading = format!("\n{DETAILS_HEADING}\n");
    let document = if document.contains(&heading) {
        document.to_owned()
    } else {
        let at = after_first_table(document, document.find("\n|").map_or(0, |at| at + 1));
        format!("{}\n{DETAILS_HEADING}\n\n{}{}", &document[..at], wrapped(DETAILS_INTRO, ""), &document[at..])
    };
    let body = document.find(&heading).unwrap() + heading.len();
    let body_end = document[body..].find("\n## ").map_or(document.len(), |at| body + at + 1);
    // The list: from its first item to the first line that neither starts an item nor continues one.
    let (mut start, mut end, mut offset) = (None, None, body);
    for line in document[body..body_end].split_inclusive('\n') {
        let in_list = line.starts_with("- ") || (start.is_some() && line.starts_with("  "));
        if start.is_none() && in_list {
            start = Some(offset);
        } else if start.is_some() && !in_list {
            end = Some(offset);
            break;
        }
        offset += line.len();
    }
    let start = start.unwrap_or(body_end);
    let end = end.unwrap_or(body_end);
    let mut items: Vec<String> = Vec::new();
    for line in document[start..end].split_inclusive('\n') {
        match items.last_mut() {
            Some(last) if !line.starts_with("- ") => last.push_str(line),
            _ => items.push(line.to_owned()),
        }
    }
    let had_items = !items.is_empty();
    let items = placed(items, rows, owned, item_name, |row| item(row, run)).concat();
    if had_items {
        return format!("{}{items}{}", &document[..start], &document[end..]);
    }
    let after = &document[end..];
    format!("{}\n\n{items}{}{after}", document[..start].trim_end(), if after.is_empty() { "" } else { "\n" })
}

/// Writes `rows` into the table and the details of the document at `path` (`with_rows`), `run` being the run that
/// measured them.
pub(crate) fn write_rows(path: &Path, rows: &[Row], owned: &[&str], run: &str) {
    let document = std::fs::read_to_string(path).unwrap_or_default();
    std::fs::write(path, with_rows(&document, rows, owned, run)).unwrap();
    eprintln!("wrote {} rows into the table of {}", rows.len(), path.display());
}

/// The run that measures rows now, for their details: today's date and the commit checked out, with "+" after it
/// where the working tree's tracked files differ from it (uncommitted changes).
pub(crate) fn run_label() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "commit unknown".into());
    let changed = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|status| !status.is_empty());
    let changed = if changed { "+" } else { "" };
    format!("{}, {commit}{changed}", chrono::Local::now().format("%Y-%m-%d"))
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse::<f64>().ok()))
        .map_or(0.0, |kb| kb / 1_048_576.0);
    format!("{cores} cores ({cpu}), {memory:.0} GiB memory")
}

/// A markdown document with the generated part of the section under `heading` (from the heading to the end of its
/// first table) replaced by `section`, the paragraphs written by hand after that table kept; or `section` added at
/// the end.
pub(crate) fn with_section(document: &str, heading: &str, section: &str) -> String {
    let Some(start) = document.find(heading) else { return format!("{}\n\n{section}", document.trim_end()) };
    format!("{}{}\n{}", &document[..start], section.trim_end(), &document[after_first_table(document, start)..])
}

/// A markdown document whose section under `heading` opens with `intro` (one paragraph, wrapped, in place of the
/// first one there), the paragraphs written by hand after it kept; or the section added at the end.
pub(crate) fn with_intro(document: &str, heading: &str, intro: &str) -> String {
    let section = format!("{heading}\n\n{}", wrapped(intro, ""));
    let Some(start) = document.find(&format!("\n{heading}\n")).map(|at| at + 1) else {
        return format!("{}\n\n{section}", document.trim_end());
    };
    // The heading's line, the blank lines after it, then its first paragraph up to the blank line that ends it.
    let (mut offset, mut in_paragraph) = (start, false);
    for (n, line) in document[start..].split_inclusive('\n').enumerate() {
        let blank = line.trim().is_empty();
        if n > 0 && in_paragraph && (blank || line.starts_with('#')) {
            break;
        }
        in_paragraph |= n > 0 && !blank;
        offset += line.len();
    }
    format!("{}{section}{}", &document[..start], &document[offset..])
}

/// Writes `intro` as the first paragraph of the section under `heading` of the document at `path` (`with_intro`).
pub(crate) fn write_intro(path: &Path, heading: &str, intro: &str) {
    let document = std::fs::read_to_string(path).unwrap_or_default();
    std::fs::write(path, with_intro(&document, heading, intro)).unwrap();
    eprintln!("wrote the section \"{heading}\" of {}", path.display());
}

/// A markdown document with `header` in place of everything before its first table.
pub(crate) fn with_header(document: &str, header: &str) -> String {
    let start = if document.starts_with('|') { 0 } else { document.find("\n|").map_or(document.len(), |at| at + 1) };
    format!("{}\n\n{}", header.trim_end(), &document[start..])
}

/// Where the first markdown table at or after `from` ends (after its last row's line break); the document's end
/// when there is none.
pub(crate) fn after_first_table(document: &str, from: usize) -> usize {
    let mut offset = from;
    let mut in_table = false;
    for line in document[from..].split_inclusive('\n') {
        let row = line.starts_with('|');
        if in_table && !row {
            return offset;
        }
        in_table |= row;
        offset += line.len();
    }
    document.len()
}

/// The engine simulator's settings that make it behave as a GPU engine: 10 ms per token at batch 1, 30 % slower
/// at a full batch, completions as long as asked for.
pub(crate) const GPU_LIKE: &[&str] = &["--completion-tokens", "100000", "--token-ms", "10", "--batch-slowdown", "0.3"];

/// The engine simulator: `slots` parallel slots.
pub(crate) fn simulator(slots: usize, extra: &[&str]) -> (Process, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_engine-simulator"));
    command.args(["--listen", "127.0.0.1:0", "--slots", &slots.to_string()]).args(extra);
    serving(command, "the engine simulator")
}

/// The SQS + S3 stand-in (`aws-stand-in`) on idle CPU only (SCHED_IDLE), as moto runs in these benches: what it
/// takes, the engine and the worker do not lose.
pub(crate) fn aws_stand_in() -> (Process, String) {
    let mut command = Command::new("chrt");
    command.args(["--idle", "0", env!("CARGO_BIN_EXE_aws-stand-in"), "--listen", "127.0.0.1:0"]);
    serving(command, "the aws-stand-in")
}

/// `command`'s process, once it printed the URL it serves on (its first line).
fn serving(mut command: Command, what: &str) -> (Process, String) {
    let mut child =
        command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut url = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut url).unwrap();
    assert!(url.starts_with("http://"), "{what} did not start");
    (Process(child), url.trim().to_owned())
}

/// The engine's load, from its /metrics.
pub(crate) async fn engine_load(http: &reqwest::Client, engine: &str) -> EngineLoad {
    let text = http.get(format!("{engine}/metrics")).send().await.unwrap().text().await.unwrap();
    parse_engine_load(&text).expect("the engine's /metrics names its running and waiting")
}

/// How often `loads_during` reads the engine's load.
const LOAD_READING: std::time::Duration = std::time::Duration::from_millis(50);

/// Runs `work` while another task reads the engine's load from its /metrics every 50 ms (llama.cpp answers between
/// two decode steps, so there once a step at most); what `work` returned, and the readings.
pub(crate) async fn loads_during<T>(engine: &str, work: impl Future<Output = T>) -> (T, Vec<EngineLoad>) {
    let done = Arc::new(AtomicBool::new(false));
    let (http, engine, stop) = (reqwest::Client::new(), engine.to_owned(), Arc::clone(&done));
    let reader = tokio::spawn(async move {
        let mut readings = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            readings.push(engine_load(&http, &engine).await);
            tokio::time::sleep(LOAD_READING).await;
        }
        readings
    });
    let output = work.await;
    done.store(true, Ordering::Relaxed);
    (output, reader.await.unwrap())
}

/// The mean of `of` over the readings (0 with none).
pub(crate) fn mean_of(readings: &[EngineLoad], of: impl Fn(&EngineLoad) -> u64) -> f64 {
    readings.iter().map(of).sum::<u64>() as f64 / readings.len().max(1) as f64
}

/// `gpuinfer <args>` with its output discarded (warnings only).
pub(crate) fn gpuinfer(args: &[&str], env: &[(&str, String)]) -> Process {
    gpuinfer_build(env!("CARGO_BIN_EXE_gpuinfer"), args, env, None)
}

/// The inference container's build of gpuinfer (`--profile container --no-default-features`, as the Dockerfile
/// builds it), which scripts/bench.sh builds and names in BENCH_CONTAINER_GPUINFER.
pub(crate) fn container_build() -> String {
    std::env::var("BENCH_CONTAINER_GPUINFER")
        .expect("BENCH_CONTAINER_GPUINFER: the container build of gpuinfer (scripts/bench.sh builds it)")
}

/// `binary <args>`, a build of gpuinfer, with its logs discarded (warnings only), and its EMF metric lines (its
/// standard output) written to `metrics` if given, else discarded.
pub(crate) fn gpuinfer_build(binary: &str, args: &[&str], env: &[(&str, String)], metrics: Option<&Path>) -> Process {
    gpuinfer_logged(binary, args, env, metrics, None)
}

/// `gpuinfer_build`, its warnings (its logs at level warn, its standard error) written to `warnings` if given.
pub(crate) fn gpuinfer_logged(
    binary: &str,
    args: &[&str],
    env: &[(&str, String)],
    metrics: Option<&Path>,
    warnings: Option<&Path>,
) -> Process {
    let file = |path: Option<&Path>| path.map_or_else(Stdio::null, |path| std::fs::File::create(path).unwrap().into());
    let mut command = Command::new(binary);
    command.args(args).envs(env.iter().cloned()).env("RUST_LOG", "warn").stdout(file(metrics)).stderr(file(warnings));
    Process(command.spawn().expect("start gpuinfer"))
}

/// Total completion tokens per second when `concurrency` clients drive the engine directly.
pub(crate) async fn drive_engine(url: &str, concurrency: usize, requests: usize) -> f64 {
    let requests = requests.min(concurrency * 20);
    let http = reqwest::Client::new();
    let slots = Arc::new(Semaphore::new(concurrency));
    let started = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..requests {
        let (http, slots, url) = (http.clone(), Arc::clone(&slots), url.to_owned());
        calls.spawn(async move {
            let _slot = slots.acquire_owned().await.unwrap();
            let body = json!({"model": "m", "prompt": format!("Benchmark request {i}: tell a story."), "max_tokens": TOKENS, "temperature": 0.7});
            let answer: Value = http.post(format!("{url}/v1/completions")).json(&body).send().await.unwrap().json().await.unwrap();
            answer["usage"]["completion_tokens"].as_u64().unwrap()
        });
    }
    let mut tokens = 0;
    while let Some(done) = calls.join_next().await {
        tokens += done.unwrap();
    }
    tokens as f64 / started.elapsed().as_secs_f64()
}

/// The best direct throughput over a few concurrencies, and the concurrency that gave it.
pub(crate) async fn best_direct(url: &str, concurrencies: &[usize], requests: usize) -> (f64, usize) {
    let mut best = (0.0, 0);
    for &c in concurrencies {
        let rate = drive_engine(url, c, requests).await;
        eprintln!("  direct at concurrency {c}: {rate:.1} tok/s");
        if rate > best.0 {
            best = (rate, c);
        }
    }
    best
}

/// A process's memory from /proc, in MiB: resident (and its peak), and what the resident part is made of.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Memory {
    pub rss: f64,
    pub peak: f64,
    /// Private memory: heap, stacks, the queue's page cache.
    pub anon: f64,
    /// Pages of the binary and shared libraries mapped in: shared and clean, dropped first under pressure.
    pub file: f64,
}

pub(crate) fn memory(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap()
            .parse::<f64>()
            .unwrap()
            / 1024.0
    };
    Memory { rss: field("VmRSS:"), peak: field("VmHWM:"), anon: field("RssAnon:"), file: field("RssFile:") }
}
