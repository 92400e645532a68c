//! The run directory's layout, compiled in from its one definition (workflow/scripts/run_dir.json,
//! which the pipeline's scripts and both engines read too), so `ferry status` finds each file
//! where the steps leave it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use serde::Deserialize;

const DEFINITION: &str = include_str!("../../workflow/scripts/run_dir.json");

/// Where one step leaves its records; `{part}` stands for a plan partition's id.
#[derive(Debug, Deserialize)]
pub struct StepRecords {
    pub out: Option<String>,
    pub log: Option<String>,
    pub failed: Option<String>,
    pub progress: Option<String>,
    /// A list step's records when several list jobs take its side (`{shard}`: 1 to jobs).
    pub sharded: Option<ShardedRecords>,
}

#[derive(Debug, Deserialize)]
pub struct ShardedRecords {
    pub out: String,
}

#[derive(Debug, Deserialize)]
pub struct ReportNames {
    pub json: String,
}

/// The files of the run root (`<outdir>/<run_name>`), beside its phases' run directories.
#[derive(Debug, Deserialize)]
pub struct RunRoot {
    pub history: String,
    pub migration: String,
    pub lock: String,
    /// A lock whose holder on another host has not beaten its heartbeat for this long is left
    /// by a pass that is gone (ferry_lock.py beats every tenth of it).
    pub lock_stale_after_seconds: f64,
}

/// One set of parts, as `ferry partition --out DIR` writes it and `ferry plan` each of its
/// parts' folders: names relative to DIR.
#[derive(Debug, Deserialize)]
pub struct Parts {
    /// A part's file; `{part}` stands for its id, its index written with `part_digits` digits.
    pub part: String,
    pub part_digits: usize,
    pub dirs: String,
    pub summary: String,
}

/// The folders of the plan's sets of parts, in the plan directory.
#[derive(Debug, Deserialize)]
pub struct PlanParts {
    pub copy: String,
    pub verify: String,
    pub prune: String,
}

/// The plan directory's inside, as `ferry plan --out DIR` writes it: names relative to DIR.
#[derive(Debug, Deserialize)]
pub struct PlanFiles {
    pub plan: String,
    pub parts: PlanParts,
    pub delete: String,
    /// In the prune parts' folder, beside their `dirs`.
    pub touched: String,
}

/// What is made under another name until it is whole, then renamed into place.
#[derive(Debug, Deserialize)]
pub struct Staging {
    /// A new plan beside `ferry plan --out DIR`: `{name}` DIR's name, `{pid}` the process's id.
    pub plan: String,
    pub plan_scratch: String,
    /// The old plan while the new one takes its place: `{plan}` the new one's staging name.
    pub plan_aside: String,
    /// `ferry partition`'s sort scratch in its --out.
    pub sort: String,
}

#[derive(Debug, Deserialize)]
pub struct Layout {
    pub steps: BTreeMap<String, StepRecords>,
    pub plan_dir: String,
    pub plan_files: PlanFiles,
    pub staging: Staging,
    pub parts: Parts,
    pub report: ReportNames,
    pub incomplete_report: ReportNames,
    /// The engine's marker that a run of the phase began (ferry_history.start).
    pub run_started: String,
    pub run_root: RunRoot,
}

pub static LAYOUT: LazyLock<Layout> = LazyLock::new(|| {
    serde_json::from_str(DEFINITION).expect("workflow/scripts/run_dir.json is the layout")
});

/// A placeholder of a pattern that was given no value.
#[derive(Debug, thiserror::Error)]
#[error("no value for {{{name}}} in {pattern:?}")]
pub struct MissingValue {
    pub name: String,
    pub pattern: String,
}

