use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;

use super::prune::{Limit, OVER_LIMIT_FIX};
use crate::partition::caps_mode;
use crate::plan::split::{Method, Tool};
use crate::plan::{self, Options, Partitioning, Phase};
use crate::run_dir::LAYOUT;
use crate::same::Compare;

/// `--auto`: each cap is what one transfer job gets through in about ten minutes, so that a
/// job start-up of tens of seconds costs a few percent at most (docs/plan.md, "Partition sizing").
pub const AUTO_MAX_FILES: u64 = 250_000;
pub const AUTO_MAX_BYTES: u64 = 128 << 30;

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// `ferry ls -r` manifest of the source
    pub source_listing: PathBuf,
    /// `ferry ls -r` manifest of the destination (every phase but the baseline)
    pub dest_listing: Option<PathBuf>,
    /// The listings' list jobs (`ferry shard`'s document): each listing names their files with
    /// {shard}
    #[arg(long, value_name = "FILE")]
    pub shards: Option<PathBuf>,
    /// Directory to write the plan into (replaced as a whole when complete)
    #[arg(long)]
    pub out: PathBuf,
    /// baseline copies everything; incremental and final copy what differs (and verify it);
    /// audit copies nothing and verifies everything
    #[arg(long, value_enum)]
    pub phase: Phase,
    /// How the listings tell that a file changed
    #[arg(long, value_enum, default_value = "size-mtime")]
    pub compare: Compare,
    #[command(flatten)]
    pub preserve: crate::commands::args::PreserveArgs,
    /// Leave symlinks out of the plan
    #[arg(long)]
    pub skip_symlinks: bool,
    /// The destination keeps directories' mtimes apart from what they hold (Blob storage's
    /// folder stubs): a directory whose mtime alone differs is planned, as metadata only
    #[arg(long)]
    pub dir_mtimes: bool,
    /// Exactly N parts balanced by size (LPT), fewer if there are fewer files
    #[arg(long, short = 'n', conflicts_with_all = ["max_files", "max_bytes", "auto"])]
    pub parts: Option<usize>,
    /// At most F files per part
    #[arg(long, short = 'f', conflicts_with = "auto")]
    pub max_files: Option<u64>,
    /// Parts of about S bytes: a part closes once it reaches S
    #[arg(long, short = 's', value_parser = crate::units::parse_size, conflicts_with = "auto")]
    pub max_bytes: Option<u64>,
    /// Parts sized so that each job's start-up is amortised (the default)
    #[arg(long)]
    pub auto: bool,
    /// Who cuts the parts: ferry, or Debian's fpart (arbitrary-values mode)
    #[arg(long, value_enum, default_value = "ferry")]
    pub partitioner: Tool,
    /// Judge the final pass's deletions as its prune will, before anything is copied: a plan
    /// that deletes more is refused (exit 1) and written nowhere (prune's --max-delete)
    #[arg(long, value_parser = super::prune::parse_limit)]
    pub max_delete: Option<Limit>,
    /// With --max-delete: a plan past the limit is written all the same
    #[arg(long, requires = "max_delete")]
    pub force: bool,
    /// Plan copies over destination files newer than their source's (refused otherwise:
    /// the sign of swapped SOURCE and DEST); for restoring older versions
    #[arg(long)]
    pub overwrite_newer: bool,
    /// Print plan.json on stdout too
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub sort_memory: crate::commands::args::SortMemory,
}

fn options(args: &PlanArgs) -> anyhow::Result<Options> {
    match (args.phase, &args.dest_listing) {
        (Phase::Baseline, Some(d)) => {
            bail!(
                "--phase baseline copies everything and takes no destination listing (got {})",
                d.display()
            )
        }
        (Phase::Incremental | Phase::Final | Phase::Audit, None) => {
            bail!(
                "--phase {} compares with the destination: give DEST_LISTING",
                args.phase.name()
            )
        }
        _ => {}
    }
    if args.parts == Some(0) || args.max_files == Some(0) || args.max_bytes == Some(0) {
        bail!("--parts, --max-files and --max-bytes must be at least 1");
    }
    let (method, mode) = match (args.parts, args.max_files, args.max_bytes) {
        (Some(n), _, _) => (Method::Parts(n), "parts"),
        (None, None, None) => (
            Method::Auto {
                max_files: AUTO_MAX_FILES,
                max_bytes: AUTO_MAX_BYTES,
            },
            "auto",
        ),
        (None, f, s) => (
            Method::Caps {
                max_files: f,
                max_bytes: s,
            },
            caps_mode(f.is_some(), s.is_some()),
        ),
    };
    let (max_files, max_bytes) = match method {
        Method::Auto {
            max_files,
            max_bytes,
        } => (Some(max_files), Some(max_bytes)),
        _ => (args.max_files, args.max_bytes),
    };
    let files = |l: &PathBuf| crate::shard::listing_files(l, args.shards.as_deref());
    Ok(Options {
        source: files(&args.source_listing)?,
        dest: args.dest_listing.as_ref().map(files).transpose()?,
        phase: args.phase,
        compare: args.compare,
        attrs: crate::same::Attrs {
            dir_times: args.dir_mtimes && args.preserve.preserve.times,
            ..args.preserve.preserve.attrs()
        },
        links: args.preserve.preserve.links,
        skip_symlinks: args.skip_symlinks,
        tool: args.partitioner,
        method,
        partitioning: Partitioning {
            tool: match args.partitioner {
                Tool::Ferry => "ferry",
                Tool::Fpart => "fpart",
            }
            .into(),
            mode: mode.into(),
            parts: args.parts,
            max_files,
            max_bytes,
        },
        // FERRY_PLAN_SORT_MEMORY: the budget's name from when only `plan` had one.
        sort_memory: args.sort_memory.or_env("FERRY_PLAN_SORT_MEMORY")?.budget(),
    })
}

