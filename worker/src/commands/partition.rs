use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;

use crate::manifest::{self, Entry, Kind, Writer};
use crate::partition::{
    caps_mode, distribute, imbalance_pct, lpt, write_summary, Filler, PartTotals as Part,
    PartWriter,
};
use crate::run_dir::LAYOUT;
use crate::sorted::sort::{Order, Sorter};

#[derive(Args, Debug)]
pub struct PartitionArgs {
    /// A manifest (`ferry ls` output) or fpart output ("-" for stdin)
    pub manifest: PathBuf,
    /// Directory for part-NNNNN.tsv, dirs.tsv and summary.json
    #[arg(long)]
    pub out: PathBuf,
    /// Exactly N parts balanced by size (LPT); like fpart -n
    #[arg(long, short = 'n')]
    pub parts: Option<usize>,
    /// At most F files per part, in input order (fpart -L -f)
    #[arg(long, short = 'f')]
    pub max_files: Option<u64>,
    /// Parts of about S bytes, in input order: a part closes once it reaches S (fpart -L -s)
    #[arg(long, short = 's', value_parser = crate::units::parse_size)]
    pub max_bytes: Option<u64>,
    /// With --parts: a cost per file, counted beside its bytes when balancing, so that many
    /// small files weigh like the requests they take (e.g. 256KiB)
    #[arg(long, value_name = "SIZE", value_parser = crate::units::parse_size)]
    pub file_weight: Option<u64>,
    /// Print the summary on stdout too
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub sort_memory: crate::commands::args::SortMemory,
}

/// The size LPT sorts and deals `e` by: its bytes plus the per-file weight. A constant added to
/// every size keeps their order, and `unweighed` takes it off before the entry is written, so
/// parts and summary carry the real sizes.
fn weighed(mut e: Entry, weight: u64) -> anyhow::Result<Entry> {
    let size = e.size();
    e.size = Some(
        size.checked_add(weight)
            .with_context(|| format!("{}: size plus --file-weight overflows", e.display_path()))?,
    );
    Ok(e)
}

fn unweighed(mut e: Entry, weight: u64) -> Entry {
    e.size = e.size.map(|s| s - weight);
    e
}

fn entries(path: &Path) -> anyhow::Result<Box<dyn Iterator<Item = Result<Entry, String>>>> {
    if path.as_os_str() == "-" {
        let stdin = std::io::BufReader::new(std::io::stdin());
        return Ok(Box::new(manifest::Reader::new(stdin, "stdin".into())));
    }
    Ok(Box::new(manifest::Reader::open(path)?))
}

pub fn run(args: PartitionArgs) -> anyhow::Result<ExitCode> {
    let result = split(&args);
    if result.is_err() {
        // Half a set of parts must not be mistaken for a whole one by the next step.
        let _ = remove_outputs(&args.out);
    }
    result
}

fn remove_outputs(out: &Path) -> anyhow::Result<()> {
    for old in std::fs::read_dir(out)? {
        let old = old?.file_name();
        let name = old.to_string_lossy();
        if name.starts_with(&LAYOUT.staged(&LAYOUT.staging.sort, &[("pid", "")])) {
            std::fs::remove_dir_all(out.join(&old))?;
            continue;
        }
        if LAYOUT.is_part_file(&name) || name == LAYOUT.parts.dirs || name == LAYOUT.parts.summary {
            std::fs::remove_file(out.join(&old))?;
        }
    }
    Ok(())
}

/// How to split, refused where fpart would refuse it.
fn refuse_unsplittable(args: &PartitionArgs) -> anyhow::Result<()> {
    // The same refusals as fpart: -n stands alone; -f and -s combine.
    if args.parts.is_some() && (args.max_files.is_some() || args.max_bytes.is_some()) {
        bail!("--parts cannot be combined with --max-files or --max-bytes (as fpart's -n cannot with -f or -s)");
    }
    if args.parts.is_none() && args.max_files.is_none() && args.max_bytes.is_none() {
        bail!("say how to split: --parts N, or --max-files F and/or --max-bytes S");
    }
    if args.file_weight.is_some() && args.parts.is_none() {
        bail!(
            "--file-weight balances --parts; --max-files and --max-bytes fill parts in input order"
        );
    }
    if args.parts == Some(0) || args.max_files == Some(0) || args.max_bytes == Some(0) {
        bail!("--parts, --max-files and --max-bytes must be at least 1");
    }
    Ok(())
}

