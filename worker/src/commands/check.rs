//! `ferry check SOURCE DEST [--state LOC]`: the pre-flight. Everything that can be known of a
//! migration's ends without listing them, asked before a pass lists anything: a wrong path, an
//! impossible container name or a refused key is found in seconds, not after the crawl, and
//! nothing is created on the way (a pass's own steps make the destination).

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::{open, open_options, parse_location};
use crate::commands::args::Common;
use crate::documents::{CheckDoc, CheckResult, Problem, Subject};
use crate::error::StoreError;
use crate::location::Location;
use crate::stats::Stats;
use crate::storage::{OpenOptions, Store};

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The tree to copy: must exist and be readable (a directory, or a container that can be listed)
    pub source: String,
    /// Where it goes: a valid container reachable with the credentials, or a directory that
    /// exists or can be made; it may not exist yet (the copy makes it)
    pub dest: String,
    /// The carried state's location: readable where it holds a state, writable where not
    #[arg(long, value_name = "LOCATION")]
    pub state: Option<String>,
    /// Print the checks as a JSON document (`check` in `ferry schema`) instead of lines
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub common: Common,
}

/// Exit status 0 when every check passed, 1 when one failed (each is printed either way).
pub async fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let opts = open_options(&args.common, 1, Arc::new(Stats::default()));
    let mut checks = vec![
        end(Subject::Source, &args.source, &opts).await,
        end(Subject::Dest, &args.dest, &opts).await,
    ];
    if let Some(state) = &args.state {
        checks.push(end(Subject::State, state, &opts).await);
    }
    checks.extend(apart(&args));
    let doc = CheckDoc {
        version: Default::default(),
        command: "check",
        ok: checks.iter().all(|c| c.problem.is_none()),
        checks,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        for c in &doc.checks {
            let verdict = if c.problem.is_none() { "ok" } else { "FAILED" };
            println!("{:<6} {verdict:<6} {}", c.subject.name(), c.message);
        }
    }
    Ok(if doc.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn result(
    subject: Subject,
    location: &str,
    problem: Option<Problem>,
    message: String,
) -> CheckResult {
    CheckResult {
        subject,
        location: location.to_string(),
        problem,
        message,
    }
}

/// One end (source, destination or state): parsed, then looked at without listing it.
pub async fn end(subject: Subject, arg: &str, opts: &OpenOptions) -> CheckResult {
    let loc = match parse_location(arg) {
        Ok(loc) => loc,
        Err(e) => {
            return result(
                subject,
                &crate::location::shown(arg),
                Some(Problem::Invalid),
                format!("{e:#}"),
            )
        }
    };
    let shown = loc.to_string();
    let (problem, message) = match &loc {
        Location::Local(path) if subject == Subject::Source => readable_dir(path),
        Location::Local(path) => writable_dir(path),
        Location::Blob(_) => match open(&loc, opts) {
            Ok(store) => reachable(subject, &*store).await,
            Err(e) => (Some(Problem::Credentials), format!("{e:#}")),
        },
    };
    if problem.is_none() && subject == Subject::State {
        if let Some(why) = state_unreadable(&loc, opts).await {
            return result(subject, &shown, Some(Problem::Unreadable), why);
        }
    }
    result(subject, &shown, problem, message)
}

/// The source, local: a directory that can be opened and read (one entry is enough).
fn readable_dir(path: &Path) -> (Option<Problem>, String) {
    let at = path.display();
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return (Some(Problem::Missing), format!("{at} does not exist"))
        }
        Err(e) => return (Some(Problem::Unreadable), format!("{at}: {e}")),
        Ok(md) if !md.is_dir() => {
            return (
                Some(Problem::NotADirectory),
                format!("{at} is not a directory"),
            )
        }
        Ok(_) => {}
    }
    match std::fs::read_dir(path).map(|mut rd| rd.next().transpose()) {
        Ok(Ok(_)) => (None, format!("{at}: a directory ferry can read")),
        Ok(Err(e)) | Err(e) => (
            Some(Problem::Unreadable),
            format!("{at} cannot be read: {e}"),
        ),
    }
}

