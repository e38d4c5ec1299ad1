//! The `qhost` command (see the `qhost-cli` library).

fn main() -> std::process::ExitCode {
    qhost_cli::main()
}
