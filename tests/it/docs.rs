//! The documentation against the binary: the configuration table in docs/configuration.md names every
//! environment variable the subcommands read, and each default it states is the one clap applies, or the one the
//! setting's help states where clap applies none. And the deploy
//! commands the docs give (docs/from-the-aws-sample.md's walkthrough of the AWS sample's steps above all) against
//! what they name: the repository's files, template.yaml's outputs and parameters, the flags of scripts/deploy.sh
//! and scripts/destroy.sh.

use std::collections::{BTreeMap, BTreeSet};

use clap::CommandFactory;
use gpuinfer::Cli;

/// A setting's default: the one clap applies, or the one its help states (`[default: …]`) when clap has none.
enum SettingDefault {
    Applied(String),
    Stated(String),
}

/// Every environment variable the command line reads (hidden ones excepted), with its default when it has one.
fn clap_settings() -> BTreeMap<String, Option<SettingDefault>> {
    let mut settings = BTreeMap::new();
    let cli = Cli::command();
    let commands = std::iter::once(&cli).chain(cli.get_subcommands());
    for command in commands {
        for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
            let Some(env) = arg.get_env() else { continue };
            let defaults: Vec<String> =
                arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
            let help = arg.get_long_help().or(arg.get_help()).map(ToString::to_string).unwrap_or_default();
            let stated = help.split_once("[default: ").and_then(|(_, rest)| rest.split_once(']')).map(|(d, _)| d);
            let default = if defaults.is_empty() {
                stated.map(|stated| SettingDefault::Stated(normalized(stated)))
            } else {
                Some(SettingDefault::Applied(defaults.join(",")))
            };
            settings.insert(env.to_string_lossy().into_owned(), default);
        }
    }
    settings
}

/// `text` with its runs of whitespace made one space, and without the backticks of Markdown code spans.
fn normalized(text: &str) -> String {
    text.replace('`', "").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The settings table: each row's variables (backticked names in the first column) and its default column.
fn documented_settings() -> Vec<(Vec<String>, String)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md")).unwrap();
    text.lines()
        .filter(|line| line.starts_with("| `"))
        .filter_map(|line| {
            let cells: Vec<&str> = line.split(" | ").collect();
            let names: Vec<String> = cells[0]
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|name| name.chars().all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()))
                .map(str::to_owned)
                .collect();
            (!names.is_empty() && cells.len() >= 4).then(|| (names, cells[2].trim().to_owned()))
        })
        .collect()
}

fn same_value(documented: &str, applied: &str) -> bool {
    documented == applied || matches!((documented.parse::<f64>(), applied.parse::<f64>()), (Ok(a), Ok(b)) if a == b)
}

#[test]
fn the_configuration_table_names_every_variable_the_binary_reads() {
    let documented: BTreeSet<String> = documented_settings().into_iter().flat_map(|(names, _)| names).collect();
    let missing: Vec<String> = clap_settings().into_keys().filter(|env| !documented.contains(env)).collect();
    assert!(missing.is_empty(), "docs/configuration.md does not list {missing:?}");
}

/// Each variable of a row with its default: a one-variable row's whole default cell, or for a row of N variables
/// whose cell lists N defaults (`2000, 1024, 500`), each in turn. Rows whose defaults do not pair up are left out.
fn documented_defaults() -> Vec<(String, String)> {
    documented_settings()
        .into_iter()
        .flat_map(|(names, cell)| {
            let defaults: Vec<String> = match names.len() {
                1 => vec![cell],
                _ => cell.split(", ").map(str::to_owned).collect(),
            };
            let paired = defaults.len() == names.len();
            names.into_iter().zip(defaults).filter(move |_| paired)
        })
        .collect()
}