/// The destination or the state, local: a directory ferry can write in, or, where it does not
/// exist yet, one that ferry can make (its nearest existing ancestor a directory it can write).
fn writable_dir(path: &Path) -> (Option<Problem>, String) {
    let at = path.display();
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let Some(existing) = absolute.ancestors().find(|a| a.symlink_metadata().is_ok()) else {
        return (
            Some(Problem::NotWritable),
            format!("{at}: no part of it exists"),
        );
    };
    let existing = existing.to_path_buf();
    if !existing.is_dir() {
        let what = if existing == absolute {
            "it"
        } else {
            "its parent"
        };
        return (
            Some(Problem::NotADirectory),
            format!("{at}: {what} {} is not a directory", existing.display()),
        );
    }
    if !can_write(&existing) {
        return (
            Some(Problem::NotWritable),
            format!("{at}: ferry may not write in {}", existing.display()),
        );
    }
    if existing == absolute {
        (None, format!("{at}: a directory ferry can write in"))
    } else {
        (
            None,
            format!(
                "{at} does not exist yet: the pass makes it in {}",
                existing.display()
            ),
        )
    }
}

fn can_write(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// A Blob end: one List Blobs request of one result. A container that does not exist is an
/// error for the source only: the destination's and the state's are made by the pass.
async fn reachable(subject: Subject, store: &dyn Store) -> (Option<Problem>, String) {
    let at = store.describe();
    match store.list_dir_sample(b"", 1).await {
        Ok(_) => (None, format!("{at}: reachable with the credentials")),
        Err(StoreError::RootNotFound(_)) if subject != Subject::Source => (
            None,
            format!("{at}: the container does not exist yet: the pass makes it"),
        ),
        Err(StoreError::RootNotFound(_)) => (
            Some(Problem::Missing),
            format!("{at}: the container does not exist"),
        ),
        Err(
            e @ (StoreError::Http {
                status: 401 | 403, ..
            }
            | StoreError::Auth(_)),
        ) => (
            Some(Problem::Credentials),
            format!("{at}: the credentials were refused ({e})"),
        ),
        Err(e) => (
            Some(Problem::Unreachable),
            format!("{at}: cannot be reached ({e})"),
        ),
    }
}

/// The carried state, where there is one, must be readable: a pass that cannot read it would
/// list the destination afresh (hours at scale) when the operator meant it carried.
async fn state_unreadable(loc: &Location, opts: &OpenOptions) -> Option<String> {
    let state = crate::carried::State::new(open(loc, opts).ok()?);
    match state.doc().await {
        Ok(_) => None,
        // No container yet: no state yet, which the first pass writes.
        Err(e) if matches!(e.downcast_ref(), Some(StoreError::RootNotFound(_))) => None,
        Err(e) => Some(format!("the carried state cannot be read: {e:#}")),
    }
}

/// The ends apart: a destination inside the source (or the reverse) would copy into itself and
/// prune the source; a state inside the destination would be copied over and pruned.
fn apart(args: &CheckArgs) -> Vec<CheckResult> {
    let parse = |a: &str| parse_location(a).ok();
    let (Some(src), Some(dst)) = (parse(&args.source), parse(&args.dest)) else {
        return vec![];
    };
    let mut out = vec![];
    if let Err(e) = crate::overlap::refuse(&src, &dst) {
        out.push(result(
            Subject::Dest,
            &dst.to_string(),
            Some(Problem::Overlap),
            format!("{e:#}"),
        ));
    }
    if let Some(state) = args.state.as_deref().and_then(parse) {
        if let Err(e) = crate::overlap::refuse(&dst, &state) {
            let why = format!("the carried state must be kept outside the destination: {e:#}");
            out.push(result(
                Subject::State,
                &state.to_string(),
                Some(Problem::Overlap),
                why,
            ));
        }
    }
    out
}
