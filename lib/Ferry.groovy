import groovy.json.JsonOutput
import java.nio.file.Files
import java.nio.file.Path
import java.util.concurrent.ConcurrentLinkedQueue

/**
 * Helpers of the Nextflow pipeline that processes and the workflow share.
 */
class Ferry {

    // Records (the `rec` directory of docs/pipeline.md's layout) of tasks that failed for good:
    // the report reads them to say what went wrong.
    private static final Queue<Path> FAILED = new ConcurrentLinkedQueue<Path>()

    /**
     * errorStrategy of every ferry step: Snakemake's `retries`, exactly. A failed task, whatever
     * made it fail (files ferry could not copy after its own retries, a kill for time or memory, a
     * lost node, a usage error), gets `job_retries` more attempts, each asking for attempt × the
     * configured memory and time (conf/base.config); with job_retries 0, none. A task that stays
     * failed is ignored, so the other partitions go on (like Snakemake's keep-going); the report
     * then says the run is incomplete and the run ends in an error. `-resume` redoes just the
     * failed tasks.
     */
    static String strategy(task, int jobRetries) {
        if (task.attempt <= jobRetries)
            return 'retry'
        Path rec = task.workDir?.resolve('rec')
        if (rec != null && Files.exists(rec))
            FAILED.add(rec)
        return 'ignore'
    }

    static List<Path> failedRecords() {
        return new ArrayList<Path>(FAILED)
    }

    /**
     * The command of a task that runs a ferry step: workflow/scripts/ferry_task.py (through
     * bin/ferry-task) with the step's spec from the resolution, writing under `rec`, the task's
     * share of the run directory. The same command as the Snakemake rule's; with stub, on two
     * small local trees (-stub-run).
     */
    static String task(Map opts, String step, Map run) {
        def words = ['ferry-task', step, '--records', 'rec', '--spec', q(JsonOutput.toJson(run.spec))]
        if (opts.part != null)
            words += ['--part', q(opts.part)]
        if (opts.shard != null)
            words += ['--shard', q(opts.shard)]
        if (opts.out)
            words += ['--out', q(opts.out)]
        (opts.set ?: [:]).each { name, value -> words += ['--set', q("${name}=${value}")] }
        if (opts.stub)
            words << '--stub'
        return words.join(' ')
    }

    static String task(String step, Map run) {
        return task([:], step, run)
    }

    /**
     * The report task's command: every step's records gathered into `run/`, then
     * workflow/scripts/ferry_report.py over them with the resolution's run.report_argv, the
     * command the Snakemake rule runs (its stub too: the stub steps' records are the worker's own).
     */
    /**
     * The report over the gathered records (run/), and the history: the head's copy and this
     * run's start marker are staged in (staged/), laid out as on the head (history/ the run root,
     * history/<phase directory> the run's), appended to, and published back to the run root.
     */
    static String report(Map run, Object projectDir) {
        def phaseDir = new File(run.run_dir as String).name
        def args = fill(run.report_argv as List, [run_dir: 'run', history: "history/${phaseDir}"]).collect { q(it) }.join(' ')
        return """\
            mkdir -p run ${q("history/${phaseDir}")}
            for rec in rec*; do cp -RLp "\$rec/." run/; done
            cp -L staged/history.jsonl ${q("history/${run.layout.run_root.history}")}
            cp -L staged/started.json ${q("history/${phaseDir}/${run.layout.run_started}")}
            python3 "\${FERRY_SCRIPTS:-${projectDir}/workflow/scripts}/ferry_report.py" ${args}
            """.stripIndent()
    }

    /**
     * Each argument that is exactly `{name}` replaced by values[name], as ferry_task.py's fill
     * does for the steps' commands; a placeholder without a value is an error.
     */
    static List<String> fill(List argv, Map values) {
        return argv.collect { arg ->
            def m = (arg as String) =~ /^\{([A-Za-z_][A-Za-z0-9_]*)\}$/
            if (!m.matches())
                return arg as String
            if (!values.containsKey(m.group(1)))
                throw new IllegalArgumentException("ferry: no value for ${arg} in ${argv.take(2)}")
            return values[m.group(1)] as String
        }
    }

    /**
     * Where a step's record of `kind` (out, log, bench, failed) goes in the run directory's
     * layout (workflow/scripts/run_dir.json, in the step map as `layout`), for partition `part`.
     */
    static String record(Map run, String step, String kind, Object part = null) {
        def pattern = run.layout.steps[step][kind] as String
        if (pattern == null)
            throw new IllegalArgumentException("ferry: the layout has no ${kind} record for step ${step}")
        return part == null ? pattern : pattern.replace('{part}', part.toString())
    }

    /**
     * The run directory's folders that the steps' records go to ({copy,verify,...}, as a glob's
     * alternatives), but the listing's and the plan's, which their own processes publish: what
     * the REPORT process publishes of the records it gathered.
     */
    static String recordDirs(Map layout) {
        def dirs = new LinkedHashSet<String>()
        layout.steps.each { step, rec ->
            ['out', 'log', 'bench', 'failed'].each { kind ->
                def path = rec[kind] as String
                if (path?.contains('/'))
                    dirs << path.split('/')[0]
            }
        }
        dirs.removeAll([layout.listing_dir, layout.plan_dir])
        return dirs.join(',')
    }

    /**
     * Where list job `shard` of a list step leaves its record of `kind` (the layout's `sharded`
     * records); with shard null, the one list job's (the step's own records).
     */
    static String listRecord(Map run, String step, String kind, Object shard) {
        if (shard == null)
            return record(run, step, kind)
        def pattern = run.layout.steps[step].sharded[kind] as String
        return pattern.replace('{shard}', shard.toString())
    }

    /** The same record inside a task's `rec` directory, its share of the run directory. */
    static String rec(Map run, String step, String kind, Object part = null) {
        return 'rec/' + record(run, step, kind, part)
    }

    /** A word for bash: single-quoted, so spaces, quotes, tabs and newlines pass unchanged. */
    static String q(Object value) {
        return "'" + value.toString().replace("'", "'\\''") + "'"
    }
}
