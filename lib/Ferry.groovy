import groovy.json.JsonOutput
import java.nio.file.Files
import java.nio.file.Path
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.regex.Matcher
import java.util.regex.Pattern

/**
 * Helpers of the Nextflow pipeline that processes and the workflow share.
 */
class Ferry {

    // The run directory's layout (workflow/scripts/run_dir.json, as the resolution gave it), set
    // once by main.nf before any process is made: the names processes stage their inputs under
    // are fixed when a process is defined, before any task has its `run`.
    static Map LAYOUT

    static void use(Map layout) {
        LAYOUT = layout
    }

    // run_dir.json's `placeholders`: {name}, name a letter or _, then letters, digits or _.
    private static final Pattern PLACEHOLDER = ~/\{([A-Za-z_][A-Za-z0-9_]*)\}/

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
            cp -L ${q(staged(run.layout.run_root.history))} ${q("history/${run.layout.run_root.history}")}
            cp -L ${q(staged(run.layout.run_started))} ${q("history/${phaseDir}/${run.layout.run_started}")}
            python3 "\${FERRY_SCRIPTS:-${projectDir}/workflow/scripts}/ferry_report.py" ${args}
            """.stripIndent()
    }

    /**
     * The pattern with each {name} replaced by values[name] as it is (never expanded again); any
     * other brace stays as written; a name without a value is an error (run_dir.json's
     * `placeholders`, as ferry_run_dir.expand and the worker's run_dir::expand).
     */
    static String expand(String pattern, Map values) {
        Matcher m = PLACEHOLDER.matcher(pattern)
        def out = new StringBuffer()
        while (m.find()) {
            def value = values[m.group(1)]
            if (value == null)
                throw new IllegalArgumentException("ferry: no value for ${m.group(0)} in '${pattern}'")
            m.appendReplacement(out, Matcher.quoteReplacement(value.toString()))
        }
        m.appendTail(out)
        return out.toString()
    }

    /**
     * A step's command with each argument that is exactly `{name}` replaced by values[name] (a
     * list: that many arguments); any other argument stays as written; a name without a value is
     * an error (run_dir.json's `placeholders`, as ferry_run_dir.fill).
     */
    static List<String> fill(List argv, Map values) {
        return argv.collectMany { arg ->
            Matcher m = PLACEHOLDER.matcher(arg as String)
            if (!m.matches())
                return [arg as String]
            if (!values.containsKey(m.group(1)))
                throw new IllegalArgumentException("ferry: no value for ${arg} in ${argv.take(2)}")
            def value = values[m.group(1)]
            return value instanceof List ? value.collect { it as String } : [value as String]
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
        return expand(pattern, [part: part])
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
        return expand(run.layout.steps[step].sharded[kind] as String, [shard: shard])
    }

    /** The same record inside a task's `rec` directory, its share of the run directory. */
    static String rec(Map run, String step, String kind, Object part = null) {
        return inRec(record(run, step, kind, part))
    }

    /** A path of the run directory inside a task's `rec` directory. */
    static String inRec(String path) {
        return "rec/${path}"
    }

    /** What a task stages under `rec` of another step's records of `kind` (their folder's files). */
    static String recordsOf(String step, String kind) {
        def pattern = LAYOUT.steps[step][kind] as String
        return inRec(pattern.substring(0, pattern.lastIndexOf('/') + 1) + '*')
    }

    /** The cuts of the key space the list jobs share (the shard step's output). */
    static String shards() {
        return LAYOUT.steps.shard.out as String
    }

    /** Every file of the listing folder. */
    static String listings() {
        return "${LAYOUT.listing_dir}/*"
    }

    /** The plan directory, or the folder of one step's parts in it (copy, verify, prune). */
    static String planDir(String step = null) {
        return step == null ? LAYOUT.plan_dir as String : "${LAYOUT.plan_dir}/${LAYOUT.plan_files.parts[step]}"
    }

    /** The plan's own document (plan.json in the plan directory). */
    static String plan() {
        return "${planDir()}/${LAYOUT.plan_files.plan}"
    }

    /** Part `part` of a step's parts in the plan; '*': every part, as a glob. */
    static String planPart(String step, Object part) {
        return "${planDir(step)}/${expand(LAYOUT.parts.part as String, [part: part])}"
    }

    /** A part's name: its file's without the extension (the tasks' tag). */
    static String partName(Object part) {
        def file = expand(LAYOUT.parts.part as String, [part: part])
        return file.substring(0, file.lastIndexOf('.'))
    }

    /** The id of the part a part's file name is (as the plan gives it). */
    static String partId(String name) {
        def pattern = LAYOUT.parts.part as String
        def at = pattern.indexOf('{part}')
        def (head, tail) = [pattern.substring(0, at), pattern.substring(at + '{part}'.length())]
        if (!name.startsWith(head) || !name.endsWith(tail) || name.length() <= head.length() + tail.length())
            throw new IllegalArgumentException("ferry: ${name} is not a part's file (${pattern})")
        return name.substring(head.length(), name.length() - tail.length())
    }

    /** The report task's staged copy of a run-root or run-directory file `name`. */
    static String staged(String name) {
        return "staged/${name}"
    }

    /** The report's files of one form (json, md, html), complete or not, as a glob under `run/`. */
    static String reports(String form) {
        return "run/{${LAYOUT.report[form]},${LAYOUT.incomplete_report[form]}}"
    }

    /** A word for bash: single-quoted, so spaces, quotes, tabs and newlines pass unchanged. */
    static String q(Object value) {
        return "'" + value.toString().replace("'", "'\\''") + "'"
    }
}
