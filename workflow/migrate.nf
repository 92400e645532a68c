// One phase of a migration (docs/pipeline.md): (shard ->) list -> plan -> one copy and one verify per
// partition -> (final) prune -> carry -> report, the steps of the Snakemake pipeline; the audit
// lists both sides afresh and verifies every partition of the whole tree.

include { SHARD           } from './modules/shard.nf'
include { LIST; MAKE_DEST } from './modules/list.nf'
include { PLAN            } from './modules/plan.nf'
include { COPY            } from './modules/copy.nf'
include { VERIFY          } from './modules/verify.nf'
include { PRUNE; PRUNE_DIRS } from './modules/prune.nf'
include { FINAL_CHECK     } from './modules/final_check.nf'
include { CARRY           } from './modules/carry.nf'
include { REPORT          } from './modules/report.nf'

workflow MIGRATE {
    take:
    run     // the resolution's run: directory, phase, report arguments (ferry_config.py resolve)
    steps   // the resolution's steps: each step's command and environment
    layout  // the run directory's layout (workflow/scripts/run_dir.json)

    main:
    def phase = run.phase
    // What each task gets: its run directory (the run key: a new phase or pass never reuses an
    // old listing) and its own step's spec, so -resume after changing, say, the copy settings
    // still reuses the listings.
    def step = { name -> [run_dir: run.dir, spec: steps[name], layout: layout] }

    def sides = phase == 'baseline' ? ['source'] : ['source', 'dest']
    // With list.jobs > 1, SHARD cuts the key space first and each side is listed by one task per
    // range (run.shards: 1 to list.jobs), each its own job; with one, a task per side, shard null.
    def shards = Channel.value([])
    def made = Channel.empty()
    if (run.shards) {
        SHARD(step('shard'))
        shards = SHARD.out.shards
        made = SHARD.out.rec
    }
    def jobs = run.shards ?: [null]
    LIST(channel.fromList(sides.collectMany { side -> jobs.collect { shard -> [side, shard, step("list_${side}")] } }), shards)
    // {side: [its listings]}, once every list task has ended.
    def listings = LIST.out.listing.toList().map { pairs ->
        pairs.groupBy { it[0] }.collectEntries { side, found -> [side, found.collect { it[1] }] }
    }
    def ready = Channel.value(true)
    if (phase == 'baseline') {
        MAKE_DEST(step('make_dest'))
        ready = MAKE_DEST.out.ready
        made = made.mix(MAKE_DEST.out.rec)
    }

    // Every listing of both sides present (or of the source in the baseline), else no plan is made.
    def wanted = phase == 'baseline' ? 1 : 2
    def inputs = listings.filter { it.size() == wanted && it.values().every { it.size() == jobs.size() } }
    PLAN(step('plan'), inputs.map { it.source }, inputs.map { it.dest ?: [] }, ready, shards)

    def byPart = { f -> [Ferry.partId(f.name), f] }
    def copyParts = PLAN.out.copy.flatten().map(byPart)
    COPY(step('copy'), copyParts)

    if (phase == 'audit') {
        // The audit copies nothing: its verify partitions cover the whole source.
        VERIFY(step('verify'), PLAN.out.verify.flatten().map(byPart))
    }
    else {
        // A partition's verify checks what its own copy just wrote.
        VERIFY(step('verify'), COPY.out.json.join(copyParts).map { part, json, manifest -> [part, manifest] })
    }
    if (phase == 'final') {
        // toList() emits also when no verify ran (collect() would not); the prune step's guard
        // decides from the plan.
        // One task per part of the files to delete, then one for the directories, after them all.
        def verified = VERIFY.out.json.map { it[1] }.toList()
        def plan = PLAN.out.plan
        PRUNE(step('prune'), plan, verified, plan, PLAN.out.prune.flatten().map(byPart))
        PRUNE_DIRS(step('prune_dirs'), plan, verified, plan, PLAN.out.prune_dir, PRUNE.out.json.toList())
        if (run.final_check)
            FINAL_CHECK(step('final_check'), PRUNE_DIRS.out.json)
    }

    // Once every verify has ended (and prune, in the final phase): a verify that failed left no
    // record of what it saw, and the step then refuses, so the next pass lists fresh. The
    // audit's fresh listing is the destination as it is: it is carried whatever verify finds.
    if (phase == 'audit')
        CARRY(step('carry'), PLAN.out.plan, Channel.value([]), inputs.map { it.dest }, Channel.value([]), shards)
    else
        CARRY(step('carry'), PLAN.out.plan, VERIFY.out.observed.toList(), inputs.map { it.dest ?: [] },
              phase == 'final' ? PRUNE.out.deleted.mix(PRUNE_DIRS.out.deleted).toList() : Channel.value([]), shards)

    def records = LIST.out.rec.mix(made, PLAN.out.rec, COPY.out.rec, VERIFY.out.rec, CARRY.out.rec)
    if (phase == 'final') {
        records = records.mix(PRUNE.out.rec, PRUNE_DIRS.out.rec)
        if (run.final_check)
            records = records.mix(FINAL_CHECK.out.rec)
    }
    // Once every step has ended, failed ones included: their records say what went wrong.
    def root = new File(run.dir as String).parent
    REPORT([run_dir: run.dir, run_root: root, report_argv: run.report_argv, layout: layout],
           records.toList().map { done -> done + Ferry.failedRecords() },
           file("${root}/${layout.run_root.history}"), file("${run.dir}/${layout.run_started}"))

    emit:
    report = REPORT.out.json
}
