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
     * A run of the phase begins, once its pre-flight passed and its lock is taken: its start
     * marker in the run directory (ferry_history.py start, the code Snakemake's onstart runs),
     * so that a run killed before its report is recorded in the migration's history by the next
     * one. Written here, on the head, because tasks run in
     * work directories (or on other machines) that do not see the run directory.
     */
    static void started(Map run, Path projectDir, boolean stubRun = false) {
        def pid = ProcessHandle.current().pid()
        // A -stub-run touches no storage: its ends need not exist, and go unchecked.
        def check = stubRun ? [] : ['--check', JsonOutput.toJson(run.check)]
        def cmd = ['python3', projectDir.resolve('workflow/scripts/ferry_history.py').toString(), 'start',
                   run.dir as String, '--engine', 'nextflow', '--pid', pid as String,
                   '--migration', JsonOutput.toJson(run.migration)] + check +
                  (run.lease && !stubRun ? ['--lease', JsonOutput.toJson(run.lease)] : []) +
                  ['--'] + (run.report_args as List<String>)
        def proc = cmd.execute()
        def out = new StringBuilder(), err = new StringBuilder()
        proc.waitForProcessOutput(out, err)
        // 2: the pre-flight refused the config (ferry_preflight.py); 3: another pass of the
        // migration holds its lock (ferry_lock.py). Each message names what to change.
        // The line break keeps Nextflow's "-- Check script …" off the message's last sentence.
        if (proc.exitValue() in [2, 3])
            throw new AbortOperationException(err.toString().trim() + '\n')
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
        def status = field(report, 'status', reportJson)
        if (!(status in states(projectDir, 'phase')))
            throw new AbortOperationException("ferry: ${reportJson}: status '${status}' is none of the worker's phase states")
        if (status == 'complete') {
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
        def failures = field(report, 'failures', reportJson) as List<Map>
        def first = failures ? failures[0] : null
        def what = first ? "${first.stage}${first.partition != null ? ' partition ' + first.partition : ''}: ${first.error ?: first.reason ?: first.status}" : 'a step did not finish'
        // A step refused by the config (its message in config terms, ferry_task.in_config_terms)
        // fails again on any re-run until the config changes: -resume is no remedy for it.
        def refused = failures.any { (it.error ?: '').toString().contains("(in the pipeline's config)") }
        def next = refused ? 'Change the config as the failure says, then run the pass again.' :
            'Run again with -resume to redo only what failed.'
        throw new AbortOperationException("ferry: the ${field(report, 'phase', reportJson)} phase is incomplete (${failures.size()} failures; first: ${what}); " +
            "see ${runDir}/${resolved.layout.incomplete_report.md}. ${next}")
    }

    /**
     * A key of the report (written and checked against workflow/schemas/report.schema.json by
     * ferry_report.py): one missing is an error naming the file and the key, never a default.
     */
    private static Object field(Map report, String key, Path file) {
        if (!report.containsKey(key))
            throw new AbortOperationException("ferry: ${file}: no '${key}': not a ferry report (workflow/schemas/report.schema.json)")
        return report[key]
    }

    /** The worker's words for a job's, a phase's or an engine's state: the one vocabulary,
     *  generated from worker/src/documents.rs into the documents' schema (`states`). */
    static List<String> states(Path projectDir, String of) {
        def schema = projectDir.resolve('workflow/scripts/worker-documents.schema.json').toFile()
        return ((new JsonSlurper().parse(schema) as Map).states as Map)[of] as List<String>
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