/// The pattern with each `{name}` (a letter or `_`, then letters, digits or `_`) replaced by its
/// value, put in as it is (never expanded again); any other brace stays as written; a name
/// without a value is an error. run_dir.json's `placeholders`: ferry_run_dir.expand and
/// Ferry.expand are the same rule.
pub fn expand(pattern: &str, values: &[(&str, &str)]) -> Result<String, MissingValue> {
    let mut out = String::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let name = after.find('}').map(|close| &after[..close]);
        match name.filter(|n| is_name(n)) {
            Some(name) => {
                let value =
                    values
                        .iter()
                        .find(|(n, _)| *n == name)
                        .ok_or_else(|| MissingValue {
                            name: name.to_string(),
                            pattern: pattern.to_string(),
                        })?;
                out.push_str(value.1);
                rest = &after[name.len() + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Layout {
    /// A staging name of `pattern` (`staging`'s) for this process; with `pid` empty, the prefix
    /// every process's name of it starts with (what a later run clears as a leftover).
    pub fn staged(&self, pattern: &str, values: &[(&str, &str)]) -> String {
        expand(pattern, values).expect("run_dir.json's staging names take the values given")
    }

    /// The plan's document, relative to the run directory.
    pub fn plan(&self) -> PathBuf {
        Path::new(&self.plan_dir).join(&self.plan_files.plan)
    }

    /// The id of part `i` of a set of parts (its name's `{part}`, and its id in plan.json).
    pub fn part_id(&self, i: usize) -> String {
        format!("{i:0width$}", width = self.parts.part_digits)
    }

    /// The file of part `i` of a set of parts.
    pub fn part_file(&self, i: usize) -> String {
        self.part_file_of(&self.part_id(i))
    }

    /// The file of the part whose id is `id`.
    pub fn part_file_of(&self, id: &str) -> String {
        expand(&self.parts.part, &[("part", id)]).expect("the parts' pattern has only {part}")
    }

    /// Whether `name` is a part's file, whatever its id.
    pub fn is_part_file(&self, name: &str) -> bool {
        let (head, tail) = self
            .parts
            .part
            .split_once("{part}")
            .expect("the parts' pattern has {part}");
        name.len() > head.len() + tail.len() && name.starts_with(head) && name.ends_with(tail)
    }

    /// The record of `kind` that `step` leaves for partition `part`, under `dir`; None when the
    /// step leaves no such record.
    pub fn record(&self, dir: &Path, step: &str, kind: Kind, part: &str) -> Option<PathBuf> {
        let rec = self.steps.get(step)?;
        let pattern = match kind {
            Kind::Out => &rec.out,
            Kind::Log => &rec.log,
            Kind::Failed => &rec.failed,
            Kind::Progress => &rec.progress,
        };
        let pattern = pattern.as_deref()?;
        let path = expand(pattern, &[("part", part)]).expect("a step's records have only {part}");
        Some(dir.join(path))
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Out,
    Log,
    Failed,
    Progress,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_definition_names_every_record_status_reads() {
        for step in ["copy", "verify"] {
            for kind in [Kind::Out, Kind::Failed, Kind::Progress] {
                let path = LAYOUT.record(Path::new("run"), step, kind, "00001");
                assert!(path.is_some_and(|p| p.to_string_lossy().contains("00001")));
            }
        }
        assert!(LAYOUT.plan().starts_with(&LAYOUT.plan_dir));
    }

    /// The cases the scripts and the Nextflow pipeline are held to as well
    /// (tests/scripts/test_run_dir.py runs the three over them).
    #[test]
    fn expands_as_the_shared_cases_say() {
        let cases: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/scripts/run_dir_cases.json")).unwrap();
        for case in cases["expand"].as_array().unwrap() {
            let values: Vec<(&str, &str)> = case["values"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap()))
                .collect();
            let got = expand(case["pattern"].as_str().unwrap(), &values).ok();
            assert_eq!(got.as_deref(), case["out"].as_str(), "{case}");
        }
    }

    #[test]
    fn parts_are_named_by_their_id() {
        let name = LAYOUT.part_file(7);
        assert!(name.contains(&LAYOUT.part_id(7)) && LAYOUT.is_part_file(&name));
        assert!(!LAYOUT.is_part_file(&LAYOUT.parts.dirs));
    }
}
