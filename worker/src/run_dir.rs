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

#[derive(Debug, Deserialize)]
pub struct Layout {
    pub steps: BTreeMap<String, StepRecords>,
    pub plan: String,
    pub report: ReportNames,
    pub incomplete_report: ReportNames,
    /// The engine's marker that a run of the phase began (ferry_history.start).
    pub run_started: String,
    pub run_root: RunRoot,
}

pub static LAYOUT: LazyLock<Layout> = LazyLock::new(|| {
    serde_json::from_str(DEFINITION).expect("workflow/scripts/run_dir.json is the layout")
});

impl Layout {
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
        pattern
            .as_deref()
            .map(|p| dir.join(p.replace("{part}", part)))
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
        assert!(LAYOUT.plan.ends_with(".json"));
    }
}
