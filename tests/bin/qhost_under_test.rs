//! The `qhost` command, built by `cargo test` for the end-to-end tests to run.

fn main() -> std::process::ExitCode {
    qhost_cli::main()
}
