import groovy.json.JsonOutput
import groovy.json.JsonSlurper
import java.nio.file.Path
import nextflow.exception.AbortOperationException

/**
 * The pipeline's configuration on the Nextflow side: resolved once by
 * workflow/scripts/ferry_config.py while nextflow.config is read (the code the Snakemake pipeline
 * runs), so both engines read one config file through one schema and run the same commands.
 */
class FerryConfig {

    /** The resolution: {config, run, steps, warnings}; a rejected config stops the run here. */
    static Map resolved(Map params) {
        if (params.ferry_error)
            throw new AbortOperationException(params.ferry_error as String)
        return params.ferry_resolved as Map
    }

    /**
     * A run of the phase begins: its start marker in the run directory (ferry_history.py start,
     * the code Snakemake's onstart runs), so that a run killed before its report is recorded in
     * the migration's history by the next one. Written here, on the head, because tasks run in
     * work directories (or on other machines) that do not see the run directory.
     */
    static void started(Map run, Path projectDir) {
        def pid = ProcessHandle.current().pid()
        def cmd = ['python3', projectDir.resolve('workflow/scripts/ferry_history.py').toString(), 'start',
                   run.dir as String, '--engine', 'nextflow', '--pid', pid as String,
                   '--migration', JsonOutput.toJson(run.migration), '--'] + (run.report_args as List<String>)
        def proc = cmd.execute()
        def out = new StringBuilder(), err = new StringBuilder()
        proc.waitForProcessOutput(out, err)
        // 3: another pass of the migration holds its lock (ferry_lock.py), named in the message.
        if (proc.exitValue() == 3)
            throw new AbortOperationException(err.toString().trim())
        if (err)
            System.err.print(err.toString())
        if (proc.exitValue() != 0)
            System.err.println("ferry: no start marker, a kill of this run would go unrecorded")
    }

    /**
     * After the report: a complete run clears what an earlier failed attempt left in the run
     * directory, by the clean-up the Snakemake pipeline runs too (ferry_run_dir.py); an
     * incomplete one ends the run in an error that names its report.
     */
    static void finish(Path reportJson, Map resolved, Path projectDir) {
        def report = new JsonSlurper().parseText(reportJson.text) as Map
        String runDir = resolved.run.dir
        if (report.status == 'complete') {
            def cmd = ['python3', projectDir.resolve('workflow/scripts/ferry_run_dir.py').toString(),
                       'discard-incomplete', runDir]
            def proc = cmd.execute()
            def out = new StringBuilder(), err = new StringBuilder()
            proc.waitForProcessOutput(out, err)
            if (err)
                System.err.print(err.toString())
            if (proc.exitValue() != 0)
                throw new AbortOperationException("ferry: the run is complete, but what an earlier attempt left in ${runDir} could not be removed")
            ended(reportJson, runDir, projectDir)
            return
        }
        def failures = (report.failures ?: []) as List<Map>
        def first = failures ? failures[0] : null
        def what = first ? "${first.stage}${first.partition != null ? ' partition ' + first.partition : ''}: ${first.error ?: first.reason ?: first.status}" : 'a step did not finish'
        throw new AbortOperationException("ferry: the ${report.phase} phase is incomplete (${failures.size()} failures; first: ${what}); " +
            "see ${runDir}/${resolved.layout.incomplete_report.md}. Run again with -resume to redo only what failed.")
    }

    /** Where the complete pass's report is, and the projection's line (ferry_report.py ended). */
    private static void ended(Path reportJson, String runDir, Path projectDir) {
        def cmd = ['python3', projectDir.resolve('workflow/scripts/ferry_report.py').toString(),
                   'ended', runDir, '--json', reportJson.toString()]
        def proc = cmd.execute()
        def out = new StringBuilder(), err = new StringBuilder()
        proc.waitForProcessOutput(out, err)
        System.out.print(out.toString())
        if (err)
            System.err.print(err.toString())
    }

    /** The run ended by a signal (Ctrl-C): how to resume, in one sentence. */
    static void stopped(String why) {
        if (why in ['SIGINT', 'SIGTERM', 'SIGHUP'])
            System.out.println("ferry: interrupted (${why}); to resume, run the same command again with -resume: " +
                               'the tasks that finished are kept and only the others run.')
    }
}
