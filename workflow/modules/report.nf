// The run report, by the same command as the Snakemake pipeline's (workflow/scripts/ferry_report.py),
// over the records every step left (failed steps' too): always made, also after failures.
// report.{json,md} when the phase is complete, report-incomplete.{json,md} otherwise.

process REPORT {
    label 'ferry_report'
    publishDir "${run.run_dir}", mode: 'copy', saveAs: { name -> name.startsWith('run/') ? name.substring(4) : name }

    input:
    val run                                   // run_dir, run_name, phase, redacted locations, checksum, final_check
    path records, stageAs: 'rec*'             // every step's rec directory

    output:
    path 'run/report*.json', emit: json
    path 'run/report*.md', emit: md
    // Files, not directories: publishing a directory would replace the run's one (plan/ is PLAN's).
    path 'run/{copy,verify,prune,failed,logs,benchmarks}/**', emit: records, optional: true

    script:
    def flags = (run.checksum ? ' --checksum' : '') + (run.final_check ? ' --final-check' : '')
    """
    mkdir run
    for rec in rec*; do cp -RLp "\$rec/." run/; done
    python3 "\${FERRY_SCRIPTS:-${projectDir}/workflow/scripts}/ferry_report.py" build run \\
        --run-name ${Ferry.q(run.run_name)} --phase ${run.phase} \\
        --source ${Ferry.q(run.source_redacted)} --dest ${Ferry.q(run.dest_redacted)}${flags} --by-status
    """

    stub:
    """
    mkdir run
    echo '{"status": "complete"}' > run/report.json
    echo '# stub report' > run/report.md
    """
}
