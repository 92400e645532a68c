//! ferry: the transfer worker. See docs/worker.md.

mod carried;
mod cli;
mod commands;
mod depth;
mod documents;
mod engine;
mod error;
mod filter;
mod hash;
mod jsonfile;
mod keyspace;
mod location;
mod manifest;
mod newer;
mod overlap;
mod partition;
mod plan;
mod preserve;
mod progress;
mod retry;
mod run_dir;
mod same;
mod shadowed;
mod shard;
mod sorted;
mod sparse;
mod stats;
mod storage;
mod throttle;
mod units;
mod xattrs;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // A fixed mmap threshold: glibc's sliding one let buffers freed on another thread than the
    // one that allocated them collect in per-thread arenas (RSS tripled in the download
    // benchmark). At 8 MiB, the HTTP client's receive buffers (up to ~400 KiB, a new one for
    // nearly every read) come from the heap instead of fresh mappings whose every page faults;
    // block buffers are pooled (storage/bufpool.rs), and RSS stays bounded by the memory budget.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 8 << 20);
    }
    storage::filesystem::raise_open_files_limit();
    // The Azure SDK builds error values in its normal flow (a header a policy looks for and
    // does not find, on every request), and each captures a stack trace when RUST_BACKTRACE
    // is set: a stack walk per request. Library backtraces stay off unless asked for by
    // name; a panic still prints its trace under RUST_BACKTRACE.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: no other thread exists yet.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    let cli = cli::Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
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
            Check(a) => commands::check::run(a).await,
            Partition(a) => commands::partition::run(a),
            Plan(a) => commands::plan::run(a),
            Verify(a) => commands::verify::run(a).await,
            Prune(a) => commands::prune::run(a).await,
            Carry(a) => commands::carry::run(a).await,
            Shard(a) => commands::shard::run(a).await,
            Names(a) => commands::names::run(a).await,
            Units(a) => commands::units::run(a),
            Expand(a) => commands::expand::run(a),
            Status(a) => commands::status::run(a),
            Lease(a) => commands::lease::run(a).await,
            Schema => {
                print!("{}", documents::schema_text());
                Ok(std::process::ExitCode::SUCCESS)
            }
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
