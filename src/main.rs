//! `initguard` command line: parses arguments and wires the library together.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use initguard::config::Config;

#[derive(Parser)]
#[command(
    name = "initguard",
    version,
    about = "Keeps pods from waiting forever on a failed initializer or scheduling gate"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a configuration file: exit 0 with a summary, or 2 with located errors.
    CheckConfig {
        /// Path of the YAML configuration.
        path: PathBuf,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { path, output } => check_config(&path, output),
    }
}

fn check_config(path: &std::path::Path, output: Output) -> ExitCode {
    match Config::load(path) {
        Ok(config) => {
            match output {
                Output::Text => print!("{}", config.summary()),
                Output::Json => match serde_json::to_string_pretty(&config) {
                    Ok(json) => println!("{json}"),
                    Err(e) => {
                        eprintln!("error: cannot render configuration as JSON: {e}");
                        return ExitCode::from(1);
                    }
                },
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}
