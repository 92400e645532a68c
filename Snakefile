# ferry migration pipeline: (shard ->) list -> plan (checkpoint) -> copy per partition -> verify per
# partition -> (final) prune -> final check -> report. See docs/pipeline.md; the steps' names in
# every layer: docs/design/layout.md.
#
#   snakemake --profile profiles/local --config source=SRC dest=DST phase=baseline|incremental|final
#
# The MPI replication is a separate target (docs/replicate.md):
#   snakemake replicate --profile profiles/local --config 'replicate={source: SRC, dest: DIR}'

import atexit
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


# Partition ids are the zero-padded numbers of `ferry plan`'s part files; list jobs are
# numbered from 1 (list.jobs > 1).
wildcard_constraints:
    part=r"\d+",
    shard=r"\d+",


include: "workflow/rules/common.smk"


# Every file of workflow/rules/ holds the rules of one or a few steps, and all are included: a new
# step's file needs no line here. common.smk, above, defines what the others use.
for rules in sorted(Path(workflow.basedir, "workflow", "rules").glob("*.smk")):
    if rules.name != "common.smk":

        include: str(rules)


# The report reads a few JSON files: not worth a cluster job's start-up.
localrules:
    all,
    report,


rule all:
    default_target: True
    input:
        migration_report,
    message:
        "ferry: every step of the pass is done"


onstart:
    # Not on --dry-run, nor when nothing is to be done: a run of the phase begins, once its
    # pre-flight passed and its lock is taken. Its marker lets the next run record it as killed
    # should it end before its report (ferry_history.py).
    if any(job.rule.name == "report" for job in workflow.dag.needrun_jobs()):
        ferry_history.start(
            RUN,
            "snakemake",
            RUN_INFO["report_args"],
            migration=RUN_INFO["migration"],
            hold=True,
            lease=RUN_INFO["lease"],
            check=RUN_INFO["check"],
        )


onsuccess:
    ferry_run_dir.discard_incomplete(RUN)
    for _line in ferry_report.ended(RUN):
        print(_line, file=sys.stderr)


onerror:
    ferry_report.write_incomplete(RUN, RUN_INFO["report_args"])
    if INTERRUPTED:
        # The last words, after Snakemake's own (hence at exit).
        atexit.register(
            print,
            "ferry: interrupted; to resume, run the same command again: the steps that "
            "finished are kept and only the others run.",
            file=sys.stderr,
        )
