// The run report, by the command the resolution gives both engines (run.report_argv, after
// workflow/scripts/ferry_report.py),
// over the records every step left (failed steps' too): always made, also after failures.
// report.{json,md,html} when the phase is complete, report-incomplete.{json,md,html} otherwise.

process REPORT {
    label 'ferry'
    // Every run of the phase appends its record to the history (--history in report_argv), so
    // the report is never taken from the cache of an earlier run (-resume).
    cache false
    publishDir "${run.run_dir}", mode: 'copy', saveAs: { name -> name.startsWith('run/') ? name.substring(4) : null }
    // The history, with this run's record appended, back to the run root (Ferry.report).
    publishDir "${run.run_root}", mode: 'copy', saveAs: { name -> name.startsWith('history/') ? name.substring(8) : null }

    input:
    val run                                   // run_dir, run_root, report_argv, layout
    path records, stageAs: 'rec*'             // every step's rec directory
    path history, stageAs: Ferry.staged(Ferry.LAYOUT.run_root.history)  // the run root's, from the head
    path started, stageAs: Ferry.staged(Ferry.LAYOUT.run_started)       // this run's start marker

    output:
    path Ferry.reports('json'), emit: json
    path Ferry.reports('md'), emit: md
    path Ferry.reports('html'), emit: html  // beside the .md, by the same command (ferry_html.py)
    // Files, not directories: publishing a directory would replace the run's one (plan/ is PLAN's).
    path "run/{${Ferry.recordDirs(run.layout)}}/**", emit: records, optional: true
    path "history/${run.layout.run_root.history}", emit: history

    script:
    Ferry.report(run, projectDir)

    stub:
    Ferry.report(run, projectDir)
}