/// The default the table states for a variable is the one clap applies, or for a setting clap gives no default, the
/// one its help states (`[default: …]`, rendered from the constant the code reads).
#[test]
fn each_default_the_configuration_table_states_is_the_one_clap_applies() {
    let settings = clap_settings();
    let (mut applied, mut stated, mut wrong) = (0, 0, Vec::new());
    for (name, documented) in documented_defaults() {
        match settings.get(&name) {
            Some(Some(SettingDefault::Applied(default))) => {
                applied += 1;
                if !same_value(&documented, default) {
                    wrong.push(format!("{name}: docs/configuration.md says `{documented}`, clap applies `{default}`"));
                }
            }
            Some(Some(SettingDefault::Stated(default))) => {
                stated += 1;
                if normalized(&documented) != *default {
                    wrong.push(format!("{name}: docs/configuration.md says `{documented}`, its help `{default}`"));
                }
            }
            _ => {}
        }
    }
    assert!(wrong.is_empty(), "defaults the table states wrong:\n{}", wrong.join("\n"));
    assert!(applied >= 50, "only {applied} clap defaults compared: is the table parsed right?");
    assert!(stated >= 15, "only {stated} help-stated defaults compared: is the table parsed right?");
}

// ---- the deploy commands the docs give, against the repository, template.yaml and the scripts

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The part of `markdown` under the heading `heading` (its whole line), up to the next heading of its level or
/// above (outside code blocks, where `#` starts a comment).
pub(crate) fn section<'a>(markdown: &'a str, heading: &str) -> &'a str {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = markdown.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no heading {heading:?}")) + 1;
    let (mut offset, mut in_block) = (start, false);
    for (index, line) in markdown[start..].split_inclusive('\n').enumerate() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if index > 0 && !in_block && (1..=level).contains(&hashes) && line[hashes..].starts_with(' ') {
            return &markdown[start..offset];
        }
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
        }
        offset += line.len();
    }
    &markdown[start..]
}

/// What `markdown` gives as commands: each line of its `sh` code blocks (a line ending in `\\` joined to the next,
/// comments dropped) as a block command, and each inline code span of the text around them.
fn commands(markdown: &str) -> (Vec<String>, Vec<String>) {
    let (mut blocks, mut text) = (Vec::new(), String::new());
    let (mut fence, mut pending) = (None::<bool>, String::new());
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            // Opening: whether it is a shell block; closing: back to text.
            fence = match fence {
                None => Some(["```sh", "```bash"].contains(&line.trim())),
                Some(_) => None,
            };
            continue;
        }
        match fence {
            Some(true) => {
                let line = if line.trim_start().starts_with('#') { "" } else { line };
                let line = line.find(" #").map_or(line, |at| &line[..at]);
                match line.trim_end().strip_suffix('\\') {
                    Some(head) => pending.push_str(head),
                    None => blocks.push(std::mem::take(&mut pending) + line),
                }
            }
            Some(false) => {}
            None => {
                // A span may run over a line break: the text is scanned whole.
                text.push_str(line);
                text.push(' ');
            }
        }
    }
    (blocks, code_spans(&text))
}

/// The inline code spans of Markdown text (a span opened by n backticks ends at the next run of exactly n).
fn code_spans(text: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('`') {
        let ticks = rest[open..].chars().take_while(|c| *c == '`').count();
        let after = &rest[open + ticks..];
        let fence = "`".repeat(ticks);
        let Some(close) =
            after.match_indices(&fence).map(|(at, _)| at).find(|at| !after[at + ticks..].starts_with('`'))
        else {
            break;
        };
        spans.push(after[..close].trim().to_owned());
        rest = &after[close + ticks..];
    }
    spans
}

/// The words of a command, without the quotes, parentheses and `$(` around them.
fn words(command: &str) -> Vec<&str> {
    command.split_whitespace().map(|word| word.trim_matches(|c: char| "\"'()[]$;{}".contains(c))).collect()
}

/// The name that follows `prefix` in `text` wherever it occurs, quotes and backticks skipped: `OutputKey==`X``.
fn names_after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.match_indices(prefix)
        .filter_map(|(at, _)| {
            let rest = text[at + prefix.len()..].trim_start_matches(|c: char| "=`'\"\\".contains(c));
            let name = &rest[..rest.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(rest.len())];
            name.starts_with(|c: char| c.is_ascii_uppercase()).then_some(name)
        })
        .collect()
}

