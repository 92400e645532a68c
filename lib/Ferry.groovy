import groovy.json.JsonOutput
import java.nio.file.Files
import java.nio.file.Path
import java.util.concurrent.ConcurrentLinkedQueue

/**
 * Helpers of the Nextflow pipeline that processes and the workflow share.
 */
class Ferry {

    // Exit statuses that say the task was cut short (killed, out of memory, preempted, over its
    // time), not that ferry judged the data: worth another attempt with more resources.
    // 130/143: SIGINT/SIGTERM; 137: SIGKILL (OOM killer, Slurm time limit); 104/134/139: crashes;
    // 140: Slurm/SGE over a limit; Integer.MAX_VALUE: Nextflow lost the task (node gone).
    static final Set<Integer> INTERRUPTED = [104, 130, 134, 137, 139, 140, 143, Integer.MAX_VALUE] as Set

    // Records (the `rec` directory of docs/pipeline.md's layout) of tasks that failed for good:
    // the report reads them to say what went wrong.
    private static final Queue<Path> FAILED = new ConcurrentLinkedQueue<Path>()

    /**
     * errorStrategy of every ferry step. ferry exits 1 when files failed after its own retries
     * (a storage outage, a throttled account): worth `job_retries` more attempts, as in the
     * Snakemake pipeline. Exit 2 is a usage or configuration error: never retried. Interrupted
     * tasks get up to three attempts with growing resources. A task that stays failed is ignored, so
     * the other partitions go on (like Snakemake's keep-going); the report then says the run is
     * incomplete and the run ends in an error. `-resume` redoes just the failed tasks.
     */
    static String strategy(task, int jobRetries) {
        Integer status = task.exitStatus as Integer
        if (status == 1 && task.attempt <= jobRetries)
            return 'retry'
        if (status in INTERRUPTED && task.attempt < Math.max(3, jobRetries + 1))
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
     * workflow/scripts/ferry_report.py over them, as the Snakemake rule runs it (its stub too: the
     * stub steps' records are the worker's own).
     */
    static String report(Map run, Object projectDir) {
        def args = run.report_args.collect { q(it) }.join(' ')
        return """\
            mkdir run
            for rec in rec*; do cp -RLp "\$rec/." run/; done
            python3 "\${FERRY_SCRIPTS:-${projectDir}/workflow/scripts}/ferry_report.py" build run ${args} --by-status
            """.stripIndent()
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
