//! `qhost run`: the host until a signal (or, with `--until-idle`, until every queue is empty),
//! then its summary.

use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use qhost::{AdminServer, Config, Host, Traces};

/// How long a second signal's release may take before the process exits regardless.
pub(crate) const FORCED_EXIT: Duration = Duration::from_secs(5);

/// The exit code of `run --fail-on-dead-letter` when a message was dead-lettered.
pub(crate) const DEAD_LETTERED: u8 = 6;

/// Runs the host; returns how many messages it dead-lettered.
pub(crate) async fn run(config: Config, until_idle: bool) -> anyhow::Result<u64> {
    // Listen first: a SIGTERM while plugins compile must still mean "stop cleanly".
    let (shutdown, abandon) = (CancellationToken::new(), CancellationToken::new());
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    tokio::spawn(on_signals(term, shutdown.clone(), abandon.clone()));
    // Bound before the plugins load: a port in use fails at once, and probes get answers
    // (live, not ready) while plugins compile.
    let admin = match config.admin_listen {
        Some(addr) => match AdminServer::start(addr).await {
            Ok(admin) => Some(admin),
            // A run until idle is a job, not a service: the default port taken (by a running
            // qhost, say) does not stop it. An address asked for still must be had.
            Err(e) if until_idle && e.is_in_use() && is_default(addr) => {
                tracing::warn!(%addr, "the console's default address is in use; this run until idle serves no console (--admin-listen picks another)");
                None
            }
            Err(e) => return Err(e.into()),
        },
        None => None,
    };
    let traces = Traces::from_env()?;
    if let Some(traces) = &traces {
        tracing::info!(endpoint = traces.endpoint(), "exporting traces over OTLP");
    }
    let mut host = Host::from_config(config).await?.abandon_on(abandon);
    if let Some(traces) = &traces {
        host = host.traced_by(traces.tracer());
    }
    if let Some(admin) = &admin {
        admin.serve_host(host.admin_view());
    }
    let ran = if until_idle {
        host.run_until_idle(shutdown).await
    } else {
        host.run(shutdown).await
    };
    // The last spans go out even when the run failed: they are what explains it.
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
    ran?;
    println!("{}", host.stats());
    Ok(host.stats().total().dead_lettered)
}

/// Whether `addr` is the admin listener's default address.
fn is_default(addr: std::net::SocketAddr) -> bool {
    qhost::DEFAULT_ADMIN_LISTEN.parse() == Ok(addr)
}

/// The first SIGINT or SIGTERM starts an orderly shutdown; a second releases unfinished
/// messages at once and, should even that hang, exits after [`FORCED_EXIT`].
pub(crate) async fn on_signals(
    mut term: tokio::signal::unix::Signal,
    shutdown: CancellationToken,
    abandon: CancellationToken,
) {
    let mut signal = async || {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    signal().await;
    tracing::info!("shutting down: finishing in-flight messages (signal again to stop now)");
    shutdown.cancel();
    signal().await;
    tracing::warn!("second signal: releasing unfinished messages and exiting");
    abandon.cancel();
    tokio::time::sleep(FORCED_EXIT).await;
    tracing::error!(after = ?FORCED_EXIT, "release did not finish; exiting anyway");
    std::process::exit(130);
}