/// The key of a `Key=Value` word, when the key is a CloudFormation-style name.
fn parameter_key(word: &str) -> Option<&str> {
    let (key, value) = word.split_once('=')?;
    let named = key.starts_with(|c: char| c.is_ascii_uppercase()) && key.chars().all(|c| c.is_ascii_alphanumeric());
    (named && !value.starts_with('=')).then_some(key)
}

/// A word that names a file of this repository: a path under one of its folders, or a file at its root.
fn repository_path(word: &str) -> Option<&str> {
    let folders = ["scripts/", "demos/", "docs/", "tests/", "src/", "benches/", "fuzz/"];
    let at_root = ["template.yaml", "Dockerfile", "entrypoint.sh", "buildspec.yml", "Cargo.toml", "README.md"];
    let word = word.trim_start_matches("./");
    (!word.contains(['$', '<', '*', ':']) && (folders.iter().any(|f| word.starts_with(f)) || at_root.contains(&word)))
        .then_some(word)
}

/// The flags of `scripts/deploy.sh` and `scripts/destroy.sh` that README.md and docs/deploy.md promise (each must
/// be one its `--help` lists).
const PROMISED_FLAGS: [(&str, &[&str]); 2] = [
    (
        "scripts/deploy.sh",
        &[
            "--stack",
            "--region",
            "--profile",
            "--model",
            "--large-model",
            "--alarm-email",
            "--lambda-architecture",
            "--artifact-bucket",
            "--parameter",
        ],
    ),
    ("scripts/destroy.sh", &["--stack", "--region", "--profile", "--delete-data", "--yes"]),
];

/// What the commands may name.
struct Known {
    outputs: BTreeSet<String>,
    parameters: BTreeSet<String>,
    /// Each script's flags, as its `--help` prints them.
    flags: BTreeMap<&'static str, BTreeSet<String>>,
}

impl Known {
    fn of_this_repository() -> Known {
        let template = crate::support::cfn::template();
        let keys = |part: &str| template[part].as_object().unwrap().keys().cloned().collect::<BTreeSet<_>>();
        let mut flags = BTreeMap::new();
        for (script, promised) in PROMISED_FLAGS {
            let help = std::process::Command::new("bash").arg(format!("{ROOT}/{script}")).arg("--help").output();
            let help = help.unwrap();
            let text = String::from_utf8_lossy(&help.stdout).into_owned() + &String::from_utf8_lossy(&help.stderr);
            assert_eq!(help.status.code(), Some(0), "{script} --help:\n{text}");
            let listed: BTreeSet<String> = text
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .filter(|word| word.starts_with("--") && word.len() > 2)
                .map(str::to_owned)
                .collect();
            for flag in promised {
                assert!(
                    listed.contains(*flag),
                    "{script} --help does not list {flag}, which the docs promise:\n{text}"
                );
            }
            flags.insert(script, listed);
        }
        Known { outputs: keys("Outputs"), parameters: keys("Parameters"), flags }
    }
}

/// What was looked up, and what of it does not exist.
#[derive(Default, Debug)]
struct Checked {
    files: usize,
    outputs: usize,
    parameters: usize,
    flags: usize,
    unknown: Vec<String>,
}

impl Checked {
    fn output(&mut self, known: &Known, name: &str, command: &str) {
        self.outputs += 1;
        if !known.outputs.contains(name) {
            self.unknown.push(format!("output {name} (not in template.yaml's Outputs) in: {command}"));
        }
    }

    fn parameter(&mut self, known: &Known, name: &str, command: &str) {
        self.parameters += 1;
        if !known.parameters.contains(name) {
            self.unknown.push(format!("parameter {name} (not in template.yaml's Parameters) in: {command}"));
        }
    }
}

