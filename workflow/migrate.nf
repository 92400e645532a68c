// One phase of a migration (docs/pipeline.md): list -> plan -> one transfer and one verify per
// partition -> (final) prune -> final check -> report, the steps of the Snakemake pipeline.

include { LIST; MAKE_DEST } from './modules/list.nf'
include { PLAN            } from './modules/plan.nf'
include { TRANSFER        } from './modules/transfer.nf'
include { VERIFY          } from './modules/verify.nf'
include { PRUNE           } from './modules/prune.nf'
include { FINAL_CHECK     } from './modules/final_check.nf'
include { REPORT          } from './modules/report.nf'

workflow MIGRATE {
    take:
    cfg     // the resolved config (ferry_config.py resolve)
    run     // its derived values: run directory, ferry path, argument strings

    main:
    def phase = cfg.phase
    // What each step gets: only what it uses, so -resume after changing, say, the copy settings
    // still reuses the listings. run_dir is the run key of every step.
    def base = [run_dir: run.run_dir, ferry: run.ferry, auth_env: run.auth_env, final: run.final]
    def ends = base + [source: cfg.source, dest: cfg.dest]

    def sides = phase == 'baseline' ? [['source', cfg.source]] : [['source', cfg.source], ['dest', cfg.dest]]
    LIST(base + [list_args_sh: run.list_args_sh], channel.fromList(sides))
    def listings = LIST.out.listing.toList().map { pairs -> pairs.collectEntries() }
    def ready = Channel.value(true)
    def made = Channel.empty()
    if (phase == 'baseline') {
        MAKE_DEST(base + [source: cfg.source], cfg.dest)
        ready = MAKE_DEST.out.ready
        made = MAKE_DEST.out.rec
    }

    // Both listings present (or the source one in the baseline), else no plan is made.
    def wanted = phase == 'baseline' ? 1 : 2
    def inputs = listings.filter { it.size() == wanted }
    PLAN(base + [plan_args_sh: run.plan_args_sh],
         inputs.map { it.source }, inputs.map { it.dest ?: [] }, ready)

    def byPart = { f -> [f.name.replaceAll(/^part-|\.tsv$/, ''), f] }
    def copyParts = PLAN.out.copy.flatten().map(byPart)
    TRANSFER(ends + [copy_args_sh: run.copy_args_sh], copyParts)

    def verifyRun = ends + [verify_args_sh: run.verify_args_sh]
    if (phase == 'final') {
        // Every verify of the final phase looks at the whole destination: it starts once all
        // transfers of the plan have succeeded (none started if one failed).
        def planned = PLAN.out.plan.map { f -> new groovy.json.JsonSlurper().parseText(f.text).copy_partitions.size() }
        def copied = TRANSFER.out.json.count().combine(planned).filter { done, expected -> done == expected }
        VERIFY(verifyRun, PLAN.out.verify.flatten().map(byPart).combine(copied).map { part, manifest, done, expected -> [part, manifest] })
        // toList() emits also when no verify ran (collect() would not); PRUNE decides from the plan.
        PRUNE(ends + [prune_args_sh: run.prune_args_sh], PLAN.out.plan, VERIFY.out.json.map { it[1] }.toList())
        if (run.final_check)
            FINAL_CHECK(ends, PRUNE.out.json)
    }
    else {
        // A partition's verify checks what its own transfer just wrote.
        VERIFY(verifyRun, TRANSFER.out.json.join(copyParts).map { part, json, manifest -> [part, manifest] })
    }

    def records = LIST.out.rec.mix(made, PLAN.out.rec, TRANSFER.out.rec, VERIFY.out.rec)
    if (phase == 'final') {
        records = records.mix(PRUNE.out.rec)
        if (run.final_check)
            records = records.mix(FINAL_CHECK.out.rec)
    }
    // Once every step has ended, failed ones included: their records say what went wrong.
    REPORT(base + run.subMap(['run_name', 'source_redacted', 'dest_redacted', 'checksum', 'final_check']) + [phase: phase],
           records.toList().map { done -> done + Ferry.failedRecords() })

    emit:
    report = REPORT.out.json
}