/// The staging directory beside `out`, its name's prefix, and `out`'s parent.
fn staging_of(out: &Path) -> anyhow::Result<(PathBuf, String, PathBuf)> {
    let name = out
        .file_name()
        .with_context(|| format!("--out {}: not a directory name", out.display()))?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let (name, pid) = (name.to_string_lossy(), std::process::id().to_string());
    let staged = |pid: &str| LAYOUT.staged(&LAYOUT.staging.plan, &[("name", &name), ("pid", pid)]);
    Ok((parent.join(staged(&pid)), staged(""), parent))
}

pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let opts = options(&args)?;
    let (staging, prefix, parent) = staging_of(&args.out)?;
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    // Leftovers of an interrupted plan into the same directory.
    for old in std::fs::read_dir(&parent)? {
        let old = old?;
        if old.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_dir_all(old.path())
                .with_context(|| format!("cannot remove {}", old.path().display()))?;
        }
    }
    let result = write_plan(&opts, &staging).and_then(|(doc, text)| {
        let refused = match doc.newer_at_dest.copy_refusal(args.overwrite_newer) {
            Some(why) => Some(format!("the pass's copy would be refused: {why}")),
            None => over_limit(&args, &doc, &staging)?,
        };
        if refused.is_none() {
            replace_dir(&staging, &args.out)?;
        }
        Ok((text, refused))
    });
    if !matches!(result, Ok((_, None))) {
        // A half-written or refused plan must never be mistaken for one.
        let _ = std::fs::remove_dir_all(&staging);
    }
    let (text, refused) = result?;
    if let Some(why) = refused {
        eprintln!("ferry: plan refused: {why}");
        return Ok(ExitCode::from(1));
    }
    if args.json {
        print!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}

fn write_plan(opts: &Options, staging: &Path) -> anyhow::Result<(plan::PlanDoc, String)> {
    let scratch = staging.join(&LAYOUT.staging.plan_scratch);
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("cannot create {}", scratch.display()))?;
    let doc = plan::plan(opts, staging, &scratch)?;
    std::fs::remove_dir_all(&scratch)?;
    let text = format!("{}\n", serde_json::to_string_pretty(&doc)?);
    std::fs::write(staging.join(&LAYOUT.plan_files.plan), &text)?;
    Ok((doc, text))
}

/// Why the final pass this plan describes would have its prune refused, with the first paths
/// that would go (from the plan's delete.tsv in `staging`); None when it would not.
fn over_limit(
    args: &PlanArgs,
    doc: &plan::PlanDoc,
    staging: &Path,
) -> anyhow::Result<Option<String>> {
    let Some(limit) = args.max_delete else {
        return Ok(None);
    };
    if let Some(why) = doc.prune_refusal(&args.out, args.force) {
        return Ok(Some(format!(
            "the final pass's prune would be refused: {why}"
        )));
    }
    let (n, of) = doc.deletions();
    let Some(why) = limit.exceeded(n, of, args.force) else {
        return Ok(None);
    };
    let mut first = Vec::new();
    for e in crate::manifest::Reader::open(&staging.join(&LAYOUT.plan_files.delete))?.take(3) {
        first.push(e.map_err(anyhow::Error::msg)?.display_path());
    }
    Ok(Some(format!(
        "the final pass's prune would be refused: {why} (first: {}); {OVER_LIMIT_FIX}",
        first.join(", ")
    )))
}

/// Puts `staging` in place of `out`: one rename when `out` does not exist, else the old plan is
/// moved aside first and removed after.
fn replace_dir(staging: &Path, out: &Path) -> anyhow::Result<()> {
    if std::fs::symlink_metadata(out).is_ok() {
        let name = staging.file_name().unwrap_or_default().to_string_lossy();
        let aside =
            staging.with_file_name(LAYOUT.staged(&LAYOUT.staging.plan_aside, &[("plan", &name)]));
        std::fs::rename(out, &aside)
            .with_context(|| format!("cannot move the old {} aside", out.display()))?;
        std::fs::rename(staging, out)
            .with_context(|| format!("cannot rename {} to {}", staging.display(), out.display()))?;
        std::fs::remove_dir_all(&aside)
            .with_context(|| format!("cannot remove the old plan {}", aside.display()))?;
    } else {
        std::fs::rename(staging, out)
            .with_context(|| format!("cannot rename {} to {}", staging.display(), out.display()))?;
    }
    Ok(())
}