/// The summary (written, and with --json printed) and a line on stderr.
fn tell(args: &PartitionArgs, mode: &str, parts: &[Part], dir_count: u64) -> anyhow::Result<()> {
    let loads: Vec<u64> = parts.iter().map(|p| p.bytes).collect();
    let text = write_summary(&args.out, mode, parts, dir_count)?;
    if args.json {
        println!("{text}");
    }
    if parts.is_empty() {
        eprintln!("no files in {}: wrote zero parts", args.manifest.display());
    } else {
        eprintln!(
            "wrote {} parts to {} (imbalance {:.2}%)",
            parts.len(),
            args.out.display(),
            imbalance_pct(&loads)
        );
    }
    Ok(())
}

fn split(args: &PartitionArgs) -> anyhow::Result<ExitCode> {
    refuse_unsplittable(args)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    // Stale parts of an earlier run would otherwise be picked up as if they were this run's.
    remove_outputs(&args.out)?;

    // Sizes decide --parts and --max-bytes; fpart's bare paths have none, and guessing zero
    // would put everything in one part.
    let needs_sizes = args.parts.is_some() || args.max_bytes.is_some();
    let sized = |e: &Entry| -> anyhow::Result<()> {
        if needs_sizes && e.size.is_none() {
            bail!(
                "{}: no size (a bare path, as fpart writes): --parts and --max-bytes need sizes; list the tree with `ferry ls -r`, or split by --max-files",
                e.display_path()
            );
        }
        Ok(())
    };
    let mut dirs: Option<Writer<BufWriter<File>>> = None;
    let mut dir_count = 0u64;
    let mut note_dir = |e: &Entry, out: &Path| -> anyhow::Result<()> {
        if dirs.is_none() {
            dirs = Some(Writer::new(BufWriter::new(File::create(
                out.join(&LAYOUT.parts.dirs),
            )?))?);
        }
        dirs.as_mut().unwrap().write(e)?;
        dir_count += 1;
        Ok(())
    };
    let mut parts: Vec<Part> = Vec::new();
    let mode;
    if let Some(n) = args.parts {
        mode = "parts";
        // LPT wants the entries largest first: an external sort keeps memory bounded.
        let pid = std::process::id().to_string();
        let scratch = args
            .out
            .join(LAYOUT.staged(&LAYOUT.staging.sort, &[("pid", &pid)]));
        std::fs::create_dir_all(&scratch)?;
        let weight = args.file_weight.unwrap_or(0);
        let mut sorter = Sorter::new(
            Order::SizeDesc,
            args.sort_memory.budget(),
            scratch.clone(),
            "parts",
        );
        let mut files = 0u64;
        for e in entries(&args.manifest)? {
            let e = e.map_err(anyhow::Error::msg)?;
            if e.kind == Kind::Dir {
                note_dir(&e, &args.out)?;
            } else {
                sized(&e)?;
                sorter.push(&weighed(e, weight)?)?;
                files += 1;
            }
        }
        let runs = sorter.finish()?;
        if files > 0 {
            parts = distribute(&args.out, n, || {
                Ok(lpt(runs.merge()?, n)
                    .map(|item| item.map(|(e, bin)| (unweighed(e, weight), bin))))
            })?;
        }
        drop(runs);
        std::fs::remove_dir_all(&scratch)?;
    } else {
        mode = caps_mode(args.max_files.is_some(), args.max_bytes.is_some());
        let mut filler = Filler::new(args.max_files, args.max_bytes);
        let mut writer = PartWriter::new(&args.out);
        for e in entries(&args.manifest)? {
            let e = e.map_err(anyhow::Error::msg)?;
            if e.kind == Kind::Dir {
                note_dir(&e, &args.out)?;
                continue;
            }
            sized(&e)?;
            if filler.add(e.size()) {
                writer.next_part()?;
            }
            writer.write(&e)?;
        }
        parts = writer.finish()?;
    }
    if let Some(w) = dirs {
        w.finish()?;
    }

    tell(args, mode, &parts, dir_count)?;
    Ok(ExitCode::SUCCESS)
}