/// Checks each command of `markdown`: the files a block command runs or reads exist, and in any command, each
/// stack output it reads (`OutputKey==X`, `out X`) is one of template.yaml, each parameter it passes
/// (`ParameterKey=X`, `--parameter X=…`, the `X=…` after `--parameter-overrides`, a span of only `X=…` words) is
/// one of template.yaml, and each flag it gives scripts/deploy.sh or scripts/destroy.sh is one the script has.
fn check(markdown: &str, known: &Known) -> Checked {
    let mut checked = Checked::default();
    let (blocks, spans) = commands(markdown);
    for command in &blocks {
        for word in words(command) {
            let Some(path) = repository_path(word) else { continue };
            checked.files += 1;
            if !std::path::Path::new(&format!("{ROOT}/{path}")).exists() {
                checked.unknown.push(format!("file {path} (not in the repository) in: {command}"));
            }
        }
    }
    for command in blocks.iter().chain(&spans) {
        let mut outputs: BTreeSet<&str> = names_after(command, "OutputKey==").into_iter().collect();
        outputs.extend(names_after(command, "$(out "));
        let words = words(command);
        for pair in words.windows(2) {
            let name = &pair[1][..pair[1].find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(pair[1].len())];
            if pair[0] == "out" && name.starts_with(|c: char| c.is_ascii_uppercase()) {
                outputs.insert(name);
            }
            if pair[0] == "--parameter"
                && let Some(key) = parameter_key(pair[1])
            {
                checked.parameter(known, key, command);
            }
        }
        for name in outputs {
            checked.output(known, name, command);
        }
        for name in names_after(command, "ParameterKey=") {
            checked.parameter(known, name, command);
        }
        if let Some(at) = words.iter().position(|word| *word == "--parameter-overrides") {
            for word in words[at + 1..].iter().take_while(|word| !word.starts_with("--") && !["&&", "|"].contains(word))
            {
                if let Some(key) = parameter_key(word) {
                    checked.parameter(known, key, command);
                }
            }
        }
        if !words.is_empty() && words.iter().all(|word| parameter_key(word).is_some()) {
            for word in &words {
                checked.parameter(known, parameter_key(word).unwrap(), command);
            }
        }
        for (script, flags) in &known.flags {
            let Some(at) = words.iter().position(|word| word.trim_start_matches("./") == *script) else { continue };
            for word in words[at + 1..].iter().take_while(|word| !["&&", "||", "|", ";"].contains(word)) {
                let Some(flag) = word.starts_with("--").then(|| word.split('=').next().unwrap()) else { continue };
                checked.flags += 1;
                if !flags.contains(flag) {
                    checked.unknown.push(format!("flag {flag} ({script} has none) in: {command}"));
                }
            }
        }
    }
    checked
}

const WALKTHROUGH: &str = "## Following the AWS sample's walkthrough";

/// docs/from-the-aws-sample.md takes the AWS sample's README step by step (its Steps 1–7 and Cleanup): each step is
/// there, gives at least one command, and every command names only what exists.
#[test]
fn the_walkthrough_of_the_samples_steps_names_only_what_exists() {
    let page = read("docs/from-the-aws-sample.md");
    let walkthrough = section(&page, WALKTHROUGH);
    let known = Known::of_this_repository();
    let steps = (1..=7).map(|n| format!("### Step {n}: ")).chain(["### Cleanup".to_owned()]);
    for step in steps {
        let heading = walkthrough
            .lines()
            .find(|line| line.starts_with(&step))
            .unwrap_or_else(|| panic!("the walkthrough has no {step:?}"));
        let (blocks, _) = commands(section(walkthrough, heading));
        assert!(blocks.iter().any(|c| !c.trim().is_empty()), "{heading}: no command");
    }
    let checked = check(walkthrough, &known);
    assert!(checked.unknown.is_empty(), "docs/from-the-aws-sample.md, {WALKTHROUGH}:\n{}", checked.unknown.join("\n"));
    assert!(
        checked.files >= 3 && checked.outputs >= 9 && checked.parameters >= 4 && checked.flags >= 7,
        "too little found to check, is the walkthrough parsed right? {checked:?}"
    );
}

