import groovy.json.JsonOutput
import groovy.json.JsonSlurper
import java.nio.file.Files
import java.nio.file.Path
import nextflow.exception.AbortOperationException

/**
 * The pipeline's configuration on the Nextflow side: checked and resolved by
 * workflow/scripts/ferry_config.py, the code the Snakemake pipeline runs, so both engines read
 * one config file through one schema and hand ferry the same arguments.
 */
class FerryConfig {

    /** {config: the resolved config, derived: run directory, ferry path, argument strings}. */
    static Map resolve(Map params, Path projectDir) {
        def script = projectDir.resolve('workflow/scripts/ferry_config.py').toString()
        def cmd = ['python3', script, 'resolve', '-', '--basedir', projectDir.toString(), '--absolute']
        def proc
        try {
            proc = cmd.execute()
        }
        catch (IOException err) {
            throw new AbortOperationException("ferry: cannot run python3 to check the configuration (${err.message}); " +
                'it needs python3 with PyYAML and jsonschema (scripts/setup.sh installs them in .venv)')
        }
        proc.outputStream.withWriter('UTF-8') { it << JsonOutput.toJson(params) }
        def out = new StringBuilder(), err = new StringBuilder()
        proc.waitForProcessOutput(out, err)
        if (proc.exitValue() != 0)
            throw new AbortOperationException(err.toString().trim() ?: "ferry: ${script} failed (exit ${proc.exitValue()})")
        return new JsonSlurper().parseText(out.toString()) as Map
    }

    /**
     * After the report: a complete run clears what an earlier failed attempt left in the run
     * directory; an incomplete one ends the run in an error that names its report.
     */
    static void finish(Path reportJson, String runDir) {
        def report = new JsonSlurper().parseText(reportJson.text) as Map
        def dir = nextflow.Nextflow.file(runDir) as Path
        if (report.status == 'complete') {
            for (name in ['report-incomplete.json', 'report-incomplete.md'])
                Files.deleteIfExists(dir.resolve(name))
            def failed = dir.resolve('failed')
            if (Files.isDirectory(failed))
                failed.deleteDir()
            return
        }
        def failures = (report.failures ?: []) as List<Map>
        def first = failures ? failures[0] : null
        def what = first ? "${first.stage}${first.partition != null ? ' partition ' + first.partition : ''}: ${first.error ?: first.reason ?: first.status}" : 'a step did not finish'
        throw new AbortOperationException("ferry: the ${report.phase} phase is incomplete (${failures.size()} failures; first: ${what}); " +
            "see ${runDir}/report-incomplete.md. Run again with -resume to redo only what failed.")
    }
}
