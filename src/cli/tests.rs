//! Unit tests of `cli.rs`.

use clap::CommandFactory;

use super::*;

/// The container's build has exactly the container's subcommands; the full build has them and the rest. Run
/// both ways by scripts/test.sh (`--no-default-features` for the container's build).
#[test]
fn the_container_build_keeps_exactly_the_commands_the_container_runs() {
    let names: Vec<String> = Cli::command().get_subcommands().map(|c| c.get_name().to_owned()).collect();
    for command in CONTAINER_COMMANDS {
        assert!(names.iter().any(|name| name == command), "{command} is missing from {names:?}");
    }
    if cfg!(feature = "all-commands") {
        assert!(names.iter().any(|name| name == "router") && names.iter().any(|name| name == "dev"), "{names:?}");
    } else {
        assert_eq!(names.len(), CONTAINER_COMMANDS.len(), "{names:?}");
    }
}