/// The other deploy commands of the docs, checked the same way: docs/deploy.md's "Deploy to AWS", the README's
/// "Deploy to AWS" and docs/from-the-aws-sample.md's "What differs, and why".
#[test]
fn the_deploy_commands_of_the_docs_name_only_what_exists() {
    let known = Known::of_this_repository();
    let (deploy, readme, sample) = (read("docs/deploy.md"), read("README.md"), read("docs/from-the-aws-sample.md"));
    let parts = [
        ("docs/deploy.md", section(&deploy, "## Deploy to AWS")),
        ("README.md", section(&readme, "## Deploy to AWS")),
        ("docs/from-the-aws-sample.md", section(&sample, "## What differs, and why")),
    ];
    let mut found = Checked::default();
    for (file, part) in parts {
        let checked = check(part, &known);
        assert!(checked.unknown.is_empty(), "{file}:\n{}", checked.unknown.join("\n"));
        found.outputs += checked.outputs;
        found.parameters += checked.parameters;
        found.flags += checked.flags;
    }
    assert!(found.outputs >= 15 && found.parameters >= 10 && found.flags >= 4, "too little found: {found:?}");
}

/// The check itself finds each kind of wrong name (a typo in any of them fails the tests above).
#[test]
fn the_check_reports_a_missing_file_output_parameter_and_flag() {
    let known = Known::of_this_repository();
    let wrong = "\
```sh
demos/gpu-auto-repair/inject.sh 79 0
aws cloudformation describe-stacks --query 'Stacks[0].Outputs[?OutputKey==`InferenceUrl`].OutputValue'
curl \"$(out ResultApiUrl)/id\"
aws cloudformation deploy --template-file template.yaml --parameter-overrides ImagesPushed=true ImageTag=v1
scripts/deploy.sh --stack gpuinfer --alarm-mail me@example.com --parameter RouterCodeBuild=true
scripts/destroy.sh --delete-all
```
and `ApiAuth=NONE`, `--parameters ParameterKey=ModelPath,ParameterValue=s3://none/none/`.
";
    let checked = check(wrong, &known);
    let unknown: Vec<&str> = checked.unknown.iter().map(|line| line.split(" (").next().unwrap()).collect();
    assert_eq!(
        unknown,
        [
            "file demos/gpu-auto-repair/inject.sh",
            "output InferenceUrl",
            "output ResultApiUrl",
            "parameter ImagesPushed",
            "parameter RouterCodeBuild",
            "flag --alarm-mail",
            "flag --delete-all",
            "parameter ApiAuth",
            "parameter ModelPath",
        ],
        "{checked:?}"
    );
}

/// The README is the front door: at most 10 KB, the rest of the documentation one page per reader behind it.
#[test]
fn the_readme_stays_a_front_door_of_at_most_10_kb() {
    let bytes = read("README.md").len();
    assert!(bytes <= 10 * 1024, "README.md is {bytes} bytes: move what one reader needs to its page in docs/");
}

/// The documentation's words (README.md, BENCHMARKS.md, docs/*.md), counted as `wc -w` and scripts/doc-words.sh count
/// them: at most half of the 37,147 they were at 51036a4, so a new fact replaces words rather than adding pages.
#[test]
fn the_documentation_stays_within_half_of_its_old_words() {
    let mut pages = vec!["README.md".to_owned(), "BENCHMARKS.md".to_owned()];
    for entry in std::fs::read_dir(format!("{ROOT}/docs")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            pages.push(format!("docs/{name}"));
        }
    }
    let total: usize = pages.iter().map(|page| read(page).split_whitespace().count()).sum();
    assert!(pages.len() >= 10, "pages read: {pages:?}");
    assert!(total <= 37_147 / 2, "the documentation holds {total} words, over {}: scripts/doc-words.sh", 37_147 / 2);
}
