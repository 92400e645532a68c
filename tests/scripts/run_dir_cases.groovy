// The `placeholders` rule as lib/Ferry.groovy has it, over run_dir_cases.json (the file named
// first): each case's result, or {"error": true}, as one JSON document (tests/scripts/test_run_dir.py).
import groovy.json.JsonOutput
import groovy.json.JsonSlurper

def cases = new JsonSlurper().parse(new File(args[0]))
def attempt = { Closure<Object> work ->
    try {
        return work()
    } catch (IllegalArgumentException ignored) {
        return [error: true]
    }
}
println JsonOutput.toJson([
    expand: cases.expand.collect { c -> attempt { Ferry.expand(c.pattern as String, c.values as Map) } },
    fill: cases.fill.collect { c -> attempt { Ferry.fill(c.argv as List, c.values as Map) } },
])
