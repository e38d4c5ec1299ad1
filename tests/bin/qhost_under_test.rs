//! The `qhost` command, built by `cargo test` for the end-to-end tests to run. A test may set
//! `QHOST_TEST_CLOCK_OFFSET_MS` to run a host whose clock (as schedules read it) is that far
//! ahead, or behind: the test-only clock offset no release build has.

fn main() -> std::process::ExitCode {
    if let Some(ms) = std::env::var("QHOST_TEST_CLOCK_OFFSET_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        qhost::testing::offset_schedule_clock(ms);
    }
    qhost_cli::main()
}
