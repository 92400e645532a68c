//! ferry: the transfer worker. See docs/worker.md.

mod cli;
mod commands;
mod depth;
mod engine;
mod error;
mod filter;
mod localcopy;
mod location;
mod manifest;
mod partition;
mod plan;
mod progress;
mod retry;
mod sorted;
mod stats;
mod storage;
mod throttle;
mod units;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Block buffers are often freed on another thread than the one that allocated them. With
    // glibc's sliding mmap threshold they then collect in per-thread arenas (RSS tripled in the
    // download benchmark); a fixed threshold hands every large buffer back to the OS on free.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
    let cli = cli::Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ferry: error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = rt.block_on(async move {
        use cli::Command::*;
        match cli.command {
            Ls(a) => commands::ls::run(a).await,
            Copy(a) => commands::copy::run(a).await,
            Rm(a) => commands::rm::run(a).await,
            Mk(a) => commands::mk::run(a).await,
            Env(a) => commands::env::run(a).await,
            Partition(a) => commands::partition::run(a),
            Plan(a) => commands::plan::run(a),
            Verify(a) => commands::verify::run(a).await,
            Prune(a) => commands::prune::run(a).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferry: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
