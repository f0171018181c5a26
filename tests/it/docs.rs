//! The documentation against the binary: the configuration table in docs/configuration.md names every
//! environment variable the subcommands read, and each default it states is the one clap applies.

use std::collections::{BTreeMap, BTreeSet};

use clap::CommandFactory;
use gpuinfer::cli::Cli;

/// Every environment variable the command line reads (hidden ones excepted), with its default when it has one.
fn clap_settings() -> BTreeMap<String, Option<String>> {
    let mut settings = BTreeMap::new();
    let cli = Cli::command();
    let commands = std::iter::once(&cli).chain(cli.get_subcommands());
    for command in commands {
        for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
            let Some(env) = arg.get_env() else { continue };
            let defaults: Vec<String> =
                arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
            let default = (!defaults.is_empty()).then(|| defaults.join(","));
            settings.insert(env.to_string_lossy().into_owned(), default);
        }
    }
    settings
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

#[test]
fn each_default_the_configuration_table_states_is_the_one_clap_applies() {
    let settings = clap_settings();
    let mut compared = 0;
    for (names, default) in documented_settings() {
        let [name] = names.as_slice() else { continue };
        let Some(Some(applied)) = settings.get(name) else { continue };
        assert!(
            same_value(&default, applied),
            "{name}: docs/configuration.md says `{default}`, clap applies `{applied}`"
        );
        compared += 1;
    }
    assert!(compared >= 25, "only {compared} defaults compared: is the table parsed right?");
}
